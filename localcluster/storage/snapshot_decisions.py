"""What the snapshot controller and a restore should do, decided without I/O.

A VolumeSnapshot (``snapshot_plan``) of a Bound claim whose volume this provisioner made
gets a VolumeSnapshotContent ``snapcontent-<snapshot uid>`` (``Take``); once the content
is ready its status is copied to the snapshot (``Report``). What can never or cannot yet
be snapshotted is a ``Fail``: ``status.error`` and a Warning Event, retried on every pass
(a claim that becomes Bound is then snapshotted). Deletion (``deletion_plan``,
``content_plan``) follows the content's ``deletionPolicy``: Delete removes the content and
its image before the snapshot's finalizer goes, Retain keeps both.

A claim restored from a snapshot (``restore``) waits while the snapshot is missing or not
ready, and is refused when it asks less than the snapshot's restoreSize or another
volumeMode, as the external-provisioner refuses it.
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import sizes
from localcluster.kube.claims import claim_class_name
from localcluster.storage.decisions import PROVISIONED_BY, Obj, Refuse, Wait, _meta, _spec
from localcluster.storage.snapshot_api import (
    API_VERSION,
    CONTENT_FINALIZER,
    CONTENT_PREFIX,
    DEFAULT_SNAPSHOT_CLASS,
    SNAPSHOT_FINALIZER,
)


def _status(obj: Obj) -> Mapping[str, Any]:
    status: Mapping[str, Any] = obj.get("status") or {}
    return status


@dataclass(frozen=True)
class Nothing:
    reason: str


@dataclass(frozen=True)
class Fail:
    message: str
    """Why the snapshot is not (yet) taken: its status.error and a Warning Event."""


@dataclass(frozen=True)
class Take:
    content: Mapping[str, Any]
    """The VolumeSnapshotContent to create when it does not exist yet."""
    volume: str
    """The volume (PV) to copy."""
    class_name: str | None = None
    """The default class chosen: recorded in the snapshot's spec, as upstream does."""


@dataclass(frozen=True)
class Report:
    status: Mapping[str, Any]
    """The snapshot's status, from its ready content."""


@dataclass(frozen=True)
class Finish:
    """A snapshot being deleted: delete its content first (None: no need), and/or drop
    the snapshot's finalizer."""
    delete_content: str | None = None
    remove_finalizer: bool = False


def content_name(snapshot: Obj) -> str:
    bound = _status(snapshot).get("boundVolumeSnapshotContentName")
    return str(bound or CONTENT_PREFIX + str(_meta(snapshot).get("uid")))


def _bound_to(content: Obj, snapshot: Obj) -> bool:
    ref = _spec(content).get("volumeSnapshotRef") or {}
    m = _meta(snapshot)
    return (ref.get("namespace"), ref.get("name"), ref.get("uid")) == (
        m.get("namespace"), m.get("name"), m.get("uid"))


