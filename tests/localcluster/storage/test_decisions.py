"""Table tests of provisioning and binding decisions (no I/O)."""

from __future__ import annotations

from typing import Any

import pytest

from localcluster.kube import claims
from localcluster.storage import classes, decisions
from localcluster.storage.decisions import ClaimPlan, Provision, Refuse, Skip, VolumePlan

P = classes.PROVISIONER
CLASSES = {sc["metadata"]["name"]: sc for sc in classes.storage_classes()}
CLASSES["other"] = {"metadata": {"name": "other"}, "provisioner": "example.com/other"}


def pvc(name: str = "c", *, uid: str = "u1", sc: str | None = "local-immediate",
        size: Any = "1Gi", mode: str | None = None, annotations: dict | None = None,
        volume: str | None = None, phase: str | None = None, **spec: Any) -> dict:
    s: dict[str, Any] = {"accessModes": ["ReadWriteOnce"], **spec}
    if size is not None:
        s["resources"] = {"requests": {"storage": size}}
    if sc is not None:
        s["storageClassName"] = sc
    if mode:
        s["volumeMode"] = mode
    if volume:
        s["volumeName"] = volume
    obj = {"metadata": {"name": name, "namespace": "ns", "uid": uid,
                        "annotations": annotations or {}}, "spec": s}
    if phase:
        obj["status"] = {"phase": phase}
    return obj


SEL = {claims.SELECTED_NODE: "node1"}
IMPORT_REF = {"apiGroup": "cdi.kubevirt.io", "kind": "VolumeImportSource", "name": "x"}
PVC_REF = {"kind": "PersistentVolumeClaim", "name": "golden"}
SNAP_REF = {"apiGroup": "snapshot.storage.k8s.io", "kind": "VolumeSnapshot", "name": "s"}


@pytest.mark.parametrize(("claim", "expected"), [
    (pvc(), Provision("pvc-u1", 2**30, "Filesystem", "local-immediate")),
    (pvc(mode="Block", size="100Mi"), Provision("pvc-u1", 100 * 2**20, "Block",
                                                "local-immediate")),
    (pvc(sc=None), Skip("ns/c: waiting for first consumer to be scheduled")),
    (pvc(sc="local"), Skip("ns/c: waiting for first consumer to be scheduled")),
    (pvc(sc="local", annotations=SEL), Provision("pvc-u1", 2**30, "Filesystem", "local")),
    (pvc(sc=None, annotations=SEL), Provision("pvc-u1", 2**30, "Filesystem", "local")),
    (pvc(sc="other"), Skip("ns/c: class 'other' is not served by " + P)),
    (pvc(sc="missing"), Skip("ns/c: class 'missing' is not served by " + P)),
    (pvc(volume="pv1"), Skip("ns/c already names volume pv1")),
    (pvc(dataSourceRef=IMPORT_REF),
     Skip("ns/c: dataSourceRef VolumeImportSource belongs to a volume populator")),
    (pvc(dataSourceRef=PVC_REF, sc="local-reflink"),
     Provision("pvc-u1", 2**30, "Filesystem", "local-reflink", clone_from="golden")),
    (pvc(dataSource=PVC_REF), Provision("pvc-u1", 2**30, "Filesystem", "local-immediate",
                                        clone_from="golden")),
    (pvc(dataSourceRef=SNAP_REF),
     Provision("pvc-u1", 2**30, "Filesystem", "local-immediate", snapshot="s")),
    (pvc(dataSource=SNAP_REF, mode="Block"),
     Provision("pvc-u1", 2**30, "Block", "local-immediate", snapshot="s")),
    (pvc(dataSourceRef=SNAP_REF, sc="local"),
     Skip("ns/c: waiting for first consumer to be scheduled")),
    (pvc(dataSourceRef={**SNAP_REF, "namespace": "elsewhere"}),
     Refuse("ProvisioningFailed", "a data source in another namespace (elsewhere) is not "
                                  "supported")),
    (pvc(dataSource={"apiGroup": "example.com", "kind": "VolumeSnapshot", "name": "s"}),
     Refuse("ProvisioningFailed", "spec.dataSource kind 'VolumeSnapshot' is not supported")),
    (pvc(size=None), Refuse("ProvisioningFailed", "spec.resources.requests.storage is required")),
    (pvc(size="lots"), Refuse("ProvisioningFailed",
                              "spec.resources.requests.storage: quantity 'lots' is not a "
                              "Kubernetes quantity (a number and one optional suffix such "
                              "as Ki, Mi, Gi, m, k, M, G or e3)")),
    (pvc(mode="Tape"), Refuse("ProvisioningFailed", "spec.volumeMode 'Tape' is not supported")),
])
def test_provision(claim: dict, expected: object) -> None:
    assert decisions.provision(claim=claim, classes=CLASSES, provisioner=P) == expected


