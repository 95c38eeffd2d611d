"""From a DataVolume to the objects that carry it out: target PVC, VolumeImportSource (pure).

The target PVC is named like the DataVolume and owned by it; its ``dataSourceRef`` points
at a VolumeImportSource ``volume-import-source-<dv uid>``, so the storage provisioner
leaves it to the import populator. ``spec.pvc`` is used as written. ``spec.storage`` is
completed from the class's StorageProfile (access modes, volume mode), raised to the
profile's minimum supported size and then, on Filesystem, inflated by the filesystem
overhead so that the image fits (current upstream's order).
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from cdi import clone
from cdi.config import overhead_for, with_preallocation
from cdi.errors import CdiError
from sizes import parse_bytes, required_space
from vocab import cdi as api
from vocab import sources

Obj = dict[str, Any]


class RenderError(CdiError):
    """The DataVolume cannot be turned into a claim; ``reason`` is a CamelCase word."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message


@dataclass(frozen=True)
class Target:
    claim: Obj
    import_source: Obj | None
    """The VolumeImportSource, or for an upload the VolumeUploadSource (see its kind)."""
    clone_source: Obj | None = None


def import_source_name(dv_uid: str) -> str:
    return f"{api.IMPORT_SOURCE_PREFIX}{dv_uid}"


def upload_source_name(dv_uid: str) -> str:
    """The VolumeUploadSource of an upload DataVolume (upstream's name)."""
    return f"{api.UPLOAD_SOURCE_PREFIX}{dv_uid}"


def source_kind(dv: Mapping[str, Any]) -> str | None:
    """The one kind named under ``spec.source`` (``http``, ``blank``…), or None."""
    source = (dv.get("spec") or {}).get("source") or {}
    kinds = [k for k in sources.ALL_KINDS if source.get(k) is not None]
    return kinds[0] if len(kinds) == 1 else None


def owner_reference(obj: Mapping[str, Any]) -> Obj:
    meta = obj["metadata"]
    return {"apiVersion": obj["apiVersion"], "kind": obj["kind"], "name": meta["name"],
            "uid": meta["uid"], "controller": True, "blockOwnerDeletion": True}


def pick_storage_class(
    *, requested: str | None, classes: Iterable[Mapping[str, Any]], content_type: str,
) -> Mapping[str, Any] | None:
    """The StorageClass a claim will get: the named one, else the default (virt first)."""
    classes = list(classes)
    if requested:
        return next((c for c in classes if c["metadata"]["name"] == requested), None)

    def marked(sc: Mapping[str, Any], key: str) -> bool:
        return ((sc["metadata"].get("annotations") or {}).get(key) or "") == "true"

    if content_type != "archive":
        virt = [c for c in classes if marked(c, api.DEFAULT_VIRT_CLASS)]
        if virt:
            return sorted(virt, key=lambda c: c["metadata"]["name"])[0]
    default = [c for c in classes if marked(c, api.DEFAULT_CLASS)]
    return sorted(default, key=lambda c: c["metadata"]["name"])[0] if default else None


