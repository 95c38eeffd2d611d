"""The target PVC and its twin PVC' (pure): which claims are ours, when a claim is ready
for population, and PVC' as upstream makes it.

PVC' (``prime-<target uid>``) is what the populator's pod writes into; its volume is
handed to the target afterwards (the rebind), because a claim with a foreign
``dataSourceRef`` is never provisioned by the storage itself.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from populators import names
from vocab import cdi as api

Obj = Mapping[str, Any]


def meta(obj: Obj | None) -> Mapping[str, Any]:
    return (obj or {}).get("metadata") or {}


def spec(obj: Obj | None) -> Mapping[str, Any]:
    return (obj or {}).get("spec") or {}


def annots(obj: Obj | None) -> Mapping[str, str]:
    return meta(obj).get("annotations") or {}


def phase(obj: Obj | None) -> str:
    return str(((obj or {}).get("status") or {}).get("phase") or "")


def source_ref(claim: Obj, *, kind: str) -> str | None:
    """The name of the ``kind`` object the claim's ``dataSourceRef`` names, else None."""
    ref = spec(claim).get("dataSourceRef") or {}
    if ref.get("apiGroup") == api.GROUP and ref.get("kind") == kind and ref.get("name"):
        return str(ref["name"])
    return None


def not_ready_reason(*, claim: Obj, storage_class: Obj | None) -> str | None:
    """Why the claim is not ready for population yet (None: it is). Upstream's
    ``claimReadyForPopulation``: the class exists; under WaitForFirstConsumer the
    scheduler has picked a node, unless immediate binding was requested."""
    if storage_class is None:
        return f"storage class {spec(claim).get('storageClassName')!r} not found"
    if storage_class.get("volumeBindingMode") == "WaitForFirstConsumer":
        ann = annots(claim)
        if api.SELECTED_NODE not in ann and api.IMMEDIATE_BINDING not in ann:
            return "waiting for the first consumer (WaitForFirstConsumer)"
    return None


def owner_ref(obj: Obj, *, kind: str, api_version: str = "v1") -> dict[str, Any]:
    m = meta(obj)
    return {"apiVersion": api_version, "kind": kind, "name": m.get("name"),
            "uid": m.get("uid"), "controller": True, "blockOwnerDeletion": True}


def render_prime(*, target: Obj, populator_kind: str,
                 source_annotations: Mapping[str, str], namespace: str | None = None,
                 data_source: Mapping[str, Any] | None = None,
                 request: str | None = None) -> dict[str, Any]:
    """PVC' for ``target``: same modes, size and class, owned by the target. In another
    ``namespace`` (a cross-namespace clone) it names its target by annotation instead;
    with ``data_source`` the storage fills it (a CSI clone); ``request`` asks for more
    than the target (a snapshot restores into no less than its restoreSize)."""
    tm, ts = meta(target), spec(target)
    ns = namespace or str(tm.get("namespace"))
    ann = {
        api.IMMEDIATE_BINDING: "",
        api.POPULATOR_KIND: populator_kind,
        **source_annotations,
    }
    node = annots(target).get(api.SELECTED_NODE)
    if node:
        ann[api.SELECTED_NODE] = node
    pspec: dict[str, Any] = {
        "accessModes": list(ts.get("accessModes") or []),
        "resources": dict(ts.get("resources") or {}),
    }
    if ts.get("storageClassName") is not None:
        pspec["storageClassName"] = ts["storageClassName"]
    if ts.get("volumeMode"):
        pspec["volumeMode"] = ts["volumeMode"]
    if data_source is not None:
        pspec["dataSource"] = dict(data_source)
    if request is not None:
        pspec["resources"] = {**pspec["resources"], "requests": {
            **(pspec["resources"].get("requests") or {}), "storage": request}}
    pmeta: dict[str, Any] = {
        "name": names.prime_name(str(tm.get("uid"))),
        "namespace": ns,
        "labels": {api.APP_LABEL: api.APP_LABEL_VALUE, api.VELERO_EXCLUDE: "true"},
        "annotations": ann,
    }
    if ns == tm.get("namespace"):
        pmeta["ownerReferences"] = [owner_ref(target, kind="PersistentVolumeClaim")]
    else:
        ann[api.PRIME_TARGET] = f"{tm.get('namespace')}/{tm.get('name')}/{tm.get('uid')}"
    return {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": pmeta,
            "spec": pspec}


