"""kopf wiring of the VMI controller: VMI events, launcher pod events and DataVolume
events sync the VMI; a timer re-syncs VMIs that are not final yet."""

from __future__ import annotations

import logging
import threading
from collections import defaultdict
from typing import Any

import kopf

from vm.api import names
from vm.kube import VMIS, Kube, KubeError, load_config
from vm.vmi.claims import disk_claims
from vm.vmi.kube import sync_vmi

logger = logging.getLogger(__name__)
RESYNC_SECONDS = 2.0

_locks: defaultdict[tuple[str, str], threading.Lock] = defaultdict(threading.Lock)
_kube: list[Kube] = []


def _client() -> Kube:
    if not _kube:
        _kube.append(Kube(load_config()))
    return _kube[0]


def sync(namespace: str, name: str) -> None:
    with _locks[(namespace, name)]:
        try:
            sync_vmi(_client(), namespace, name)
        except KubeError as err:
            logger.warning("sync of VMI %s/%s failed: %s", namespace, name, err)


@kopf.on.event(names.GROUP, names.VERSION, names.VMI_PLURAL)
def vmi_event(namespace: str, name: str, type: str | None, **_: Any) -> None:
    if type != "DELETED":
        sync(namespace, name)


def _not_final(status: Any, meta: Any, **_: Any) -> bool:
    return bool(meta.get("deletionTimestamp")) or (status or {}).get("phase") not in (
        "Succeeded", "Failed")


@kopf.timer(names.GROUP, names.VERSION, names.VMI_PLURAL, interval=RESYNC_SECONDS,
            sharp=False, when=_not_final)
def vmi_resync(namespace: str, name: str, **_: Any) -> None:
    sync(namespace, name)


@kopf.on.event("", "v1", "pods", labels={names.LABEL_APP: "virt-launcher"})
def pod_event(body: Any, namespace: str, **_: Any) -> None:
    for ref in (body.get("metadata") or {}).get("ownerReferences") or []:
        if ref.get("kind") == names.VMI_KIND and ref.get("controller"):
            sync(namespace, str(ref.get("name")))


@kopf.on.event(names.CDI_GROUP, "v1beta1", names.DV_PLURAL)
def dv_event(name: str, namespace: str, **_: Any) -> None:
    try:
        vmis = _client().list(VMIS, namespace)
    except KubeError as err:
        logger.warning("listing VMIs in %s failed: %s", namespace, err)
        return
    for vmi in vmis:
        if any(c.claim == name for c in disk_claims(vmi.get("spec") or {})):
            sync(namespace, vmi["metadata"]["name"])