def render(
    *, dv: Mapping[str, Any], storage_class: Mapping[str, Any] | None,
    profile: Mapping[str, Any] | None, config_status: Mapping[str, Any] | None,
    clone_from: tuple[clone.SourceRef, clone.Source] | None = None,
) -> Target:
    """The target claim (and its VolumeImportSource, or VolumeCloneSource when
    ``clone_from`` gives the source claim of a clone) for a DataVolume.

    :raise RenderError: when the DataVolume cannot be satisfied as it stands.
    """
    dv = with_preallocation(dv, config_status)
    meta, spec = dv["metadata"], dv.get("spec") or {}
    content_type = spec.get("contentType") or "kubevirt"
    kind = source_kind(dv)
    if clone_from is None and kind not in (*sources.IMPORT_KINDS, sources.UPLOAD):
        raise RenderError("UnsupportedSource",
                          f"source kind {kind!r} is not supported by this operator yet")
    if spec.get("pvc") is not None:
        claim_spec = copy.deepcopy(spec["pvc"])
        if content_type == "archive" and claim_spec.get("volumeMode") == "Block":
            raise RenderError("InvalidVolumeMode",
                              "ContentType Archive cannot have block volumeMode")
        if clone_from is not None:
            _clone_size(dv, claim_spec, clone_from[1], config_status=config_status,
                        default=False)
    elif spec.get("storage") is not None:
        claim_spec = _complete_storage(spec["storage"], storage_class=storage_class,
                                       profile=profile, config_status=config_status,
                                       content_type=content_type,
                                       clone_source=None if clone_from is None
                                       else clone_from[1], dv=dv)
    else:
        raise RenderError("MissingStorage", "spec.pvc or spec.storage is required")
    source_name = import_source_name(meta["uid"])
    if clone_from is not None:
        claim_spec["dataSourceRef"] = clone.data_source_ref_field(dv=dv, source=clone_from[0])
    elif kind == "upload":
        source_name = upload_source_name(meta["uid"])
        claim_spec["dataSourceRef"] = {"apiGroup": api.GROUP,
                                       "kind": api.UPLOAD_SOURCE_KIND, "name": source_name}
    else:
        claim_spec["dataSourceRef"] = {"apiGroup": api.GROUP,
                                       "kind": api.IMPORT_SOURCE_KIND, "name": source_name}
    claim_spec.pop("dataSource", None)
    labels = dict(meta.get("labels") or {})
    labels[api.APP_LABEL] = api.APP_LABEL_VALUE
    if (claim_spec.get("volumeMode") or "Filesystem") == "Filesystem":
        labels[api.FILL_ALERT_LABEL] = "disabled"
    annotations = dict(meta.get("annotations") or {})
    annotations.update({
        api.POD_RESTARTS: "0",
        api.CONTENT_TYPE: content_type,
        api.PREALLOCATION_REQUESTED: "true" if spec.get("preallocation") else "false",
        api.CREATED_FOR_DV: meta["uid"],
    })
    claim = {
        "apiVersion": "v1", "kind": "PersistentVolumeClaim",
        "metadata": {"name": meta["name"], "namespace": meta["namespace"], "labels": labels,
                     "annotations": annotations, "ownerReferences": [owner_reference(dv)]},
        "spec": claim_spec,
    }
    if clone_from is not None:
        return Target(claim=claim, import_source=None,
                      clone_source=clone.clone_source(dv=dv, source=clone_from[0]))
    source_spec: Obj = {"source": copy.deepcopy(spec["source"]), "contentType": content_type}
    if kind == "upload":
        source_spec.pop("source")  # a VolumeUploadSource has no source, only its content
    if spec.get("preallocation") is not None:
        source_spec["preallocation"] = bool(spec["preallocation"])
    import_source = {
        "apiVersion": api.API_VERSION,
        "kind": api.UPLOAD_SOURCE_KIND if kind == "upload" else api.IMPORT_SOURCE_KIND,
        "metadata": {"name": source_name, "namespace": meta["namespace"],
                     "labels": {api.APP_LABEL: api.APP_LABEL_VALUE},
                     "ownerReferences": [owner_reference(dv)]},
        "spec": source_spec,
    }
    return Target(claim=claim, import_source=import_source)