def test_deleted_claim_is_not_provisioned() -> None:
    claim = pvc()
    claim["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    assert isinstance(decisions.provision(claim=claim, classes=CLASSES, provisioner=P), Skip)


def pv(name: str = "pv1", *, ref: dict | None = None, size: str = "1Gi",
       policy: str = "Delete") -> dict:
    spec: dict[str, Any] = {"capacity": {"storage": size}, "accessModes": ["ReadWriteOnce"],
                            "persistentVolumeReclaimPolicy": policy}
    if ref is not None:
        spec["claimRef"] = ref
    return {"metadata": {"name": name}, "spec": spec}


REF_C = {"namespace": "ns", "name": "c", "uid": "u1"}
REF_C_NO_UID = {"namespace": "ns", "name": "c"}
REF_OTHER = {"namespace": "ns", "name": "other", "uid": "u9"}
BOUND = ClaimPlan(phase="Bound", capacity="1Gi", access_modes=("ReadWriteOnce",),
                  annotations={decisions.BIND_COMPLETED: "yes"})


@pytest.mark.parametrize(("claim", "volumes", "plan"), [
    (pvc(), {}, ClaimPlan(phase="Pending")),
    (pvc(), {"pv1": pv(ref=REF_C)},
     ClaimPlan(phase="Bound", volume_name="pv1", capacity="1Gi",
               access_modes=("ReadWriteOnce",),
               annotations={decisions.BIND_COMPLETED: "yes",
                            decisions.BOUND_BY_CONTROLLER: "yes"})),
    (pvc(), {"pv1": pv(ref=REF_C_NO_UID)},  # pre-bound by name: binds
     ClaimPlan(phase="Bound", volume_name="pv1", capacity="1Gi",
               access_modes=("ReadWriteOnce",),
               annotations={decisions.BIND_COMPLETED: "yes",
                            decisions.BOUND_BY_CONTROLLER: "yes"})),
    (pvc(), {"pv1": pv(ref={**REF_C, "uid": "old"})}, ClaimPlan(phase="Pending")),
    (pvc(volume="pv1"), {"pv1": pv(ref=REF_C)}, BOUND),
    (pvc(volume="pv1", phase="Bound"), {}, ClaimPlan(phase="Lost")),
    (pvc(volume="pv1"), {}, ClaimPlan(phase="Pending")),
    # The populator rebind: PV' now names the target, so the prime claim is Lost.
    (pvc(volume="pv1", phase="Bound"), {"pv1": pv(ref=REF_OTHER)}, ClaimPlan(phase="Lost")),
    (pvc(volume="pv1"), {"pv1": pv()}, ClaimPlan(phase="Pending")),
])
def test_claim_plan(claim: dict, volumes: dict, plan: ClaimPlan) -> None:
    assert decisions.claim_plan(claim=claim, volumes=volumes) == plan


@pytest.mark.parametrize(("volume", "claims", "plan"), [
    (pv(), {}, VolumePlan(phase="Available")),
    (pv(ref=REF_C), {("ns", "c"): pvc()}, VolumePlan(phase="Bound")),
    (pv(ref=REF_C), {("ns", "c"): pvc(volume="pv1")}, VolumePlan(phase="Bound")),
    (pv(ref=REF_C_NO_UID), {("ns", "c"): pvc()}, VolumePlan(phase="Bound", claim_uid="u1")),
    (pv(ref=REF_C), {}, VolumePlan(phase="Released", delete=True)),
    (pv(ref=REF_C, policy="Retain"), {}, VolumePlan(phase="Released")),
    (pv(ref=REF_C), {("ns", "c"): pvc(uid="new")}, VolumePlan(phase="Released", delete=True)),
    (pv(ref=REF_C), {("ns", "c"): pvc(volume="pv2")}, VolumePlan(phase="Released", delete=True)),
])
def test_volume_plan(volume: dict, claims: dict, plan: VolumePlan) -> None:
    assert decisions.volume_plan(volume=volume, claims=claims) == plan


def test_expansion() -> None:
    assert decisions.expansion(claim=pvc(size="2Gi"), volume=pv(size="1Gi")) == 2 * 2**30
    assert decisions.expansion(claim=pvc(size="1Gi"), volume=pv(size="1Gi")) is None
    assert decisions.expansion(claim=pvc(size="512Mi"), volume=pv(size="1Gi")) is None


def user(claim: str, phase: str = "Running", ns: str = "ns") -> dict:
    return {"metadata": {"name": "p", "namespace": ns}, "status": {"phase": phase},
            "spec": {"volumes": [{"name": "v", "persistentVolumeClaim": {"claimName": claim}}]}}


def deleting(claim: dict, *finalizers: str) -> dict:
    claim["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    claim["metadata"]["finalizers"] = list(finalizers)
    return claim


PROT = decisions.PVC_PROTECTION


@pytest.mark.parametrize(("claim", "pods", "finalizers"), [
    (pvc(), [], [PROT]),
    (deleting(pvc(), PROT), [], []),
    (deleting(pvc(), PROT, "other"), [], ["other"]),
    (deleting(pvc(), PROT), [user("c")], None),
    (deleting(pvc(), PROT), [user("c", phase="Succeeded")], []),
    (deleting(pvc(), PROT), [user("c", ns="elsewhere")], []),
    (deleting(pvc(), PROT), [user("other")], []),
    (deleting(pvc()), [], None),
])
def test_claim_protection(claim: dict, pods: list, finalizers: list | None) -> None:
    assert decisions.claim_finalizers(claim=claim, pods=pods) == finalizers


def test_protected_claim_already_has_finalizer() -> None:
    claim = pvc()
    claim["metadata"]["finalizers"] = [PROT]
    assert decisions.claim_finalizers(claim=claim, pods=[]) is None
