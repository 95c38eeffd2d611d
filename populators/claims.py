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
    if ref.get("apiGroup") == names.CDI_GROUP and ref.get("kind") == kind and ref.get("name"):
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
        if names.SELECTED_NODE not in ann and names.IMMEDIATE_BINDING not in ann:
            return "waiting for the first consumer (WaitForFirstConsumer)"
    return None


def owner_ref(obj: Obj, *, kind: str, api_version: str = "v1") -> dict[str, Any]:
    m = meta(obj)
    return {"apiVersion": api_version, "kind": kind, "name": m.get("name"),
            "uid": m.get("uid"), "controller": True, "blockOwnerDeletion": True}


def render_prime(*, target: Obj, populator_kind: str,
                 source_annotations: Mapping[str, str]) -> dict[str, Any]:
    """PVC' for ``target``: same modes, size and class, owned by the target."""
    tm, ts = meta(target), spec(target)
    ann = {
        names.IMMEDIATE_BINDING: "",
        names.POPULATOR_KIND: populator_kind,
        **source_annotations,
    }
    node = annots(target).get(names.SELECTED_NODE)
    if node:
        ann[names.SELECTED_NODE] = node
    pspec: dict[str, Any] = {
        "accessModes": list(ts.get("accessModes") or []),
        "resources": dict(ts.get("resources") or {}),
    }
    if ts.get("storageClassName") is not None:
        pspec["storageClassName"] = ts["storageClassName"]
    if ts.get("volumeMode"):
        pspec["volumeMode"] = ts["volumeMode"]
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {
            "name": names.prime_name(str(tm.get("uid"))),
            "namespace": tm.get("namespace"),
            "labels": {names.APP_LABEL: names.APP_VALUE, names.VELERO_EXCLUDE: "true"},
            "annotations": ann,
            "ownerReferences": [owner_ref(target, kind="PersistentVolumeClaim")],
        },
        "spec": pspec,
    }


def owned_by(obj: Obj, owner: Obj) -> bool:
    uid = meta(owner).get("uid")
    return any(r.get("uid") == uid for r in meta(obj).get("ownerReferences") or [])


def controller_owner(obj: Obj) -> Mapping[str, Any] | None:
    for ref in meta(obj).get("ownerReferences") or []:
        if ref.get("controller"):
            return ref  # type: ignore[no-any-return]
    return None


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