def _complete_storage(
    storage: Mapping[str, Any], *, storage_class: Mapping[str, Any] | None,
    profile: Mapping[str, Any] | None, config_status: Mapping[str, Any] | None,
    content_type: str, clone_source: clone.Source | None = None,
    dv: Mapping[str, Any] | None = None,
) -> Obj:
    out: Obj = copy.deepcopy(dict(storage))
    if storage_class is None:
        name = storage.get("storageClassName")
        raise RenderError("StorageClassNotFound",
                          f"storage class {name!r} not found" if name
                          else "no storage class given and no default storage class")
    class_name = storage_class["metadata"]["name"]
    out["storageClassName"] = class_name
    sets = list(((profile or {}).get("status") or {}).get("claimPropertySets") or [])
    mode = out.get("volumeMode")
    if mode == "FromStorageProfile":
        mode = None
    if content_type == "archive":
        if mode == "Block":
            raise RenderError("InvalidVolumeMode",
                              "ContentType Archive cannot have block volumeMode")
        mode = "Filesystem"
    if not out.get("accessModes"):
        chosen = next((s for s in sets if mode is None or s.get("volumeMode") == mode), None)
        if chosen is None:
            raise RenderError("ErrClaimNotValid",
                              f"no accessMode specified in StorageProfile {class_name}")
        out["accessModes"] = list(chosen["accessModes"])
        mode = mode or chosen.get("volumeMode")
    if mode is None:
        chosen = next((s for s in sets
                       if set(s.get("accessModes") or []) >= set(out["accessModes"])), None)
        mode = (chosen or {}).get("volumeMode") or "Filesystem"
    out["volumeMode"] = mode
    requests = dict(((out.get("resources") or {}).get("requests")) or {})
    text = requests.get("storage")
    overhead = overhead_for(status=config_status, storage_class=class_name, volume_mode=mode)
    if clone_source is not None and dv is not None:
        out["resources"] = {**(out.get("resources") or {}), "requests": requests}
        _clone_size(dv, out, clone_source, config_status=config_status, default=True)
        return out
    if text is None:
        raise RenderError("ErrClaimNotValid", "spec.storage.resources.requests.storage is missing")
    try:
        size = parse_bytes(text)
    except ValueError as err:
        raise RenderError("ErrClaimNotValid",
                          f"spec.storage.resources.requests.storage: {err}") from None
    minimum = (((profile or {}).get("metadata") or {}).get("annotations") or {}).get(
        api.MINIMUM_PVC_SIZE)
    wanted = size
    if minimum:
        # a bad annotation is the profile's problem, not this claim's
        with contextlib.suppress(ValueError):
            wanted = max(size, parse_bytes(minimum))
    # as current upstream: the minimum first, the overhead on top (the image still fits)
    new_size = required_space(size=wanted, overhead=overhead) if overhead else wanted
    if new_size != size:
        requests["storage"] = str(new_size)
    out["resources"] = {**(out.get("resources") or {}), "requests": requests}
    return out


def _clone_size(dv: Mapping[str, Any], claim_spec: Obj, source: clone.Source, *,
                config_status: Mapping[str, Any] | None, default: bool) -> None:
    """Size a clone target in place: check a given size against the source; fill an
    omitted one from it (``spec.storage`` only, ``default``)."""
    field = "spec.storage" if default else "spec.pvc"
    mode = str(claim_spec.get("volumeMode") or "Filesystem")
    requests = dict((claim_spec.get("resources") or {}).get("requests") or {})
    text = requests.get("storage")
    try:
        if text is None:
            if not default:
                raise RenderError("ErrClaimNotValid",
                                  f"{field}.resources.requests.storage is missing")
            overhead = overhead_for(status=config_status,
                                    storage_class=claim_spec.get("storageClassName"),
                                    volume_mode=mode)
            size = clone.default_size(source=source, target_mode=mode,
                                      target_overhead=overhead)
            same = mode == clone.volume_mode(source.claim)
            requests["storage"] = str(clone.request_text(source.claim)) if same else str(size)
        else:
            try:
                requested = parse_bytes(text)
            except ValueError as err:
                raise RenderError("ErrClaimNotValid",
                                  f"{field}.resources.requests.storage: {err}") from None
            if default and mode == "Filesystem":
                # spec.storage: the request is what the guest gets, the claim carries the
                # filesystem overhead on top (as every spec.storage claim does; upstream's
                # GetEffectiveStorageResources), and that claim is what must hold the
                # source's: a clone asking for the golden DataVolume's own spec.storage
                # size fits the golden claim, which was grown the same way
                overhead = overhead_for(status=config_status,
                                        storage_class=claim_spec.get("storageClassName"),
                                        volume_mode=mode)
                if overhead:
                    requested = required_space(size=requested, overhead=overhead)
                    requests["storage"] = str(requested)
            clone.check_size(dv=dv, source=source, requested=requested)
            if default and mode != clone.volume_mode(source.claim):
                # across modes the image must fit: at least the image plus overhead
                overhead = overhead_for(status=config_status,
                                        storage_class=claim_spec.get("storageClassName"),
                                        volume_mode=mode)
                need = clone.default_size(source=source, target_mode=mode,
                                          target_overhead=overhead)
                if need > requested:
                    requests["storage"] = str(need)
    except clone.CloneError as err:
        raise RenderError(err.reason, err.message) from None
    except ValueError as err:
        raise RenderError("CloneValidationFailed", f"source claim: {err}") from None
    claim_spec["resources"] = {**(claim_spec.get("resources") or {}), "requests": requests}
