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

from kubeclient import Client, connection_params, load_configuration
from populators import names
from populators.clone_populator import ClonePopulator, CloneReconciler
from populators.import_populator import ImportPopulator
from populators.importer_pod import Settings
from populators.reconcile import Reconciler
from populators.upload_populator import COMPONENT as UPLOAD_COMPONENT
from populators.upload_populator import UploadPopulator
from populators.upload_reconcile import UploadReconciler
from vocab import cdi as api

logger = logging.getLogger(__name__)

TICK = 2.0
"""Seconds between looks at active targets (upstream requeues every 2 s too)."""
CONCURRENCY = 8
"""Targets reconciled at once by the ticker."""


@dataclass
class _State:
    reconcilers: dict[str, Reconciler] = field(default_factory=dict)
    """By the dataSourceRef kind they serve."""
    active: set[tuple[str, str, str]] = field(default_factory=set)
    lock: threading.Lock = field(default_factory=threading.Lock)
    ticker: asyncio.Task[None] | None = None


_state = _State()


def _run(kind: str, namespace: str, name: str) -> None:
    reconciler = _state.reconcilers.get(kind)
    if reconciler is None:
        return
    try:
        again = reconciler.reconcile(namespace, name)
    except Exception:
        logger.exception("reconcile of %s/%s failed; trying again", namespace, name)
        again = True
    with _state.lock:
        if again:
            _state.active.add((kind, namespace, name))
        else:
            _state.active.discard((kind, namespace, name))


async def _tick() -> None:
    loop = asyncio.get_running_loop()
    gate = asyncio.Semaphore(CONCURRENCY)

    async def one(key: tuple[str, str, str]) -> None:
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
    params = connection_params(load_configuration(os.environ.get("KUBECONFIG") or None))
    return kopf.ConnectionInfo(**params, priority=LOGIN_PRIORITY)


@kopf.on.startup()
async def _startup(**_: Any) -> None:
    kube = Client(load_configuration(os.environ.get("KUBECONFIG") or None))
    pods = Settings.from_env(os.environ)
    _state.reconcilers = {
        "VolumeImportSource": Reconciler(kube, ImportPopulator(), pods),
        "VolumeCloneSource": CloneReconciler(kube, ClonePopulator(), pods),
        "VolumeUploadSource": UploadReconciler(
            kube, UploadPopulator(), pods,
            namespace=os.environ.get("POD_NAMESPACE") or "rootdisk"),
    }
    with _state.lock:
        _state.active.clear()
    _state.ticker = asyncio.create_task(_tick())


@kopf.on.cleanup()
async def _cleanup(**_: Any) -> None:
    if _state.ticker is not None:
        _state.ticker.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await _state.ticker
    for reconciler in _state.reconcilers.values():
        reconciler.close()
    if _state.reconcilers:
        next(iter(_state.reconcilers.values())).kube.close()
    _state.reconcilers, _state.ticker = {}, None


@kopf.on.event("", "v1", "persistentvolumeclaims")
def _claim_event(body: kopf.Body, type: str | None, **_: Any) -> None:
    meta = body.get("metadata") or {}
    ns, name = str(meta.get("namespace")), str(meta.get("name"))
    ann = meta.get("annotations") or {}
    for kind, reconciler in list(_state.reconcilers.items()):
        if reconciler.is_target(body):
            if type == "DELETED":
                with _state.lock:
                    _state.active.discard((kind, ns, name))
                reconciler.forget(f"{ns}/{name}", str(meta.get("uid")))
                try:
                    reconciler.target_gone(body)
                except Exception:
                    logger.exception("cleaning up after %s/%s failed", ns, name)
                _via_prime(kind, reconciler.populator.prime_namespace(body),
                           names.prime_name(str(meta.get("uid"))))
                return
            _run(kind, ns, name)
            return
        if ann.get(api.POPULATOR_KIND) == kind and type != "DELETED":
            _via_prime(kind, ns, name)


@kopf.on.event("", "v1", "pods", labels={api.APP_LABEL: api.APP_LABEL_VALUE})
def _pod_event(body: kopf.Body, **_: Any) -> None:
    meta = body.get("metadata") or {}
    kind = {"importer": "VolumeImportSource", "cloner": "VolumeCloneSource",
            UPLOAD_COMPONENT: "VolumeUploadSource"}.get(
        str((meta.get("labels") or {}).get(api.COMPONENT_LABEL)))
    if kind is None:
        # the host-assisted clone's source pod names its target
        if (meta.get("labels") or {}).get(api.COMPONENT_LABEL) == api.CLONE_SOURCE_VALUE:
            parts = str((meta.get("annotations") or {}).get(api.PRIME_TARGET) or "").split("/")
            if len(parts) == 3 and all(parts):
                _run("VolumeCloneSource", parts[0], parts[1])
        return
    for ref in meta.get("ownerReferences") or []:
        if ref.get("controller") and ref.get("kind") == "PersistentVolumeClaim":
            _via_prime(kind, str(meta.get("namespace")), str(ref.get("name")))


def _via_prime(kind: str, namespace: str, prime: str) -> None:
    """Reconcile PVC''s target (or clean up after a target that is gone)."""
    reconciler = _state.reconcilers.get(kind)
    if reconciler is None:
        return
    try:
        target = reconciler.target_of_prime(namespace, prime)
    except Exception:
        logger.exception("handling PVC' %s/%s failed", namespace, prime)
        return
    if target is not None:
        tns, _, tname = target.partition("/")
        _run(kind, tns, tname)
