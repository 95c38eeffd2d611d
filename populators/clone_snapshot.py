"""The ``snapshot`` clone's VolumeSnapshot (pure): what is made, when it is ready, and
when it goes.

As upstream's snapshot plan: a VolumeSnapshot ``tmp-snapshot-<target uid>`` of the
source claim, in the source namespace, with the chosen VolumeSnapshotClass; once it is
``readyToUse``, PVC' is made there with the snapshot as its ``dataSource`` (the storage
restores it) and its volume is rebound to the target as a CSI clone's is. The snapshot is
deleted once PVC' is bound (the restored volume no longer needs it), when the clone
ends, and when the target goes. It carries the target's reference, so a namesake made by
someone else is never read as ready nor deleted, and it is owned by the
VolumeCloneSource, so the garbage collector takes it with the source object too.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from populators.claims import Obj, meta
from populators.clone_pods import ours, target_reference
from sizes import parse_bytes
from vocab import cdi as api

GROUP = "snapshot.storage.k8s.io"
VERSION = "v1"
PLURAL = "volumesnapshots"
CLASSES = "volumesnapshotclasses"


def snapshot_name(target: Obj) -> str:
    return f"tmp-snapshot-{meta(target).get('uid')}"


def render(*, target: Obj, namespace: str, source_claim: str, snapshot_class: str,
           owner: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/{VERSION}", "kind": "VolumeSnapshot",
        "metadata": {"name": snapshot_name(target), "namespace": namespace,
                     "labels": {api.APP_LABEL: api.APP_LABEL_VALUE},
                     "annotations": {api.PRIME_TARGET: target_reference(target)},
                     "ownerReferences": [dict(owner)]},
        "spec": {"volumeSnapshotClassName": snapshot_class,
                 "source": {"persistentVolumeClaimName": source_claim}},
    }


def data_source(target: Obj) -> dict[str, str]:
    """PVC''s ``dataSource``: restore the snapshot."""
    return {"apiGroup": GROUP, "kind": "VolumeSnapshot", "name": snapshot_name(target)}


@dataclass(frozen=True)
class State:
    ready: bool = False
    request: str | None = None
    """PVC''s request when restoring needs more than the target asks."""
    create: bool = False
    """No snapshot yet: make it."""
    waiting: str = ""
    """Why PVC' cannot be made yet."""


def state(snapshot: Obj | None, *, target: Obj, source: str) -> State:
    """Where the clone's snapshot stands, before PVC' exists."""
    name = snapshot_name(target)
    if snapshot is None:
        return State(create=True, waiting=f"taking snapshot {name} of {source}")
    if not ours(snapshot, target):
        return State(waiting=f"VolumeSnapshot {name} exists and was not made for this clone")
    status = snapshot.get("status") or {}
    if status.get("readyToUse") is True:
        return State(ready=True, request=restore_request(snapshot, target))
    error = (status.get("error") or {}).get("message")
    if error:
        return State(waiting=f"snapshot {name} of {source} failed: {error}")
    return State(waiting=f"waiting for snapshot {name} of {source} to be ready")


def restore_request(snapshot: Obj, target: Obj) -> str | None:
    """PVC''s request when the snapshot's ``restoreSize`` exceeds the target's (storage
    refuses to restore into less, and a source volume may hold more than its claim asked:
    capacity is rounded up), else None (the target's own request)."""
    try:
        restore = parse_bytes(str((snapshot.get("status") or {}).get("restoreSize") or 0))
        wanted = parse_bytes(str((((target.get("spec") or {}).get("resources") or {}).get(
            "requests") or {}).get("storage") or 0))
    except ValueError:
        return None
    return str(restore) if restore > wanted else None


def done_with(*, prime: Obj | None, finished: bool) -> bool:
    """Whether the snapshot can go: the clone ended, or PVC' was restored from it."""
    return finished or (prime is not None and (prime.get("status") or {}).get(
        "phase") == "Bound")


# -- a clone from a VolumeSnapshot (the VolumeCloneSource names one) ----------------------

CONTENTS = "volumesnapshotcontents"


@dataclass(frozen=True)
class FromSnapshot:
    """Where a clone from the user's VolumeSnapshot stands, before PVC' exists (upstream's
    ``computeStrategyForSourceSnapshot`` and ``planSmartCloneFromSnapshot``)."""

    data_source: dict[str, str] | None = None
    """PVC''s ``dataSource`` once the snapshot can be restored."""
    request: str | None = None
    waiting: str = ""
    fallback: tuple[str, str] | None = None
    """(reason, message): the snapshot cannot be restored into the target; as upstream's
    ``planHostAssistedFromSnapshot``, it is restored into a temporary claim
    (:func:`render_temp_claim`) and copied from there (the ``copy`` strategy)."""


