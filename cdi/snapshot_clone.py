"""Clone DataVolumes from a VolumeSnapshot seen from the DataVolume controller (pure): is
the snapshot fit to clone, and what it stands for as a clone source.

As upstream's snapshot-clone controller (CDI c07cdb6fb): a snapshot that does not exist
leaves the DataVolume waiting (``CloneWithoutSource``, "The source snapshot NAME doesn't
exist"); one with no status yet, in error, without a VolumeSnapshotClass, or without a
``restoreSize`` where the DataVolume gives no size, leaves it waiting too
(``CloneValidationFailed``, "The clone doesn't meet the validation requirements: …").
The controller looks again on its next pass; none of these fails the DataVolume.

For sizing the snapshot stands in for the source claim (:func:`as_source`): its
``restoreSize`` is the source's request, and the volume mode it was taken from (its
VolumeSnapshotContent's ``sourceVolumeMode``, Filesystem when unknown) the source's mode.
A ``storage`` DataVolume with no size then gets the ``restoreSize`` as it is, inflated by
the filesystem overhead only from a Block snapshot into a Filesystem claim (upstream's
``detectCloneSize``); a given size must not be below the ``restoreSize`` (with no
``permissiveClone`` escape: storage cannot restore into less).
"""

from __future__ import annotations

from collections.abc import Mapping
from fractions import Fraction
from typing import Any

from cdi import clone
from sizes import parse_bytes
from vocab import cdi as api


def without_source(name: str) -> str:
    return api.MESSAGE_CLONE_WITHOUT_SOURCE.format(kind="snapshot", name=name)


def validation_failed(problem: str) -> str:
    return api.MESSAGE_CLONE_VALIDATION_FAILED.format(problem)


def restore_size(snapshot: Mapping[str, Any]) -> int | None:
    """``status.restoreSize`` in bytes; None when absent, negative or unreadable."""
    text = (snapshot.get("status") or {}).get("restoreSize")
    if text is None:
        return None
    try:
        size = parse_bytes(str(text))
    except ValueError:
        return None
    return size if size >= 0 else None


def problem(snapshot: Mapping[str, Any], dv: Mapping[str, Any]) -> str | None:
    """Why the snapshot cannot be cloned yet (upstream's ``IsSnapshotValidForClone`` and
    ``validateSnapshotClone`` before the size comparison, which rendering does), or None.
    A snapshot not ``readyToUse`` passes, as upstream's (the restore waits for it)."""
    meta = snapshot.get("metadata") or {}
    status = snapshot.get("status")
    if not status:
        return "no status on source snapshot yet"
    error = status.get("error")
    if error is not None:
        return f"snapshot in error state with msg: {error.get('message') or 'no details'}"
    if not (snapshot.get("spec") or {}).get("volumeSnapshotClassName"):
        # upstream names it name/namespace, in that order
        return (f"snapshot {meta.get('name')}/{meta.get('namespace')} does not have volume"
                " snap class populated, can't clone")
    size = restore_size(snapshot)
    if size is None:
        return "snapshot has no restore size"
    spec = dv.get("spec") or {}
    target: Mapping[str, Any] = spec.get("pvc") or spec.get("storage") or {}
    has_size = ((target.get("resources") or {}).get("requests") or {}).get("storage") is not None
    if not has_size and size == 0:
        return "size not specified by user/provisioner, can't tell how much needed for restore"
    return None


def source_volume_mode(content: Mapping[str, Any] | None) -> str:
    return str(((content or {}).get("spec") or {}).get("sourceVolumeMode") or "Filesystem")


def as_source(snapshot: Mapping[str, Any], content: Mapping[str, Any] | None,
              overhead: Fraction) -> clone.Source:
    """The snapshot as a clone source: a claim asking its ``restoreSize``, of the mode it
    was taken from (``overhead``: that of the snapshot's class, for a Filesystem one)."""
    size = restore_size(snapshot) or 0
    claim = {"metadata": dict(snapshot.get("metadata") or {}),
             "spec": {"volumeMode": source_volume_mode(content),
                      "resources": {"requests": {"storage": str(size)}}},
             "status": {"capacity": {"storage": str(size)}}}
    return clone.Source(claim=claim, overhead=overhead, snapshot=True)