def snapshot_plan(
    *, snapshot: Obj, contents: Mapping[str, Obj], claims: Mapping[tuple[str, str], Obj],
    volumes: Mapping[str, Obj], storage_classes: Mapping[str, Obj],
    snapshot_classes: Mapping[str, Obj], provisioner: str,
) -> Nothing | Fail | Take | Report | Finish:
    meta, spec = _meta(snapshot), _spec(snapshot)
    ns = str(meta.get("namespace"))
    cname = content_name(snapshot)
    content = contents.get(cname)
    if content is not None and not _bound_to(content, snapshot):
        content = None
    if meta.get("deletionTimestamp"):
        return deletion_plan(snapshot=snapshot, content=content)
    if content is not None:
        if _spec(content).get("driver") != provisioner:
            return Nothing(f"content {cname} belongs to driver {_spec(content).get('driver')}")
        if _status(content).get("readyToUse"):
            return Report(snapshot_status(content))
        handle = (_spec(content).get("source") or {}).get("volumeHandle")
        if not handle:
            return Fail(f"VolumeSnapshotContent {cname} has no source.volumeHandle")
        return Take(content=content, volume=str(handle))
    if _status(snapshot).get("boundVolumeSnapshotContentName"):
        return Fail(f"the bound VolumeSnapshotContent {cname} is missing")
    source = spec.get("source") or {}
    if source.get("volumeSnapshotContentName"):
        return Fail("pre-provisioned snapshots (spec.source.volumeSnapshotContentName) are "
                    "not supported by localcluster")
    claim_name = source.get("persistentVolumeClaimName")
    if not claim_name:
        return Fail("spec.source.persistentVolumeClaimName is required")
    what = f"the source PersistentVolumeClaim {ns}/{claim_name}"
    claim = claims.get((ns, str(claim_name)))
    if claim is None:
        return Fail(f"{what} does not exist")
    if _meta(claim).get("deletionTimestamp"):
        return Fail(f"{what} is being deleted")
    volume_name = _spec(claim).get("volumeName")
    if _status(claim).get("phase") != "Bound" or not volume_name:
        return Fail(f"{what} is not Bound yet")
    pv = volumes.get(str(volume_name))
    if pv is None:
        return Fail(f"the volume {volume_name} of {what} does not exist")
    sc_name = claim_class_name(claim, storage_classes) or _spec(pv).get("storageClassName")
    sc = storage_classes.get(str(sc_name))
    driver = (sc or {}).get("provisioner") or \
        (_meta(pv).get("annotations") or {}).get(PROVISIONED_BY)
    if driver != provisioner:
        return Fail(f"{what} is of StorageClass {sc_name!r}, provisioned by {driver!r}; "
                    f"only volumes of {provisioner} can be snapshotted")
    if (_meta(pv).get("annotations") or {}).get(PROVISIONED_BY) != provisioner:
        return Fail(f"the volume {volume_name} of {what} was not made by {provisioner}")
    picked = pick_class(spec.get("volumeSnapshotClassName"), snapshot_classes, str(driver))
    if isinstance(picked, Fail):
        return picked
    class_name, vsclass = picked
    new = {
        "apiVersion": API_VERSION,
        "kind": "VolumeSnapshotContent",
        "metadata": {"name": cname, "finalizers": [CONTENT_FINALIZER]},
        "spec": {
            "volumeSnapshotRef": {"apiVersion": API_VERSION, "kind": "VolumeSnapshot",
                                  "namespace": ns, "name": meta.get("name"),
                                  "uid": meta.get("uid")},
            "driver": provisioner,
            "deletionPolicy": vsclass.get("deletionPolicy") or "Delete",
            "volumeSnapshotClassName": class_name,
            "sourceVolumeMode": _spec(pv).get("volumeMode") or "Filesystem",
            "source": {"volumeHandle": str(volume_name)},
        },
    }
    defaulted = None if spec.get("volumeSnapshotClassName") else class_name
    return Take(content=new, volume=str(volume_name), class_name=defaulted)


def pick_class(name: str | None, snapshot_classes: Mapping[str, Obj],
               driver: str) -> tuple[str, Obj] | Fail:
    """The named VolumeSnapshotClass, or the one default class of ``driver``."""
    if name:
        vsclass = snapshot_classes.get(name)
        if vsclass is None:
            return Fail(f"VolumeSnapshotClass {name!r} does not exist")
        if vsclass.get("driver") != driver:
            return Fail(f"VolumeSnapshotClass {name!r} is for driver {vsclass.get('driver')!r}"
                        f", the source volume's driver is {driver!r}")
        return name, vsclass
    defaults = sorted(n for n, c in snapshot_classes.items() if c.get("driver") == driver and (
        _meta(c).get("annotations") or {}).get(DEFAULT_SNAPSHOT_CLASS) == "true")
    if not defaults:
        return Fail(f"no default VolumeSnapshotClass for driver {driver!r} (annotated "
                    f'{DEFAULT_SNAPSHOT_CLASS}: "true"); name one in '
                    "spec.volumeSnapshotClassName")
    if len(defaults) > 1:
        return Fail(f"{len(defaults)} default VolumeSnapshotClasses for driver {driver!r} "
                    f"({', '.join(defaults)}); name one in spec.volumeSnapshotClassName")
    return defaults[0], snapshot_classes[defaults[0]]


def deletion_plan(*, snapshot: Obj, content: Obj | None) -> Nothing | Finish:
    """A VolumeSnapshot being deleted: its content goes first under deletionPolicy
    Delete (and the snapshot waits for it), stays under Retain."""
    if SNAPSHOT_FINALIZER not in (_meta(snapshot).get("finalizers") or []):
        return Nothing("no finalizer of ours")
    if content is None or _spec(content).get("deletionPolicy") != "Delete":
        return Finish(remove_finalizer=True)
    if _meta(content).get("deletionTimestamp"):
        return Nothing(f"waiting for content {_meta(content).get('name')} to be deleted")
    return Finish(delete_content=str(_meta(content).get("name")))


@dataclass(frozen=True)
class ContentPlan:
    delete_image: bool = False
    remove_finalizer: bool = False
    delete: bool = False
    """Delete the content itself (its snapshot is gone and its policy is Delete)."""


