"""kopf wiring of the VM controller: every event of a VM, of its VMI or of its
DataVolumes syncs the VM; a timer re-syncs (crash-loop back-off ends, missed events).

Syncs of one VM are serialised in this process; across processes resourceVersion
guards every write (see ``vm.controller.kube``).
"""

from __future__ import annotations

import logging
import threading
from collections import defaultdict
from typing import Any

import kopf

from vm.api import names
from vm.controller.kube import owner_vm, sync_vm
from vm.kube import Kube, KubeError, load_config

logger = logging.getLogger(__name__)
RESYNC_SECONDS = 3.0

_locks: defaultdict[tuple[str, str], threading.Lock] = defaultdict(threading.Lock)
_kube: list[Kube] = []


def _client() -> Kube:
    if not _kube:
        _kube.append(Kube(load_config()))
    return _kube[0]


def sync(namespace: str, name: str) -> float | None:
    with _locks[(namespace, name)]:
        try:
            return sync_vm(_client(), namespace, name)
        except KubeError as err:
            logger.warning("sync of VM %s/%s failed: %s", namespace, name, err)
            return 1.0


@kopf.on.event(names.GROUP, names.VERSION, names.VM_PLURAL)
def vm_event(namespace: str, name: str, type: str | None, **_: Any) -> None:
    if type != "DELETED":
        sync(namespace, name)


@kopf.timer(names.GROUP, names.VERSION, names.VM_PLURAL, interval=RESYNC_SECONDS,
            sharp=False)
def vm_resync(namespace: str, name: str, **_: Any) -> None:
    sync(namespace, name)


@kopf.on.event(names.GROUP, names.VERSION, names.VMI_PLURAL)
def vmi_event(body: Any, namespace: str, **_: Any) -> None:
    owner = owner_vm(dict(body))
    if owner:
        sync(namespace, owner)


@kopf.on.event(names.CDI_GROUP, "v1beta1", names.DV_PLURAL,
               labels={names.LABEL_CREATED_BY: kopf.PRESENT})
def dv_event(body: Any, namespace: str, **_: Any) -> None:
    owner = owner_vm(dict(body))
    if owner:
        sync(namespace, owner)
