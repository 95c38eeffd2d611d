"""The clone populator on the twin-PVC flow (pure): PVC' in the source namespace, the CSI
clone without a pod, the cloner pod, a source in use, the strategy notes."""

from __future__ import annotations

from typing import Any

from populators import claims, flow
from populators.cdiconfig import CdiConfig
from populators.clone_populator import SOURCE_CLAIM_KEY, ClonePopulator, render_pod
from populators.flow import Annotate, CreatePod, CreatePrime, Emit, Observed, Rebind
from populators.importer_pod import Settings

UID = "11111111-2222-3333-4444-555555555555"
DV_UID = "99999999-2222-3333-4444-555555555555"
PRIME = f"prime-{UID}"
A = "cdi.kubevirt.io/"
SC = {"metadata": {"name": "local-reflink"}, "volumeBindingMode": "Immediate"}
POP = ClonePopulator()


def target(*, src_ns: str = "gold", ann: dict[str, str] | None = None,
           mode: str = "Filesystem", dv_uid: str | None = DV_UID) -> dict[str, Any]:
    ref: dict[str, Any] = {"apiGroup": "cdi.kubevirt.io", "kind": "VolumeCloneSource",
                           "name": "volume-clone-source-x"}
    if src_ns != "ns":
        ref["namespace"] = src_ns
    owners = [{"apiVersion": "cdi.kubevirt.io/v1beta1", "kind": "DataVolume", "name": "disk",
               "uid": dv_uid, "controller": True}] if dv_uid else []
    return {"metadata": {"name": "disk", "namespace": "ns", "uid": UID,
                         "resourceVersion": "3", "annotations": dict(ann or {}),
                         "ownerReferences": owners},
            "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": "local-reflink",
                     "volumeMode": mode, "resources": {"requests": {"storage": "1Gi"}},
                     "dataSourceRef": ref},
            "status": {"phase": "Pending"}}


def source(mode: str = "Filesystem", *, for_dv: str | None = DV_UID) -> dict[str, Any]:
    labels = {"cdi.kubevirt.io/clone-for-datavolume": for_dv} if for_dv else {}
    return {"kind": "VolumeCloneSource",
            "metadata": {"name": "volume-clone-source-x", "namespace": "gold",
                         "labels": labels},
            "spec": {"source": {"kind": "PersistentVolumeClaim", "name": "golden"}},
            SOURCE_CLAIM_KEY: {"metadata": {"name": "golden", "namespace": "gold"},
                               "spec": {"volumeMode": mode}}}


def prime_in(ns: str, *, data_source: bool, phase: str = "Bound") -> dict[str, Any]:
    spec: dict[str, Any] = {"volumeName": "pv-1", "storageClassName": "local-reflink",
                            "resources": {"requests": {"storage": "1Gi"}}}
    if data_source:
        spec["dataSource"] = {"kind": "PersistentVolumeClaim", "name": "golden"}
    return {"metadata": {"name": PRIME, "namespace": ns, "uid": "p-uid",
                         "annotations": {"populators.rootdisk.io/target": f"ns/disk/{UID}"}},
            "spec": spec, "status": {"phase": phase}}


def decide(**kw: Any) -> flow.Plan:
    o = Observed(target=kw.pop("target", target()), storage_class=SC,
                 source=kw.pop("source", source()), prime=kw.pop("prime", None),
                 pod=kw.pop("pod", None), volume=kw.pop("volume", None), config=CdiConfig(),
                 **kw)
    return flow.decide(o, POP, Settings())


def test_prime_goes_to_the_source_namespace_and_names_its_target() -> None:
    plan = decide(prime_data_source={"kind": "PersistentVolumeClaim", "name": "golden"},
                  notes={A + "clone.strategy": "csi-clone"})
    made = next(a for a in plan.actions if isinstance(a, CreatePrime)).manifest
    assert made["metadata"]["namespace"] == "gold"
    assert "ownerReferences" not in made["metadata"]
    assert made["metadata"]["annotations"]["populators.rootdisk.io/target"] == f"ns/disk/{UID}"
    assert made["spec"]["dataSource"] == {"kind": "PersistentVolumeClaim", "name": "golden"}
    assert Annotate({A + "clone.strategy": "csi-clone"}) in plan.actions
    assert claims.prime_of(made, target())
    assert claims.prime_target(made) == ("ns", "disk", UID)


def test_same_namespace_prime_is_owned() -> None:
    plan = decide(target=target(src_ns="ns"))
    made = next(a for a in plan.actions if isinstance(a, CreatePrime)).manifest
    assert made["metadata"]["namespace"] == "ns"
    assert made["metadata"]["ownerReferences"][0]["uid"] == UID


