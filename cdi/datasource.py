"""A DataSource's status (pure): its source, and a Ready condition that follows it.

As upstream: a DataSource names a PVC, a VolumeSnapshot (or another DataSource, one
level down). With a PVC it is Ready when that claim exists and is Bound, and — when a
DataVolume made the claim — that DataVolume has Succeeded; deleting the golden claim, or
replacing it with one still being filled, turns Ready False, and the new claim turns it
back. With a VolumeSnapshot it is Ready when the snapshot is ``readyToUse``, with
upstream's reasons and messages word for word (``NotFound`` "Snapshot not found",
``SnapshotNotReady`` "Snapshot phase is not ready", ``Ready`` "DataSource is ready to be
consumed").
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from vocab import cdi as api

Obj = dict[str, Any]
Lookup = Callable[[str, str, str], Mapping[str, Any] | None]
"""``lookup(kind, namespace, name)`` for kind "PersistentVolumeClaim", "DataVolume",
"DataSource", "VolumeSnapshot"."""


def refers_to(data_source: Mapping[str, Any]) -> tuple[str, str, str] | None:
    """(kind, namespace, name) of what a DataSource names: "DataSource" when it names
    one (that wins, as upstream), else "PersistentVolumeClaim", else "VolumeSnapshot";
    None when it names none."""
    ns = str((data_source.get("metadata") or {}).get("namespace") or "")
    source = (data_source.get("spec") or {}).get("source") or {}
    for kind, ref in (("DataSource", source.get("dataSource")),
                      ("PersistentVolumeClaim", source.get("pvc")),
                      (api.VOLUME_SNAPSHOT_KIND, source.get("snapshot"))):
        if isinstance(ref, Mapping) and ref.get("name"):
            return kind, str(ref.get("namespace") or ns), str(ref["name"])
    return None


def ready(*, data_source: Mapping[str, Any], lookup: Lookup,
          depth: int = 0) -> tuple[str, str, str]:
    """(status, reason, message) of the Ready condition."""
    ref = refers_to(data_source)
    if ref is not None and ref[0] == "DataSource":
        _, ref_ns, name = ref
        if depth >= 1:
            return ("False", "NotFound", "a DataSource may refer to another DataSource only"
                    " one level deep")
        other = lookup("DataSource", ref_ns, name)
        if other is None:
            return ("False", "NotFound", f"DataSource {ref_ns}/{name} not found")
        return ready(data_source=other, lookup=lookup, depth=depth + 1)
    if ref is not None and ref[0] == api.VOLUME_SNAPSHOT_KIND:
        snapshot = lookup(*ref)
        if snapshot is None:
            return ("False", "NotFound", api.SNAPSHOT_NOT_FOUND_MESSAGE)
        if (snapshot.get("status") or {}).get("readyToUse") is True:
            return ("True", "Ready", api.DATA_SOURCE_READY_MESSAGE)
        return ("False", api.SNAPSHOT_NOT_READY, api.SNAPSHOT_NOT_READY_MESSAGE)
    if ref is not None:
        _, ref_ns, name = ref
        claim = lookup("PersistentVolumeClaim", ref_ns, name)
        if claim is None:
            return ("False", "NotFound", f"PVC {ref_ns}/{name} not found")
        dv = lookup("DataVolume", ref_ns, name)
        if dv is not None:
            phase = (dv.get("status") or {}).get("phase")
            if phase != "Succeeded":
                return ("False", str(phase or "Pending"),
                        f"DataVolume {ref_ns}/{name} is {phase or 'Pending'}")
        if (claim.get("status") or {}).get("phase") != "Bound":
            return ("False", "Pending", f"PVC {ref_ns}/{name} is not Bound")
        return ("True", "Ready", "")
    return ("False", "NoSource", "spec.source names no pvc, snapshot or dataSource")


def status_patch(*, data_source: Mapping[str, Any], condition: tuple[str, str, str],
                 now: str) -> Obj | None:
    """The new status, or None when the condition did not change."""
    old = dict(data_source.get("status") or {})
    conditions = [c for c in old.get("conditions") or [] if c.get("type") != "Ready"]
    prev: Mapping[str, Any] = next(
        (c for c in old.get("conditions") or [] if c.get("type") == "Ready"), {})
    status, reason, message = condition
    if (prev.get("status"), prev.get("reason", ""), prev.get("message", "")) == condition:
        return None
    cond: Obj = {"type": "Ready", "status": status, "reason": reason,
                 "lastTransitionTime": now if prev.get("status") != status
                 else prev.get("lastTransitionTime") or now,
                 "lastHeartbeatTime": now}
    if message:
        cond["message"] = message
    source = (data_source.get("spec") or {}).get("source") or {}
    return {**old, "source": dict(source), "conditions": [*conditions, cond]}
