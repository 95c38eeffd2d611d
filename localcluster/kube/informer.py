"""Informers and a level-triggered controller loop, in threads.

An :class:`Informer` lists a resource, then watches it from the list's resourceVersion,
keeping a local cache; on 410 Gone or a dropped connection it lists again. Every change
wakes the :class:`Loop` s that registered with it. A loop reconciles *everything* it
owns on each wake-up (and every ``resync`` seconds): on a one-node cluster the object
counts are small, and a full pass is simpler and more robust than per-key queues.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from kubeclient import Client, KubeError, Obj, Resource

logger = logging.getLogger(__name__)


def json_copy(obj: Obj) -> Obj:
    """A deep copy of a decoded JSON object (dicts, lists and scalars only), about twice
    as fast as ``copy.deepcopy``, which keeps a memo and looks up each type's copier: the
    node side copies what its informers hand out, many times a second."""
    return {k: _copy(v) for k, v in obj.items()}


def _copy(value: object) -> object:
    if isinstance(value, dict):
        return {k: _copy(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_copy(v) for v in value]
    return value


def key_of(obj: Obj) -> tuple[str, str]:
    meta = obj.get("metadata") or {}
    return (str(meta.get("namespace") or ""), str(meta.get("name")))


class Informer:
    def __init__(self, kube: Client, resource: Resource, *, watch_timeout: int = 300) -> None:
        self.kube = kube
        self.resource = resource
        self.watch_timeout = watch_timeout
        self._cache: dict[tuple[str, str], Obj] = {}
        self._lock = threading.Lock()
        self._listeners: list[Callable[[], None]] = []
        self._stop = threading.Event()
        self.synced = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True,
                                        name=f"informer:{resource.plural}")

    def add_listener(self, fn: Callable[[], None]) -> None:
        self._listeners.append(fn)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def list(self, namespace: str | None = None) -> list[Obj]:
        with self._lock:
            objs = [o for (ns, _), o in self._cache.items() if namespace in (None, ns)]
        return [json_copy(o) for o in objs]

    def get(self, name: str, namespace: str = "") -> Obj | None:
        with self._lock:
            obj = self._cache.get((namespace, name))
        return json_copy(obj) if obj is not None else None

    def _notify(self) -> None:
        for fn in self._listeners:
            fn()

    def _relist(self) -> str:
        result = self.kube.list_object(self.resource)
        with self._lock:
            self._cache = {key_of(o): o for o in result.get("items") or []}
        self.synced.set()
        self._notify()
        return str((result.get("metadata") or {}).get("resourceVersion") or "")

    def _run(self) -> None:
        rv = ""
        while not self._stop.is_set():
            try:
                if not rv:
                    rv = self._relist()
                for event in self.kube.watch(self.resource, resource_version=rv,
                                             timeout=self.watch_timeout):
                    if self._stop.is_set():
                        return
                    etype, obj = event.get("type"), event.get("object") or {}
                    if etype == "ERROR":
                        logger.debug("watch %s: %s", self.resource.plural, obj.get("message"))
                        rv = ""
                        break
                    rv = str((obj.get("metadata") or {}).get("resourceVersion") or rv)
                    if etype == "BOOKMARK":
                        continue
                    with self._lock:
                        if etype == "DELETED":
                            self._cache.pop(key_of(obj), None)
                        else:
                            self._cache[key_of(obj)] = obj
                    self._notify()
            except KubeError as err:
                if not self._stop.is_set():
                    logger.debug("watch %s failed: %s", self.resource.plural, err)
                rv = "" if err.status == 410 else rv
                self._stop.wait(0.5)
            except Exception as err:
                if self._stop.is_set():
                    return
                logger.debug("watch %s dropped: %s", self.resource.plural, err)
                rv = ""
                self._stop.wait(0.5)


class Loop:
    """Calls ``reconcile()`` on every wake-up and at least every ``resync`` seconds."""

    def __init__(self, name: str, reconcile: Callable[[], None], *, resync: float = 5.0,
                 informers: tuple[Informer, ...] = ()) -> None:
        self.name = name
        self.reconcile = reconcile
        self.resync = resync
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._informers = informers
        for inf in informers:
            inf.add_listener(self.wake)
        self._thread = threading.Thread(target=self._run, daemon=True, name=f"loop:{name}")

    def wake(self) -> None:
        self._wake.set()

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()

    def join(self, timeout: float | None = None) -> None:
        self._thread.join(timeout)

    def _run(self) -> None:
        for inf in self._informers:
            while not inf.synced.wait(0.2):
                if self._stop.is_set():
                    return
        while not self._stop.is_set():
            self._wake.wait(self.resync)
            self._wake.clear()
            if self._stop.is_set():
                return
            try:
                self.reconcile()
            except Exception:
                logger.exception("%s: reconcile failed", self.name)
                time.sleep(0.2)
