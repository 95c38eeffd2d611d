"""Clone DataVolumes (``source.pvc``, ``source.snapshot``, or a DataSource naming a PVC
or a VolumeSnapshot) seen from the DataVolume controller (pure): where the source is,
how big the target must be, whether a smaller target is allowed, and the
VolumeCloneSource the clone populator works from (a snapshot's own rules are in
:mod:`cdi.snapshot_clone`).

Sizes, as upstream: a target that omits its size takes the source's. For the same volume
mode that is the source claim's request (the storage can then clone it as it is); across
modes it is the size of the disk image the source holds (a Block source: its capacity; a
Filesystem source: the usable space of its request, which is what the importer grew
``disk.img`` to), inflated by the target's filesystem overhead. A target asking for less
than the source is refused unless the DataVolume says ``cdi.kubevirt.io/permissiveClone``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from cdi.errors import CdiError
from sizes import parse_bytes, required_space, usable_space
from vocab import cdi as api

Obj = dict[str, Any]

SMALLER_THAN_SOURCE = "target resources requests storage size is smaller than the source"
"""Upstream's message, word for word (users and tools match on it)."""


class CloneError(CdiError):
    """The clone cannot go ahead as written; ``reason`` is a CamelCase word."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message


PVC = "pvc"
SNAPSHOT = "snapshot"


@dataclass(frozen=True)
class SourceRef:
    namespace: str
    name: str
    kind: str = PVC
    """``pvc`` (a claim) or ``snapshot`` (a VolumeSnapshot), as upstream's source types."""


@dataclass(frozen=True)
class Source:
    """The source claim as the controller found it, with its filesystem overhead."""

    claim: Mapping[str, Any]
    overhead: Fraction
    snapshot: bool = False
    """A VolumeSnapshot standing in for the claim (:func:`cdi.snapshot_clone.as_source`)."""


def pvc_source(dv: Mapping[str, Any]) -> SourceRef | None:
    """``spec.source.pvc`` of a DataVolume (namespace defaults to the DataVolume's)."""
    pvc = ((dv.get("spec") or {}).get("source") or {}).get("pvc")
    if not isinstance(pvc, Mapping) or not pvc.get("name"):
        return None
    ns = pvc.get("namespace") or dv["metadata"]["namespace"]
    return SourceRef(namespace=str(ns), name=str(pvc["name"]))


def snapshot_source(dv: Mapping[str, Any]) -> SourceRef | None:
    """``spec.source.snapshot`` of a DataVolume (namespace defaults to the DataVolume's;
    the webhook asks for one, as upstream's)."""
    snap = ((dv.get("spec") or {}).get("source") or {}).get("snapshot")
    if not isinstance(snap, Mapping) or not snap.get("name"):
        return None
    ns = snap.get("namespace") or dv["metadata"]["namespace"]
    return SourceRef(namespace=str(ns), name=str(snap["name"]), kind=SNAPSHOT)


def data_source_ref(dv: Mapping[str, Any]) -> SourceRef | None:
    """``spec.sourceRef`` naming a DataSource (namespace defaults to the DataVolume's)."""
    ref = (dv.get("spec") or {}).get("sourceRef")
    if not isinstance(ref, Mapping) or ref.get("kind") != "DataSource" or not ref.get("name"):
        return None
    return SourceRef(namespace=str(ref.get("namespace") or dv["metadata"]["namespace"]),
                     name=str(ref["name"]))


def data_source_target(data_source: Mapping[str, Any]) -> tuple[str, SourceRef] | None:
    """What a DataSource points at: ("dataSource", ref), ("pvc", ref) or ("snapshot",
    ref), in upstream's order (a DataSource named wins); None if nothing."""
    ns = str((data_source.get("metadata") or {}).get("namespace") or "")
    source = (data_source.get("spec") or {}).get("source") or {}
    for kind in ("dataSource", PVC, SNAPSHOT):
        ref = source.get(kind)
        if isinstance(ref, Mapping) and ref.get("name"):
            return kind, SourceRef(namespace=str(ref.get("namespace") or ns),
                                   name=str(ref["name"]),
                                   kind=SNAPSHOT if kind == SNAPSHOT else PVC)
    return None