def from_snapshot(snapshot: Obj | None, *, content: Obj | None, target: Obj,
                  target_class: Obj | None, source: str) -> FromSnapshot:
    """The decision for a target cloned from the snapshot ``source`` (``ns/name``)."""
    name = source.rpartition("/")[2]
    if snapshot is None:
        return FromSnapshot(waiting=api.MESSAGE_CLONE_WITHOUT_SOURCE.format(
            kind="snapshot", name=name))
    status = snapshot.get("status") or {}
    error = (status.get("error") or {}).get("message")
    if error:
        return FromSnapshot(waiting=f"snapshot {source} failed: {error}")
    if status.get("readyToUse") is not True:
        return FromSnapshot(waiting=f"waiting for snapshot {source} to be ready")
    if content is None:
        return FromSnapshot(waiting=f"waiting for the content of snapshot {source}")
    if target_class is None:
        return FromSnapshot(waiting="target claim's storageclass doesn't exist, clone will"
                                    " not work")
    cspec = content.get("spec") or {}
    if target_class.get("provisioner") != cspec.get("driver"):
        return FromSnapshot(fallback=(api.NO_PROVISIONER_MATCH,
                                     api.MESSAGE_NO_PROVISIONER_MATCH))
    restore = _bytes(status.get("restoreSize"))
    wanted = _bytes((((target.get("spec") or {}).get("resources") or {}).get(
        "requests") or {}).get("storage"))
    if restore is not None and wanted is not None and restore < wanted and not \
            target_class.get("allowVolumeExpansion"):
        return FromSnapshot(fallback=(api.NO_VOLUME_EXPANSION, api.MESSAGE_NO_VOLUME_EXPANSION))
    target_mode = str((target.get("spec") or {}).get("volumeMode") or "Filesystem")
    if str(cspec.get("sourceVolumeMode") or "Filesystem") != target_mode:
        return FromSnapshot(fallback=(api.INCOMPATIBLE_VOLUME_MODES,
                                     api.MESSAGE_INCOMPATIBLE_VOLUME_MODES))
    return FromSnapshot(
        data_source={"apiGroup": GROUP, "kind": api.VOLUME_SNAPSHOT_KIND, "name": name},
        request=restore_request(snapshot, target))


def temp_claim_name(target: Obj) -> str:
    """Upstream's temporary source claim of a host-assisted clone from a snapshot."""
    return f"tmp-source-pvc-{meta(target).get('uid')}"


NO_TEMP_CLASS = "unable to find a valid storage class for the temporal source claim"
"""Upstream's error, word for word, when no StorageClass serves the snapshot's driver."""


def temp_class(classes: Sequence[Obj], driver: str | None) -> str | None:
    """The StorageClass of the temporary claim: the first by name whose provisioner is
    the snapshot's driver (upstream's ``getStorageClassNameForTempSourceClaim``)."""
    names = sorted(str(meta(c).get("name")) for c in classes
                   if driver and c.get("provisioner") == driver)
    return names[0] if names else None


def render_temp_claim(*, target: Obj, snapshot: Obj, content: Obj | None, namespace: str,
                      storage_class: str, owner: Mapping[str, Any]) -> dict[str, Any]:
    """The temporary claim restored from the snapshot, in its namespace: ReadWriteOnce,
    the volume mode the snapshot was taken from, its ``restoreSize`` (the target's
    request when that is 0), as upstream's ``createTempSourceClaim``; it carries the
    target's reference and is owned by the VolumeCloneSource."""
    size = (snapshot.get("status") or {}).get("restoreSize")
    if _bytes(size) in (None, 0):
        size = (((target.get("spec") or {}).get("resources") or {}).get("requests")
                or {}).get("storage")
    mode = ((content or {}).get("spec") or {}).get("sourceVolumeMode") or \
        (target.get("spec") or {}).get("volumeMode") or "Filesystem"
    return {
        "apiVersion": "v1", "kind": "PersistentVolumeClaim",
        "metadata": {"name": temp_claim_name(target), "namespace": namespace,
                     "labels": {api.APP_LABEL: api.APP_LABEL_VALUE},
                     "annotations": {api.PRIME_TARGET: target_reference(target)},
                     "ownerReferences": [dict(owner)]},
        "spec": {"storageClassName": storage_class, "accessModes": ["ReadWriteOnce"],
                 "volumeMode": mode, "resources": {"requests": {"storage": str(size)}},
                 "dataSource": {"apiGroup": GROUP, "kind": api.VOLUME_SNAPSHOT_KIND,
                                "name": meta(snapshot).get("name")}},
    }


def restored_claim(snapshot: Obj | None, content: Obj | None) -> dict[str, Any] | None:
    """The snapshot as the claim it restores (its ``restoreSize``, the mode it was taken
    from), for the grow step's comparison with the target; None when it is gone."""
    if snapshot is None:
        return None
    size = (snapshot.get("status") or {}).get("restoreSize")
    if size is None:
        return None
    return {"spec": {"volumeMode": ((content or {}).get("spec") or {}).get(
        "sourceVolumeMode") or "Filesystem", "resources": {"requests": {"storage": str(size)}}}}


def _bytes(text: Any) -> int | None:
    if text is None:
        return None
    try:
        return parse_bytes(str(text))
    except ValueError:
        return None
