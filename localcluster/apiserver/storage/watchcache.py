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

from ..errors import gone
from .store import Event, Store, Stored, dumps

Key = tuple[str, str]


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

    def state_at(self, rv: int, *, gr: str, ns: str | None, current: list[tuple[Key, Stored]],
                 current_rv: int) -> list[tuple[Key, Stored]]:
        """The objects of ``gr`` (in ``ns``) as they were at ``rv``: the current ones with
        the events since ``rv`` undone, newest first. 410 when the window does not reach
        back to ``rv`` (or lost an object's earlier state in a restart)."""
        expired = gone(f"The provided continue parameter is too old to display a consistent "
                       f"list result (resourceVersion {rv}, history kept from "
                       f"{self.compacted_rv}). You can start a new list without the "
                       f"continue parameter.")
        if rv < self.compacted_rv:
            raise expired
        state = dict(current)
        for event in reversed(self.since(rv, gr=gr, ns=ns, current_rv=current_rv)):
            key = (event.ns, str(event.stored.obj["metadata"]["name"]))
            if event.type == "ADDED":
                state.pop(key, None)
                continue
            previous = event.previous
            if previous is None:
                raise expired
            state[key] = Stored(previous, dumps(previous),
                                int(previous["metadata"]["resourceVersion"]))
        return sorted(state.items(), key=lambda item: item[0])

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
