"""Which clone strategy, and why not the one asked for (pure), as upstream's planner.

Asked for: CDIConfig's ``spec.cloneStrategyOverride``, else the target class's
StorageProfile ``status.cloneStrategy``, else ``snapshot`` (upstream's default). Then:

- ``snapshot`` needs a VolumeSnapshotClass for the driver both claims' classes share
  (:func:`snapshot_class`, upstream's choice: the StorageProfiles' common
  ``snapshotClass``, else the driver's default class, else its first by name); without
  one it falls back to ``copy`` with reason ``NoVolumeSnapshotClass``. Then it is
  checked as ``csi-clone`` is:
- ``csi-clone`` (and ``snapshot``) falls back to ``copy`` when the source and target
  classes have different provisioners (``IncompatibleProvisioners``), different volume modes
  (``IncompatibleVolumeModes``), a larger target on a class that cannot expand
  (``NoVolumeExpansion``), or a smaller target (a permissive clone, rootdisk's
  ``TargetSmallerThanSource``: no storage clones into less). A source in another
  namespace is no reason: as upstream, PVC' is made in the source namespace (a claim's
  ``dataSource`` may only name a claim of its own namespace) and its volume is rebound
  to the target across namespaces;
- ``copy`` is the host-assisted copy (one pod beside the source claim reading it, or a
  source pod streaming to a target pod; PVC' in the source namespace as for the
  others), always possible.

The reason lands on the target as ``cdi.kubevirt.io/cloneFallbackReason`` and an Event.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sizes import parse_bytes

COPY = "copy"
SNAPSHOT = "snapshot"
CSI_CLONE = "csi-clone"
STRATEGIES = (COPY, SNAPSHOT, CSI_CLONE)

Obj = Mapping[str, Any]


@dataclass(frozen=True)
class Choice:
    strategy: str
    asked: str
    reason: str = ""
    """CamelCase fallback reason ("" when the asked strategy is used)."""
    message: str = ""
    snapshot_class: str = ""
    """The VolumeSnapshotClass a ``snapshot`` clone uses."""


DEFAULT_SNAPSHOT_CLASS = "snapshot.storage.kubernetes.io/is-default-class"
NO_SNAPSHOT_CLASS = "No compatible volumesnapshotclass found"
"""Upstream's message for the NoVolumeSnapshotClass fallback."""


def snapshot_class(*, classes: Sequence[Obj], driver: str | None,
                   named: str | None) -> str | None:
    """The VolumeSnapshotClass for ``driver``, as upstream picks it: the one ``named``
    (the StorageProfiles' ``snapshotClass``) if it serves the driver, else the driver's
    class annotated as default, else its first by name; None when there is none."""
    if not driver:
        return None
    serving = sorted(str(meta_name(c)) for c in classes if c.get("driver") == driver)
    if named:
        return named if named in serving else None
    for c in classes:
        if c.get("driver") == driver and ((c.get("metadata") or {}).get(
                "annotations") or {}).get(DEFAULT_SNAPSHOT_CLASS) == "true":
            return str(meta_name(c))
    return serving[0] if serving else None


def meta_name(obj: Obj) -> str:
    return str((obj.get("metadata") or {}).get("name") or "")


def _mode(claim: Obj) -> str:
    return str((claim.get("spec") or {}).get("volumeMode") or "Filesystem")


def _request(claim: Obj) -> int | None:
    text = (((claim.get("spec") or {}).get("resources") or {}).get("requests") or {}).get(
        "storage")
    try:
        return parse_bytes(str(text)) if text is not None else None
    except ValueError:
        return None


def asked_for(*, override: str | None, profile_strategy: str | None) -> str:
    for value in (override, profile_strategy):
        if value in STRATEGIES:
            return str(value)
    return SNAPSHOT


def choose(*, override: str | None, profile_strategy: str | None, source: Obj, target: Obj,
           source_class: Obj | None, target_class: Obj | None,
           snapshot_classes: Sequence[Obj] = (), profile_snapshot_class: str | None = None,
           ) -> Choice:
    asked = asked_for(override=override, profile_strategy=profile_strategy)
    if asked == COPY:
        return Choice(COPY, asked)
    vsc = ""
    if asked == SNAPSHOT:
        common = None
        if source_class is not None and target_class is not None and source_class.get(
                "provisioner") == target_class.get("provisioner"):
            common = str(source_class.get("provisioner") or "") or None
        vsc = snapshot_class(classes=snapshot_classes, driver=common,
                             named=profile_snapshot_class) or ""
        if not vsc:
            return Choice(COPY, asked, "NoVolumeSnapshotClass", NO_SNAPSHOT_CLASS)
    if source_class is None or target_class is None or source_class.get(
            "provisioner") != target_class.get("provisioner"):
        return Choice(COPY, asked, "IncompatibleProvisioners",
                      "source and target storage classes have no provisioner in common")
    if _mode(source) != _mode(target):
        return Choice(COPY, asked, "IncompatibleVolumeModes",
                      f"source volume mode {_mode(source)} differs from target's"
                      f" {_mode(target)}")
    src, dst = _request(source), _request(target)
    if src is not None and dst is not None and dst < src:
        return Choice(COPY, asked, "TargetSmallerThanSource",
                      "the target is smaller than the source (a permissive clone): the"
                      " storage cannot clone into it; copying the data")
    if src is not None and dst is not None and dst > src and not target_class.get(
            "allowVolumeExpansion"):
        return Choice(COPY, asked, "NoVolumeExpansion",
                      "the target is larger than the source and its class cannot expand"
                      " volumes")
    return Choice(asked, asked, snapshot_class=vsc)


def needs_growing(*, source: Obj, target: Obj) -> bool:
    """A CSI clone into a larger Filesystem claim: the storage copied the source's
    ``disk.img`` as it was; it must be grown to the claim's usable size."""
    src, dst = _request(source), _request(target)
    return _mode(target) == "Filesystem" and src is not None and dst is not None and dst > src


def writers(*, pods: list[dict[str, Any]], claim: str) -> list[str]:
    """Running pods that mount ``claim`` writable (read-only users do not block a clone):
    the claim volume is read-only, or every mount of it is."""
    out = []
    for pod in pods:
        meta = pod.get("metadata") or {}
        if (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed") or meta.get(
                "deletionTimestamp"):
            continue
        spec = pod.get("spec") or {}
        vols = [v for v in spec.get("volumes") or []
                if (v.get("persistentVolumeClaim") or {}).get("claimName") == claim]
        if not vols:
            continue
        names = {v.get("name") for v in vols if not v["persistentVolumeClaim"].get("readOnly")}
        if not names:
            continue
        containers = [*(spec.get("containers") or []), *(spec.get("initContainers") or [])]
        writable = any(
            m.get("name") in names and not m.get("readOnly")
            for c in containers for m in c.get("volumeMounts") or []
        ) or any(d.get("name") in names for c in containers for d in c.get("volumeDevices")
                 or [])
        if writable:
            out.append(str(meta.get("name")))
    return sorted(out)
