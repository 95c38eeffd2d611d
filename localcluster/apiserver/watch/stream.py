"""One watch stream: replay from a resourceVersion, then follow, as JSON lines.

Events come from the watch cache (replay, then a live subscription taken with no event in
between). Each is filtered by name and selectors -- an object that stops matching a
selector is sent as DELETED, one that starts matching as ADDED, as kube-apiserver does --
and written from the stored JSON text, batched when several are waiting. A watch from a
resourceVersion older than the cache gets one ERROR event (410 Expired) and ends; the
stream ends at ``timeoutSeconds`` (with a last BOOKMARK when bookmarks were asked for) or
when the server stops.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from ..backend import Backend
from ..errors import APIError, bad_request
from ..kinds.registry import ResourceType
from ..storage.store import Event, Stored
from .list_options import INITIAL_EVENTS_END

Obj = dict[str, Any]
RenderTable = Callable[[list[Stored], ResourceType, Obj, str], Obj]


def matches(obj: Obj, label_selector: Any, field_selector: Any) -> bool:
    if label_selector is not None and not label_selector.matches(
            (obj.get("metadata") or {}).get("labels") or {}):
        return False
    return field_selector is None or bool(field_selector.matches(obj))


@dataclass(frozen=True)
class WatchOptions:
    resource_version: str
    timeout: float
    bookmarks: bool
    bookmark_interval: float
    label_selector: Any = None
    field_selector: Any = None
    only_name: str = ""
    table: str | None = None
    """``includeObject`` of a Table watch (kubectl get -w), None for objects."""
    send_initial_events: bool = False
    """A "watch list": the current objects, then the initial-events-end BOOKMARK."""


class WatchStream:
    def __init__(self, backend: Backend, rt: ResourceType, namespace: str | None,
                 options: WatchOptions, *, closing: asyncio.Event,
                 render_table: RenderTable, warnings: tuple[str, ...] = ()) -> None:
        self.backend = backend
        self.rt = rt
        self.namespace = namespace
        self.options = options
        self.closing = closing
        self.render_table = render_table
        self.warnings = warnings  # Warning header values (a deprecated version's)

    def _start(self) -> tuple[list[tuple[str, Stored, Obj | None]], APIError | None]:
        rv_text = self.options.resource_version
        if rv_text in ("", "0") or self.options.send_initial_events:
            return [("ADDED", s, None) for _, s in
                    self.backend.list_stored(self.rt, self.namespace)], None
        try:
            since = int(rv_text)
        except ValueError:
            raise bad_request(f'resourceVersion: Invalid value: "{rv_text}": must be an '
                              "integer") from None
        try:
            events = self.backend.watchcache.since(since, gr=self.rt.group_resource,
                                                   ns=self.namespace,
                                                   current_rv=self.backend.store.rv)
        except APIError as err:
            return [], err
        return [(e.type, e.stored, e.previous) for e in events], None

    async def serve(self, request: web.Request) -> web.StreamResponse:
        opts = self.options
        deadline = time.monotonic() + opts.timeout
        initial, error = self._start()
        initial_rv = self.backend.store.rv  # what the initial events show
        cache = self.backend.watchcache
        watcher = cache.subscribe(self.rt.group_resource, self.namespace) \
            if error is None else None
        response = web.StreamResponse(headers={"Content-Type": "application/json"})
        for value in self.warnings:
            response.headers.add("Warning", value)
        response.enable_chunked_encoding()
        await response.prepare(request)
        try:
            if error is not None or watcher is None:
                status = error.to_status() if error is not None else {}
                await response.write((json.dumps({"type": "ERROR", "object": status})
                                      + "\n").encode())
                return response
            await self._write(response, [self._line(etype, stored, previous)
                                         for etype, stored, previous in initial])
            if opts.send_initial_events:
                await response.write(self._bookmark(initial_rv, initial_end=True).encode())
            last_sent = time.monotonic()
            while not self.closing.is_set():
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                wait = min(remaining, opts.bookmark_interval) if opts.bookmarks else remaining
                try:
                    event = await asyncio.wait_for(watcher.queue.get(), timeout=wait)
                except TimeoutError:
                    if opts.bookmarks and \
                            time.monotonic() - last_sent >= opts.bookmark_interval * 0.9:
                        await response.write(self._bookmark(self.backend.store.rv).encode())
                        last_sent = time.monotonic()
                    continue
                batch: list[Event | None] = [event]
                while not watcher.queue.empty():
                    batch.append(watcher.queue.get_nowait())
                stop = None in batch
                events = [e for e in batch[:batch.index(None)] if e is not None] if stop \
                    else [e for e in batch if e is not None]
                if await self._write(response, [self._line(e.type, e.stored, e.previous)
                                                for e in events]):
                    last_sent = time.monotonic()
                if stop:
                    break
            if opts.bookmarks and not self.closing.is_set():
                await response.write(self._bookmark(self.backend.store.rv).encode())
        except ConnectionError:
            pass  # the client went away
        finally:
            if watcher is not None:
                cache.unsubscribe(watcher)
        with contextlib.suppress(ConnectionError, RuntimeError):
            await response.write_eof()
        return response

    @staticmethod
    async def _write(response: web.StreamResponse, lines: list[str]) -> bool:
        text = "".join(lines)
        if text:
            await response.write(text.encode())
        return bool(text)

    def _bookmark(self, rv: int, *, initial_end: bool = False) -> str:
        meta: Obj = {"resourceVersion": str(rv)}
        if initial_end:
            meta["annotations"] = {INITIAL_EVENTS_END: "true"}
        return json.dumps({"type": "BOOKMARK", "object": {
            "kind": self.rt.kind, "apiVersion": self.rt.api_version, "metadata": meta}},
            separators=(",", ":")) + "\n"

    def _line(self, etype: str, stored: Stored, previous: Obj | None) -> str:
        """The event as a JSON line, or "" when this watch does not see it."""
        rt, opts = self.rt, self.options
        if opts.only_name and stored.obj["metadata"].get("name") != opts.only_name:
            return ""
        if opts.label_selector is not None or opts.field_selector is not None:
            now_obj = self.backend.view(rt, stored) if rt.from_storage or opts.field_selector \
                else stored.obj
            now_match = matches(now_obj, opts.label_selector, opts.field_selector)
            if previous is not None and etype == "MODIFIED":
                prev = rt.from_storage(previous) if rt.from_storage else previous
                was = matches(prev, opts.label_selector, opts.field_selector)
                if was and not now_match:
                    etype, now_match = "DELETED", True
                elif now_match and not was:
                    etype = "ADDED"
            if not now_match:
                return ""
        if opts.table is not None:
            table = self.render_table([stored], rt, {"resourceVersion": str(stored.rv)},
                                      opts.table)
            return json.dumps({"type": etype, "object": table}, separators=(",", ":")) + "\n"
        return '{"type":"' + etype + '","object":' + self.backend.view_raw(rt, stored) + "}\n"
