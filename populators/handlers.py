"""kopf wiring of the populators (the only module importing kopf).

Watch events of target PVCs, of PVC' and of the importer pods all lead to one
reconcile of the target (``populators.reconcile``). Targets that still have something to
wait for (a pod running, a volume being rebound) are kept in a set that a ticker task
reconciles every :data:`TICK` seconds, since not every change they wait for is a watch
event of theirs (progress lives in the pod's metrics). No kopf timers or daemons: those
put a finalizer on every PVC, and a stopped operator would then block users' deletions.

The operator program (``python -m rootdisk.operator --controllers cdi``) imports this
module; ``kopf run -m populators.handlers`` runs it alone. Environment: see
``Settings.from_env`` (``IMPORTER_IMAGE`` …); the API is reached in-cluster or through
the kubeconfig.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import threading
from dataclasses import dataclass, field
from typing import Any

import kopf

from populators import names
from populators.import_populator import ImportPopulator
from populators.importer_pod import Settings
from populators.kube import Kube, connection_params, load_configuration
from populators.reconcile import Reconciler

logger = logging.getLogger(__name__)

TICK = 2.0
"""Seconds between looks at active targets (upstream requeues every 2 s too)."""
CONCURRENCY = 8
"""Targets reconciled at once by the ticker."""


@dataclass
class _State:
    reconciler: Reconciler | None = None
    active: set[tuple[str, str]] = field(default_factory=set)
    lock: threading.Lock = field(default_factory=threading.Lock)
    ticker: asyncio.Task[None] | None = None


_state = _State()


def _run(namespace: str, name: str) -> None:
    reconciler = _state.reconciler
    if reconciler is None:
        return
    try:
        again = reconciler.reconcile(namespace, name)
    except Exception:
        logger.exception("reconcile of %s/%s failed; trying again", namespace, name)
        again = True
    with _state.lock:
        if again:
            _state.active.add((namespace, name))
        else:
            _state.active.discard((namespace, name))


async def _tick() -> None:
    loop = asyncio.get_running_loop()
    gate = asyncio.Semaphore(CONCURRENCY)

    async def one(key: tuple[str, str]) -> None:
        async with gate:
            await loop.run_in_executor(None, _run, *key)

    while True:
        await asyncio.sleep(TICK)
        with _state.lock:
            keys = sorted(_state.active)
        if keys:
            await asyncio.gather(*(one(k) for k in keys))


LOGIN_PRIORITY = 10
"""Below the operator program's own login (rootdisk.operator), which wins when both run."""


@kopf.on.login()
def _login(**_: Any) -> kopf.ConnectionInfo:
    """In a pod: the service account (through KUBERNETES_SERVICE_HOST/PORT); else the
    kubeconfig named by KUBECONFIG now."""
    params = connection_params(os.environ.get("KUBECONFIG") or None)
    return kopf.ConnectionInfo(**params, priority=LOGIN_PRIORITY)


@kopf.on.startup()
async def _startup(**_: Any) -> None:
    kube = Kube(load_configuration(os.environ.get("KUBECONFIG") or None))
    _state.reconciler = Reconciler(kube, ImportPopulator(), Settings.from_env(os.environ))
    with _state.lock:
        _state.active.clear()
    _state.ticker = asyncio.create_task(_tick())


@kopf.on.cleanup()
async def _cleanup(**_: Any) -> None:
    if _state.ticker is not None:
        _state.ticker.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await _state.ticker
    if _state.reconciler is not None:
        _state.reconciler.kube.close()
        _state.reconciler.close()
    _state.reconciler, _state.ticker = None, None


@kopf.on.event("", "v1", "persistentvolumeclaims")
def _claim_event(body: kopf.Body, type: str | None, **_: Any) -> None:
    reconciler = _state.reconciler
    if reconciler is None:
        return
    meta = body.get("metadata") or {}
    ns, name = str(meta.get("namespace")), str(meta.get("name"))
    if reconciler.is_target(body):
        if type == "DELETED":
            with _state.lock:
                _state.active.discard((ns, name))
            reconciler.forget(f"{ns}/{name}", str(meta.get("uid")))
            _via_prime(reconciler, ns, names.prime_name(str(meta.get("uid"))))
            return
        _run(ns, name)
        return
    ann = meta.get("annotations") or {}
    if ann.get(names.POPULATOR_KIND) == reconciler.populator.kind and type != "DELETED":
        _via_prime(reconciler, ns, name)


@kopf.on.event("", "v1", "pods", labels={names.APP_LABEL: names.APP_VALUE,
                                          names.COMPONENT_LABEL: "importer"})
def _pod_event(body: kopf.Body, **_: Any) -> None:
    reconciler = _state.reconciler
    if reconciler is None:
        return
    meta = body.get("metadata") or {}
    for ref in meta.get("ownerReferences") or []:
        if ref.get("controller") and ref.get("kind") == "PersistentVolumeClaim":
            _via_prime(reconciler, str(meta.get("namespace")), str(ref.get("name")))


def _via_prime(reconciler: Reconciler, namespace: str, prime: str) -> None:
    """Reconcile PVC''s target (or clean up after a target that is gone)."""
    try:
        target = reconciler.target_of_prime(namespace, prime)
    except Exception:
        logger.exception("handling PVC' %s/%s failed", namespace, prime)
        return
    if target is not None:
        _run(namespace, target)
