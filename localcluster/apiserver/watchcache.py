"""The recent watch events in memory, and the live watchers they fan out to.

A watch starting at resourceVersion R replays the events newer than R from this ring and
then follows new ones; when R is older than the ring (and than the on-disk history it was
loaded from at start), the watch gets 410 Gone and the client re-lists, as upstream.
Everything runs on the server's event loop, so taking the replay and subscribing happen
with no event in between.
"""

from __future__ import annotations

import asyncio
import json
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from .errors import gone
from .store import Event, Store, Stored


@dataclass(eq=False)
class Watcher:
    gr: str
    ns: str | None
    queue: asyncio.Queue[Event | None] = field(default_factory=asyncio.Queue)

    def wants(self, event: Event) -> bool:
        return event.gr == self.gr and (self.ns is None or event.ns == self.ns)


class WatchCache:
    def __init__(self, store: Store, *, capacity: int) -> None:
        self._capacity = capacity
        floor = max(store.compacted_rv, store.rv - capacity)
        self._events: deque[Event] = deque()
        # The state before each event is the previous event of the same object, when it
        # is in the window (watches with selectors need it to see objects leave them).
        last: dict[tuple[str, str, str], dict[str, Any]] = {}
        for rv, gr, ns, etype, data in store.history(floor):
            obj = json.loads(data)
            key = (gr, ns, str(obj.get("metadata", {}).get("name")))
            self._events.append(Event(rv, gr, ns, etype, Stored(obj, data, rv),
                                      last.get(key)))
            if etype == "DELETED":
                last.pop(key, None)
            else:
                last[key] = obj
        # Watches from below this version have missed events: 410.
        self.compacted_rv = floor
        self._watchers: set[Watcher] = set()

    def append(self, event: Event) -> None:
        self._events.append(event)
        while len(self._events) > self._capacity:
            self.compacted_rv = self._events.popleft().rv
        for watcher in self._watchers:
            if watcher.wants(event):
                watcher.queue.put_nowait(event)

    def since(self, rv: int, *, gr: str, ns: str | None, current_rv: int) -> list[Event]:
        if rv < self.compacted_rv:
            raise gone(f"too old resource version: {rv} ({current_rv})")
        probe = Watcher(gr, ns)
        out: list[Event] = []
        for event in reversed(self._events):
            if event.rv <= rv:
                break
            if probe.wants(event):
                out.append(event)
        out.reverse()
        return out

    def subscribe(self, gr: str, ns: str | None) -> Watcher:
        watcher = Watcher(gr, ns)
        self._watchers.add(watcher)
        return watcher

    def unsubscribe(self, watcher: Watcher) -> None:
        self._watchers.discard(watcher)

    def close_all(self) -> None:
        for watcher in self._watchers:
            watcher.queue.put_nowait(None)
        self._watchers.clear()
