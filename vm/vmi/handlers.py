"""kopf wiring of the VMI controller: VMI events, launcher pod events and DataVolume
events sync the VMI; a resync loop (``vm.resync``) re-syncs VMIs that are not final."""

from __future__ import annotations

import asyncio
import logging
import threading
from collections import defaultdict
from typing import Any

import kopf

from kubeclient import KubeError, shared
from kubeclient.resources import VMIS
from vm import resync
from vm.vmi.claims import disk_claims
from vm.vmi.kube import sync_vmi
from vocab import cdi as api
from vocab import kubevirt as names

logger = logging.getLogger(__name__)
RESYNC_SECONDS = 2.0

_locks: defaultdict[tuple[str, str], threading.Lock] = defaultdict(threading.Lock)


def sync(namespace: str, name: str) -> None:
    with _locks[(namespace, name)]:
        try:
            sync_vmi(shared(), namespace, name)
        except KubeError as err:
            logger.warning("sync of VMI %s/%s failed: %s", namespace, name, err)


@kopf.on.event(names.GROUP, names.VERSION, names.VMI_PLURAL)
def vmi_event(namespace: str | None, name: str, type: str | None, **_: Any) -> None:
    if namespace is None:  # namespaced kinds always have one
        return
    if type != "DELETED":
        sync(namespace, name)


def _not_final(vmi: dict[str, Any]) -> bool:
    return bool(vmi["metadata"].get("deletionTimestamp")) or (vmi.get("status") or {}).get(
        "phase") not in ("Succeeded", "Failed")


_tasks: list[asyncio.Task[None]] = []


@kopf.on.startup()
async def start_resync(**_: Any) -> None:
    _tasks.append(asyncio.create_task(resync.every(
        RESYNC_SECONDS, list_objects=lambda: [v for v in shared().list(VMIS) if _not_final(v)],
        sync=lambda vmi: sync(vmi["metadata"]["namespace"], vmi["metadata"]["name"]))))


@kopf.on.cleanup()
async def stop_resync(**_: Any) -> None:
    for t in _tasks:
        t.cancel()


@kopf.on.event("", "v1", "pods", labels={names.LABEL_APP: "virt-launcher"})
def pod_event(body: Any, namespace: str | None, **_: Any) -> None:
    if namespace is None:  # namespaced kinds always have one
        return
    for ref in (body.get("metadata") or {}).get("ownerReferences") or []:
        if ref.get("kind") == names.VMI_KIND and ref.get("controller"):
            sync(namespace, str(ref.get("name")))


@kopf.on.event(api.GROUP, "v1beta1", api.DV_PLURAL)
def dv_event(name: str, namespace: str | None, **_: Any) -> None:
    if namespace is None:  # namespaced kinds always have one
        return
    try:
        vmis = shared().list(VMIS, namespace)
    except KubeError as err:
        logger.warning("listing VMIs in %s failed: %s", namespace, err)
        return
    for vmi in vmis:
        if any(c.claim == name for c in disk_claims(vmi.get("spec") or {})):
            sync(namespace, vmi["metadata"]["name"])