def test_csi_clone_needs_no_pod_and_rebinds_when_bound() -> None:
    waiting = decide(prime=prime_in("gold", data_source=True, phase="Pending"))
    assert not [a for a in waiting.actions if isinstance(a, CreatePod)]
    done = decide(prime=prime_in("gold", data_source=True),
                  volume={"metadata": {"name": "pv-1", "resourceVersion": "9"},
                          "spec": {"claimRef": {"namespace": "gold", "name": PRIME,
                                                "uid": "p-uid"}}})
    rebind = [a for a in done.actions if isinstance(a, Rebind)]
    assert rebind and rebind[0].claim_ref["namespace"] == "ns"
    changes = {k: v for a in done.actions if isinstance(a, Annotate)
               for k, v in a.changes.items()}
    assert changes[A + "storage.pod.phase"] == "Succeeded"


def test_copy_runs_the_cloner_pod_next_to_prime() -> None:
    plan = decide(prime=prime_in("gold", data_source=False))
    made = next(a for a in plan.actions if isinstance(a, CreatePod)).manifest
    assert made["metadata"]["namespace"] == "gold"
    assert made["metadata"]["name"] == f"cloner-{PRIME}"
    vols = {v["name"]: v["persistentVolumeClaim"] for v in made["spec"]["volumes"]}
    assert vols["cdi-clone-source"] == {"claimName": "golden", "readOnly": True}
    assert vols["cdi-data-vol"]["claimName"] == PRIME


def test_a_written_source_holds_the_clone_back() -> None:
    busy = "pod(s) w write to clone source gold/golden; the clone waits for them"
    plan = decide(source_busy=busy)
    assert Emit("Warning", "CloneSourceInUse", busy) in plan.actions
    assert not [a for a in plan.actions if isinstance(a, CreatePrime)]
    plan = decide(prime=prime_in("gold", data_source=False), source_busy=busy)
    assert not [a for a in plan.actions if isinstance(a, CreatePod)]


def test_cloner_pod_pairings_and_confinement() -> None:
    for src_mode, dst_mode in (("Filesystem", "Block"), ("Block", "Filesystem")):
        prime = prime_in("gold", data_source=False)
        prime["spec"]["volumeMode"] = dst_mode
        pod = render_pod(target=target(), prime=prime,
                         source_claim=source(src_mode)[SOURCE_CLAIM_KEY],
                         config=CdiConfig(), settings=Settings())
        c = pod["spec"]["containers"][0]
        env = {e["name"]: e.get("value") for e in c["env"]}
        assert env["CLONER_SOURCE"] == ("/dev/cdi-clone-source" if src_mode == "Block"
                                        else "/source/disk.img")
        assert env["CLONER_TARGET"] == ("/dev/cdi-block-volume" if dst_mode == "Block"
                                        else "/data/disk.img")
        assert c["image"] == "rootdisk/cloner"
        assert c["securityContext"]["runAsUser"] == 107
        assert c["securityContext"]["capabilities"] == {"drop": ["ALL"]}
        assert pod["spec"]["securityContext"]["fsGroup"] == 107


def _made(plan: flow.Plan) -> list[Any]:
    return [a for a in plan.actions if isinstance(a, (CreatePrime, CreatePod))]


def test_a_cross_namespace_source_serves_only_the_datavolume_it_was_made_for() -> None:
    """Someone's own claim pointing at a VolumeCloneSource made for another user's
    authorised clone reads nothing: no PVC', no pod, the claim fails with the reason."""
    for t, s in [(target(dv_uid=None), source()),           # a bare claim, no DataVolume
                 (target(dv_uid="someone-else"), source()),  # another DataVolume
                 (target(), source(for_dv=None))]:           # a source nobody authorised
        plan = decide(target=t, source=s)
        assert not _made(plan)
        changes = {k: v for a in plan.actions if isinstance(a, Annotate)
                   for k, v in a.changes.items()}
        assert changes[A + "storage.pod.phase"] == "Failed"
        assert changes[A + "storage.condition.running.reason"] == "CrossNamespaceSourceDenied"
        # not even when PVC' exists already (made before a relabel): no pod reads it
        assert not [a for a in decide(target=t, source=s,
                                      prime=prime_in("gold", data_source=False)).actions
                    if isinstance(a, CreatePod)]
    assert _made(decide())  # the DataVolume's own claim goes ahead


def test_a_same_namespace_source_needs_no_label() -> None:
    plan = decide(target=target(src_ns="ns", dv_uid=None), source={
        **source(for_dv=None), "metadata": {"name": "volume-clone-source-x", "namespace": "ns"}})
    assert _made(plan)