def content_plan(*, content: Obj, snapshots: Mapping[tuple[str, str], Obj],
                 provisioner: str) -> ContentPlan:
    meta, spec = _meta(content), _spec(content)
    if spec.get("driver") != provisioner:
        return ContentPlan()
    policy_delete = spec.get("deletionPolicy") == "Delete"
    if meta.get("deletionTimestamp"):
        if CONTENT_FINALIZER not in (meta.get("finalizers") or []):
            return ContentPlan()
        return ContentPlan(delete_image=policy_delete, remove_finalizer=True)
    ref = spec.get("volumeSnapshotRef") or {}
    snapshot = snapshots.get((str(ref.get("namespace")), str(ref.get("name"))))
    gone = snapshot is None or (ref.get("uid") and _meta(snapshot).get("uid") != ref.get("uid"))
    return ContentPlan(delete=bool(gone and policy_delete))


# -- statuses ----------------------------------------------------------------------------


def content_status(*, handle: str, restore_size: int, created_ns: int) -> dict[str, Any]:
    return {"snapshotHandle": handle, "readyToUse": True, "restoreSize": restore_size,
            "creationTime": created_ns, "error": None}


def rfc3339(ns: int) -> str:
    when = datetime.datetime.fromtimestamp(ns / 1e9, datetime.UTC)
    return when.strftime("%Y-%m-%dT%H:%M:%SZ")


def snapshot_status(content: Obj) -> dict[str, Any]:
    status = _status(content)
    out: dict[str, Any] = {"boundVolumeSnapshotContentName": _meta(content).get("name"),
                           "readyToUse": bool(status.get("readyToUse")), "error": None}
    if status.get("restoreSize") is not None:
        out["restoreSize"] = sizes.format_bytes(int(status["restoreSize"]))
    if status.get("creationTime") is not None:
        out["creationTime"] = rfc3339(int(status["creationTime"]))
    return out


def status_differs(current: Mapping[str, Any], want: Mapping[str, Any]) -> bool:
    """Whether ``want`` changes ``current`` (an error's time alone does not)."""
    for key, value in want.items():
        have = current.get(key)
        if key == "error":
            if (have or {}).get("message") != (value or {}).get("message"):
                return True
        elif have != value:
            return True
    return False


# -- restoring -----------------------------------------------------------------------


@dataclass(frozen=True)
class RestoreFrom:
    handle: str


def restore(*, claim: Obj, capacity: int, mode: str, snapshot_name: str,
            snapshot: Obj | None, content: Obj | None,
            provisioner: str) -> Wait | Refuse | RestoreFrom:
    """Whether a claim whose dataSource is VolumeSnapshot ``snapshot_name`` (in the claim's
    namespace) can be provisioned now, and from which stored image."""
    what = f"VolumeSnapshot {_meta(claim).get('namespace')}/{snapshot_name}"
    if snapshot is None:
        return Wait("WaitingForSnapshot", f"waiting for {what}: it does not exist")
    if _meta(snapshot).get("deletionTimestamp"):
        return Wait("WaitingForSnapshot", f"waiting for {what}: it is being deleted")
    bound = _status(snapshot).get("boundVolumeSnapshotContentName")
    if not _status(snapshot).get("readyToUse") or not bound:
        return Wait("WaitingForSnapshot", f"waiting for {what}: it is not ready to use yet")
    if content is None or not _bound_to(content, snapshot):
        return Wait("WaitingForSnapshot",
                    f"waiting for {what}: its VolumeSnapshotContent {bound} is missing")
    if _spec(content).get("driver") != provisioner:
        return Refuse("ProvisioningFailed", f"{what} was taken by driver "
                      f"{_spec(content).get('driver')!r}, not {provisioner!r}")
    size = _status(content).get("restoreSize")
    if size is None:
        size = sizes.parse_bytes(str(_status(snapshot).get("restoreSize") or 0))
    if capacity < int(size):
        return Refuse("ProvisioningFailed", f"requested volume size {capacity} is less than "
                      f"the size {int(size)} for the source snapshot {snapshot_name}")
    source_mode = _spec(content).get("sourceVolumeMode")
    if source_mode and source_mode != mode:
        return Refuse("ProvisioningFailed", f"the claim's volumeMode {mode} differs from the "
                      f"volumeMode {source_mode} of the source of {what}; localcluster cannot "
                      "change a volume's mode")
    handle = _status(content).get("snapshotHandle")
    if not handle:
        return Wait("WaitingForSnapshot", f"waiting for {what}: it has no snapshotHandle")
    return RestoreFrom(str(handle))