def prime_of(prime: Obj, target: Obj) -> bool:
    """PVC' belongs to ``target``: owned by it, or (in another namespace) naming it."""
    if owned_by(prime, target):
        return True
    tm = meta(target)
    return meta(prime).get("namespace") != tm.get("namespace") and annots(prime).get(
        api.PRIME_TARGET) == f"{tm.get('namespace')}/{tm.get('name')}/{tm.get('uid')}"


def prime_target(prime: Obj) -> tuple[str, str, str] | None:
    """(namespace, name, uid) of PVC''s target, from its controller owner or annotation."""
    owner = controller_owner(prime)
    if owner is not None and owner.get("kind") == "PersistentVolumeClaim":
        return (str(meta(prime).get("namespace")), str(owner.get("name")),
                str(owner.get("uid")))
    parts = str(annots(prime).get(api.PRIME_TARGET) or "").split("/")
    return (parts[0], parts[1], parts[2]) if len(parts) == 3 and all(parts) else None


def owned_by(obj: Obj, owner: Obj) -> bool:
    uid = meta(owner).get("uid")
    return any(r.get("uid") == uid for r in meta(obj).get("ownerReferences") or [])


def controller_owner(obj: Obj) -> Mapping[str, Any] | None:
    for ref in meta(obj).get("ownerReferences") or []:
        if ref.get("controller"):
            return ref  # type: ignore[no-any-return]
    return None


def source_serves(*, source: Obj, source_namespace: str, target: Obj) -> str | None:
    """Why ``target`` may not use ``source`` (read from ``source_namespace``); None when it
    may (same namespace, or the source names the DataVolume controlling target).

    Kubernetes leaves the check of a cross-namespace ``dataSourceRef`` to the populator
    (upstream asks for a ReferenceGrant): without it anyone could point a claim of theirs
    at a VolumeCloneSource made for somebody else's authorised clone and copy a namespace
    they cannot read. Here the DataVolume controller authorises each cross-namespace clone
    (a SubjectAccessReview of its creator) and marks the source with that DataVolume's
    UID and its claim's namespace/name, so the source serves exactly that claim, and
    only while that DataVolume controls it. Both are needed: an owner reference is
    written by whoever creates the claim, so a claim elsewhere that names the right UID
    (anyone who may read the DataVolume's namespace sees it) is still not that claim."""
    tm = meta(target)
    if source_namespace == tm.get("namespace"):
        return None
    allowed = (meta(source).get("labels") or {}).get(api.CLONE_FOR_DV_LABEL)
    for_claim = (meta(source).get("annotations") or {}).get(api.CLONE_FOR_CLAIM)
    owner = controller_owner(target)
    if allowed and owner is not None and owner.get("kind") == "DataVolume" and str(
            owner.get("apiVersion", "")).startswith(api.GROUP + "/") and owner.get(
            "uid") == allowed and for_claim == f"{tm.get('namespace')}/{tm.get('name')}":
        return None
    return (f"{source.get('kind') or 'source'} {source_namespace}/"
            f"{meta(source).get('name')} was not made for this claim: a source in another "
            "namespace serves only the DataVolume it was authorised for")


def rebind_claim_ref(*, pv: Obj, prime: Obj, target: Obj) -> dict[str, Any] | None:
    """The PV's new ``claimRef`` naming the target (upstream's ``Rebind``), or None when the
    PV does not belong to PVC' (someone else's volume: never taken)."""
    ref = spec(pv).get("claimRef") or {}
    pm = meta(prime)
    if (ref.get("namespace"), ref.get("name"), ref.get("uid")) != (
            pm.get("namespace"), pm.get("name"), pm.get("uid")):
        return None
    tm = meta(target)
    return {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
            "namespace": tm.get("namespace"), "name": tm.get("name"), "uid": tm.get("uid"),
            "resourceVersion": tm.get("resourceVersion")}


def claim_ref_is(pv: Obj, claim: Obj) -> bool:
    ref = spec(pv).get("claimRef") or {}
    m = meta(claim)
    return (ref.get("namespace"), ref.get("name"), ref.get("uid")) == (
        m.get("namespace"), m.get("name"), m.get("uid"))
