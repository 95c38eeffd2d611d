"""What the provisioner and the PV binder should do, decided without I/O.

Provisioning (``provision``): a claim gets a volume once it may — Immediate classes at
once, WaitForFirstConsumer ones once the scheduler set
``volume.kubernetes.io/selected-node`` — unless a ``dataSourceRef`` names a kind this
provisioner does not populate itself (a volume populator owns that claim, as on a real
cluster). A ``dataSource``/``dataSourceRef`` naming a PersistentVolumeClaim is a clone,
one naming a VolumeSnapshot (``snapshot.storage.k8s.io``) a restore (its own rules are
``snapshot_decisions.restore``); either must be in the claim's namespace.

Binding (``claim_plan``, ``volume_plan``), as the PV controller does it:
- a PV whose ``claimRef`` names a claim (possibly pre-set by someone else: the rebind a
  volume populator does) is bound to that claim, which gets ``spec.volumeName``;
- a claim whose PV is gone, or whose PV now belongs to another claim, is ``Lost``;
- a PV whose claim is gone (or was replaced by a new claim of the same name) is
  ``Released``, and deleted when its reclaimPolicy is Delete.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import sizes
from localcluster.kube.claims import SELECTED_NODE, claim_class_name
from localcluster.storage.snapshot_api import GROUP as SNAPSHOT_GROUP

PROVISIONED_BY = "pv.kubernetes.io/provisioned-by"
BIND_COMPLETED = "pv.kubernetes.io/bind-completed"
BOUND_BY_CONTROLLER = "pv.kubernetes.io/bound-by-controller"
STORAGE_PROVISIONER = "volume.kubernetes.io/storage-provisioner"
BETA_STORAGE_PROVISIONER = "volume.beta.kubernetes.io/storage-provisioner"

Obj = Mapping[str, Any]


def _meta(obj: Obj) -> Mapping[str, Any]:
    meta: Mapping[str, Any] = obj.get("metadata") or {}
    return meta


def _spec(obj: Obj) -> Mapping[str, Any]:
    spec: Mapping[str, Any] = obj.get("spec") or {}
    return spec


@dataclass(frozen=True)
class Skip:
    reason: str
    """Why nothing is done now (logged at DEBUG; the claim stays Pending)."""


@dataclass(frozen=True)
class Refuse:
    reason: str
    """A claim this provisioner will never satisfy as written (an Event on the claim)."""
    message: str


@dataclass(frozen=True)
class Wait:
    reason: str
    """A claim that cannot be provisioned yet for a reason worth telling its user (a
    Normal Event, at most once a minute); retried on every change."""
    message: str


@dataclass(frozen=True)
class Provision:
    volume_name: str
    capacity: int
    mode: str
    storage_class: str
    clone_from: str | None = None
    """Name of a claim in the same namespace whose volume is copied."""
    snapshot: str | None = None
    """Name of a VolumeSnapshot in the same namespace whose image is copied."""


def _is_core_pvc(ref: Mapping[str, Any]) -> bool:
    return ref.get("kind") == "PersistentVolumeClaim" and not ref.get("apiGroup")


def _is_snapshot(ref: Mapping[str, Any]) -> bool:
    return ref.get("kind") == "VolumeSnapshot" and ref.get("apiGroup") == SNAPSHOT_GROUP


def provision(
    *, claim: Obj, classes: Mapping[str, Obj], provisioner: str
) -> Skip | Refuse | Provision:
    """Whether to make a volume for ``claim`` now, and which."""
    meta, spec = _meta(claim), _spec(claim)
    name = f"{meta.get('namespace')}/{meta.get('name')}"
    if meta.get("deletionTimestamp"):
        return Skip(f"{name} is being deleted")
    if spec.get("volumeName"):
        return Skip(f"{name} already names volume {spec['volumeName']}")
    class_name = claim_class_name(claim, classes)
    sc = classes.get(class_name or "")
    if sc is None or sc.get("provisioner") != provisioner:
        return Skip(f"{name}: class {class_name!r} is not served by {provisioner}")
    ref = spec.get("dataSourceRef") or None
    if ref is not None and not _is_core_pvc(ref) and not _is_snapshot(ref):
        return Skip(f"{name}: dataSourceRef {ref.get('kind')} belongs to a volume populator")
    if sc.get("volumeBindingMode") == "WaitForFirstConsumer" and not (
        meta.get("annotations") or {}
    ).get(SELECTED_NODE):
        return Skip(f"{name}: waiting for first consumer to be scheduled")
    request = ((spec.get("resources") or {}).get("requests") or {}).get("storage")
    if request is None:
        return Refuse("ProvisioningFailed", "spec.resources.requests.storage is required")
    try:
        capacity = sizes.parse_bytes(request)
    except ValueError as err:
        return Refuse("ProvisioningFailed", f"spec.resources.requests.storage: {err}")
    if capacity <= 0:
        return Refuse("ProvisioningFailed", "spec.resources.requests.storage must be positive")
    mode = spec.get("volumeMode") or "Filesystem"
    if mode not in ("Filesystem", "Block"):
        return Refuse("ProvisioningFailed", f"spec.volumeMode {mode!r} is not supported")
    source = ref or spec.get("dataSource") or None
    clone_from = snapshot = None
    if source is not None:
        if source.get("namespace") not in (None, "", meta.get("namespace")):
            return Refuse("ProvisioningFailed", "a data source in another namespace "
                          f"({source.get('namespace')}) is not supported")
        if _is_core_pvc(source):
            clone_from = str(source.get("name"))
        elif _is_snapshot(source):
            snapshot = str(source.get("name"))
        else:
            return Refuse("ProvisioningFailed",
                          f"spec.dataSource kind {source.get('kind')!r} is not supported")
    return Provision(volume_name=f"pvc-{meta.get('uid')}", capacity=capacity, mode=mode,
                     storage_class=str(class_name), clone_from=clone_from, snapshot=snapshot)


def volume_manifest(
    *, claim: Obj, storage_class: Obj, plan: Provision, path: str, node: str,
    provisioner: str, capacity: int,
) -> dict[str, Any]:
    """The PersistentVolume for a provisioned claim, pre-bound to it."""
    meta, spec = _meta(claim), _spec(claim)
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {
            "name": plan.volume_name,
            "annotations": {PROVISIONED_BY: provisioner},
            "finalizers": [PV_PROTECTION],
        },
        "spec": {
            "capacity": {"storage": sizes.format_bytes(capacity)},
            "accessModes": list(spec.get("accessModes") or ["ReadWriteOnce"]),
            "persistentVolumeReclaimPolicy": storage_class.get("reclaimPolicy") or "Delete",
            "storageClassName": plan.storage_class,
            "volumeMode": plan.mode,
            "claimRef": {
                "apiVersion": "v1", "kind": "PersistentVolumeClaim",
                "namespace": meta.get("namespace"), "name": meta.get("name"),
                "uid": meta.get("uid"),
            },
            "local": {"path": path},
            "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
                {"key": "kubernetes.io/hostname", "operator": "In", "values": [node]},
            ]}]}},
        },
    }


# -- protection ----------------------------------------------------------------------

PVC_PROTECTION = "kubernetes.io/pvc-protection"
PV_PROTECTION = "kubernetes.io/pv-protection"


def claim_in_use(*, claim: Obj, pods: Sequence[Obj]) -> bool:
    """Whether a pod that has not finished uses the claim."""
    meta = _meta(claim)
    for pod in pods:
        pmeta = _meta(pod)
        if pmeta.get("namespace") != meta.get("namespace"):
            continue
        if ((pod.get("status") or {}).get("phase")) in ("Succeeded", "Failed"):
            continue
        for vol in _spec(pod).get("volumes") or []:
            if (vol.get("persistentVolumeClaim") or {}).get("claimName") == meta.get("name"):
                return True
    return False


def claim_finalizers(*, claim: Obj, pods: Sequence[Obj]) -> list[str] | None:
    """The claim's new finalizer list under PVC protection, or None to leave it: a claim
    gets the finalizer, and loses it once deleted and no running pod uses it."""
    meta = _meta(claim)
    finalizers = list(meta.get("finalizers") or [])
    if not meta.get("deletionTimestamp"):
        return None if PVC_PROTECTION in finalizers else [*finalizers, PVC_PROTECTION]
    if PVC_PROTECTION in finalizers and not claim_in_use(claim=claim, pods=pods):
        return [f for f in finalizers if f != PVC_PROTECTION]
    return None


# -- binding -------------------------------------------------------------------------


def _ref_matches(ref: Mapping[str, Any], claim: Obj) -> bool:
    m = _meta(claim)
    if (ref.get("namespace"), ref.get("name")) != (m.get("namespace"), m.get("name")):
        return False
    return not ref.get("uid") or ref.get("uid") == m.get("uid")


@dataclass(frozen=True)
class ClaimPlan:
    phase: str
    volume_name: str | None = None
    """Set ``spec.volumeName`` to this (None: leave it)."""
    capacity: str | None = None
    access_modes: tuple[str, ...] = ()
    annotations: Mapping[str, str] = field(default_factory=dict)


def claim_plan(*, claim: Obj, volumes: Mapping[str, Obj]) -> ClaimPlan:
    """The phase (and binding) a claim should have given the PVs that exist."""
    spec = _spec(claim)
    current = (claim.get("status") or {}).get("phase") or "Pending"
    name = spec.get("volumeName")
    if name:
        pv = volumes.get(str(name))
        if pv is None:
            return ClaimPlan(phase="Lost" if current in ("Bound", "Lost") else "Pending")
        ref = _spec(pv).get("claimRef") or {}
        if not ref:
            return ClaimPlan(phase="Pending")  # the binder will set the PV's claimRef
        if not _ref_matches(ref, claim):
            return ClaimPlan(phase="Lost" if current in ("Bound", "Lost") else "Pending")
        return _bound(pv)
    for vname, pv in sorted(volumes.items()):
        ref = _spec(pv).get("claimRef") or {}
        if ref and _ref_matches(ref, claim) and not _meta(pv).get("deletionTimestamp"):
            plan = _bound(pv)
            return ClaimPlan(phase="Bound", volume_name=vname, capacity=plan.capacity,
                             access_modes=plan.access_modes,
                             annotations={**plan.annotations, BOUND_BY_CONTROLLER: "yes"})
    return ClaimPlan(phase="Pending")


def _bound(pv: Obj) -> ClaimPlan:
    spec = _spec(pv)
    return ClaimPlan(
        phase="Bound",
        capacity=(spec.get("capacity") or {}).get("storage"),
        access_modes=tuple(spec.get("accessModes") or ()),
        annotations={BIND_COMPLETED: "yes"},
    )


@dataclass(frozen=True)
class VolumePlan:
    phase: str
    claim_uid: str | None = None
    """Fill in ``claimRef.uid`` (a claimRef pre-set by name only)."""
    delete: bool = False
    """Released with reclaimPolicy Delete: remove the volume and the PV."""


def volume_plan(*, volume: Obj, claims: Mapping[tuple[str, str], Obj]) -> VolumePlan:
    """The phase of a PV given the claims that exist."""
    spec = _spec(volume)
    ref = spec.get("claimRef") or {}
    if not ref:
        return VolumePlan(phase="Available")
    claim = claims.get((str(ref.get("namespace")), str(ref.get("name"))))
    released = claim is None or (ref.get("uid") and ref.get("uid") != _meta(claim).get("uid"))
    if claim is not None and not released:
        bound_elsewhere = _spec(claim).get("volumeName") not in (None, "", _meta(volume).get(
            "name"))
        if not bound_elsewhere:
            uid = None if ref.get("uid") else str(_meta(claim).get("uid"))
            return VolumePlan(phase="Bound", claim_uid=uid)
        released = True
    if released:
        delete = spec.get("persistentVolumeReclaimPolicy", "Retain") == "Delete"
        return VolumePlan(phase="Released", delete=delete)
    return VolumePlan(phase="Available")  # pragma: no cover - unreachable


def expansion(*, claim: Obj, volume: Obj) -> int | None:
    """Bytes to grow a bound claim's volume to, when its request exceeds the volume."""
    request = ((_spec(claim).get("resources") or {}).get("requests") or {}).get("storage")
    have = (_spec(volume).get("capacity") or {}).get("storage")
    if request is None or have is None:
        return None
    want = sizes.parse_bytes(request)
    return want if want > sizes.parse_bytes(have) else None