def resolve_source(dv: Mapping[str, Any], lookup: Callable[[str, str], Mapping[str, Any] | None]
                   ) -> SourceRef | tuple[str, str] | None:
    """The claim or VolumeSnapshot a clone DataVolume copies: ``source.pvc``,
    ``source.snapshot``, or what its DataSource names (following one DataSource to
    another, no further; ``lookup(namespace, name)`` reads a DataSource). None for other
    DataVolumes; a (reason, message) when a DataSource leads to nothing."""
    direct = pvc_source(dv) or snapshot_source(dv)
    if direct is not None:
        return direct
    ref = data_source_ref(dv)
    if ref is None:
        return None
    for _depth in range(2):
        ds = lookup(ref.namespace, ref.name)
        if ds is None:
            return ("CloneSourceNotFound", f"DataSource {ref.namespace}/{ref.name} not found")
        target = data_source_target(ds)
        if target is None:
            return ("CloneSourceNotFound",
                    f"DataSource {ref.namespace}/{ref.name} has no source")
        kind, ref = target
        if kind in (PVC, SNAPSHOT):
            return ref
    return ("CloneSourceNotFound", "DataSource: spec.source.dataSource may refer to another"
            " DataSource only one level deep")


def volume_mode(claim: Mapping[str, Any]) -> str:
    return str((claim.get("spec") or {}).get("volumeMode") or "Filesystem")


def _request(claim: Mapping[str, Any]) -> int:
    text = (((claim.get("spec") or {}).get("resources") or {}).get("requests") or {}).get(
        "storage")
    if text is None:
        raise CloneError("CloneValidationFailed", "the source claim has no storage request")
    return parse_bytes(str(text))


def request_text(claim: Mapping[str, Any]) -> str:
    """The source's storage request as written (same-mode targets copy it)."""
    _request(claim)
    return str(claim["spec"]["resources"]["requests"]["storage"])


def capacity(claim: Mapping[str, Any]) -> int:
    """The source's bytes: its status capacity when bound, else its request."""
    text = ((claim.get("status") or {}).get("capacity") or {}).get("storage")
    return parse_bytes(str(text)) if text else _request(claim)


def image_size(source: Source) -> int:
    """The size of the disk image the source holds (what a copy must fit)."""
    if volume_mode(source.claim) == "Block":
        return capacity(source.claim)
    return usable_space(capacity=_request(source.claim), overhead=source.overhead)


def default_size(*, source: Source, target_mode: str, target_overhead: Fraction) -> int:
    """The size a target that omits it gets (see the module docstring)."""
    if target_mode == volume_mode(source.claim) or (
            source.snapshot and volume_mode(source.claim) == "Filesystem"):
        # a snapshot's restoreSize is used as it is, but from Block into Filesystem
        return _request(source.claim)
    size = image_size(source)
    return required_space(size=size, overhead=target_overhead) if target_overhead else size


def check_size(*, dv: Mapping[str, Any], source: Source, requested: int | None) -> None:
    """Upstream's ``ValidateRequestedCloneSize``: the target's request is not below the
    source's, unless ``permissiveClone`` (not for a snapshot: storage cannot restore into
    less than its ``restoreSize``, and upstream's snapshot clone has no such escape)."""
    if requested is None:
        return
    permissive = ((dv.get("metadata") or {}).get("annotations") or {}).get(
        api.PERMISSIVE_CLONE) == "true" and not source.snapshot
    if requested < _request(source.claim) and not permissive:
        raise CloneError("CloneValidationFailed", SMALLER_THAN_SOURCE)


def clone_source_name(dv_uid: str) -> str:
    return f"{api.CLONE_SOURCE_PREFIX}{dv_uid}"


