"""kopf wiring of the VM controller: every event of a VM, of its VMI or of its
DataVolumes syncs the VM; a resync loop (``vm.resync``) re-syncs every VM (crash-loop
back-off ends, missed events).

Syncs of one VM are serialised in this process; across processes resourceVersion
guards every write (see ``vm.controller.kube``).
"""

from __future__ import annotations

import asyncio
import importlib.metadata
import logging
import threading
from collections import defaultdict
from typing import Any

import kopf

from kubeclient import KubeError, shared
from kubeclient.resources import KUBEVIRTS, VMS
from vm import resync
from vm.controller.kube import owner_vm, sync_kubevirt, sync_vm
from vocab import cdi as api
from vocab import kubevirt as names

logger = logging.getLogger(__name__)
RESYNC_SECONDS = 3.0

_locks: defaultdict[tuple[str, str], threading.Lock] = defaultdict(threading.Lock)


def sync(namespace: str, name: str) -> float | None:
    with _locks[(namespace, name)]:
        try:
            return sync_vm(shared(), namespace, name)
        except KubeError as err:
            logger.warning("sync of VM %s/%s failed: %s", namespace, name, err)
            return 1.0


@kopf.on.event(names.GROUP, names.VERSION, names.VM_PLURAL)
def vm_event(namespace: str | None, name: str, type: str | None, **_: Any) -> None:
    if namespace is None:  # namespaced kinds always have one
        return
    if type != "DELETED":
        sync(namespace, name)


_tasks: list[asyncio.Task[None]] = []


@kopf.on.startup()
async def start_resync(**_: Any) -> None:
    _tasks.append(asyncio.create_task(resync.every(
        RESYNC_SECONDS, list_objects=lambda: shared().list(VMS),
        sync=lambda vm: _sync_obj(vm))))
    _tasks.append(asyncio.create_task(resync.every(
        RESYNC_SECONDS, list_objects=lambda: shared().list(KUBEVIRTS),
        sync=_sync_kubevirt)))


def _sync_kubevirt(kv: dict[str, Any]) -> None:
    """The KubeVirt object's status, as upstream's virt-operator (Deployed, Available…)."""
    try:
        sync_kubevirt(shared(), kv, shared().list(KUBEVIRTS), version=_version())
    except KubeError as err:
        logger.warning("status of KubeVirt %s/%s: %s", kv["metadata"].get("namespace"),
                       kv["metadata"].get("name"), err)


def _version() -> str:
    try:
        return "rootdisk-" + importlib.metadata.version("rootdisk")
    except importlib.metadata.PackageNotFoundError:
        return "rootdisk"


@kopf.on.cleanup()
async def stop_resync(**_: Any) -> None:
    for t in _tasks:
        t.cancel()


@kopf.on.event(names.GROUP, names.VERSION, names.VMI_PLURAL)
def vmi_event(body: Any, namespace: str | None, **_: Any) -> None:
    if namespace is None:  # namespaced kinds always have one
        return
    owner = owner_vm(dict(body))
    if owner:
        sync(namespace, owner)


@kopf.on.event(api.GROUP, "v1beta1", api.DV_PLURAL,
               labels={names.LABEL_CREATED_BY: kopf.PRESENT})
def dv_event(body: Any, namespace: str | None, **_: Any) -> None:
    if namespace is None:  # namespaced kinds always have one
        return
    owner = owner_vm(dict(body))
    if owner:
        sync(namespace, owner)


def _sync_obj(vm: dict[str, Any]) -> None:
    sync(vm["metadata"]["namespace"], vm["metadata"]["name"])