def clone_source(*, dv: Mapping[str, Any], source: SourceRef) -> Obj:
    """The VolumeCloneSource ``volume-clone-source-<dv uid>``: in the source namespace
    (as upstream; a claim's cross-namespace ``dataSourceRef`` names it there). Owned by the
    DataVolume only when they share a namespace (owner references do not cross them);
    otherwise the label names the DataVolume (the controller deletes it itself) and an
    annotation the claim it serves, both checked by the clone populator."""
    meta = dv["metadata"]
    obj: Obj = {
        "apiVersion": api.API_VERSION, "kind": api.CLONE_SOURCE_KIND,
        "metadata": {"name": clone_source_name(meta["uid"]), "namespace": source.namespace,
                     "labels": {api.APP_LABEL: api.APP_LABEL_VALUE,
                                api.CLONE_FOR_DV_LABEL: str(meta["uid"])}},
        "spec": {"source": {"kind": "PersistentVolumeClaim", "name": source.name}},
    }
    if source.kind == SNAPSHOT:
        obj["spec"]["source"] = {"apiGroup": api.SNAPSHOT_API_GROUP,
                                 "kind": api.VOLUME_SNAPSHOT_KIND, "name": source.name}
    if source.namespace != meta["namespace"]:
        obj["metadata"]["annotations"] = {
            api.CLONE_FOR_CLAIM: f"{meta['namespace']}/{meta['name']}"}
    else:
        obj["metadata"]["ownerReferences"] = [{
            "apiVersion": dv["apiVersion"], "kind": dv["kind"], "name": meta["name"],
            "uid": meta["uid"], "controller": True, "blockOwnerDeletion": True}]
    spec = dv.get("spec") or {}
    if spec.get("preallocation") is not None:
        obj["spec"]["preallocation"] = bool(spec["preallocation"])
    return obj


def keeps_clone_source(dv: Mapping[str, Any]) -> bool:
    """Whether a finished DataVolume keeps its VolumeCloneSource: while it asks to retain
    its pods (``storage.pod.retainAfterCompletion``), so that a host-assisted copy's
    source pod and its Secret, which the VolumeCloneSource owns, stay to be looked at, as
    upstream keeps them. They go with the DataVolume (its deletion removes the
    VolumeCloneSource), where upstream leaves the source pod for the user to delete."""
    annotations = (dv.get("metadata") or {}).get("annotations") or {}
    return annotations.get(api.POD_RETAIN) == "true"


def orphaned_clone_sources(*, clone_sources: Sequence[Mapping[str, Any]],
                           datavolume_uids: set[str]) -> list[tuple[str, str]]:
    """(namespace, name) of the VolumeCloneSources made for a DataVolume that is gone.

    A cross-namespace VolumeCloneSource has no owner reference (they do not cross
    namespaces), so if the operator was down when its DataVolume was deleted nothing else
    removes it. ``clone_sources`` must be listed *before* the DataVolumes whose UIDs are
    ``datavolume_uids``: a DataVolume exists before its VolumeCloneSource, so one listed
    first cannot belong to a DataVolume created after that list. Only the objects this
    controller makes (its label, its name for that UID) are ever named."""
    out = []
    for vcs in clone_sources:
        meta = vcs.get("metadata") or {}
        uid = (meta.get("labels") or {}).get(api.CLONE_FOR_DV_LABEL)
        if not uid or meta.get("name") != clone_source_name(str(uid)):
            continue
        if uid not in datavolume_uids:
            out.append((str(meta.get("namespace")), str(meta["name"])))
    return out


def data_source_ref_field(*, dv: Mapping[str, Any], source: SourceRef) -> Obj:
    """The target claim's ``dataSourceRef``: the VolumeCloneSource, with its namespace
    when it is not the claim's."""
    ref: Obj = {"apiGroup": api.GROUP, "kind": api.CLONE_SOURCE_KIND,
                "name": clone_source_name(dv["metadata"]["uid"])}
    if source.namespace != dv["metadata"]["namespace"]:
        ref["namespace"] = source.namespace
    return ref
