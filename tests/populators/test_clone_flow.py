"""The clone populator on the twin-PVC flow (pure): PVC' in the source namespace for
every strategy (a CSI clone with no pod; a copy by one pod there mounting both claims, or,
where no node reaches both volumes, the target pod there and a source pod beside it, TLS
Secrets beside each), a source in use, the strategy notes, a failed source pod failing
the clone."""

from __future__ import annotations

from typing import Any

import pytest

from localcluster.apiserver.admission import podsecurity_checks as psa
from populators import claims, clone_pods, clone_snapshot, flow
from populators.cdiconfig import CdiConfig
from populators.clone_populator import SOURCE_CLAIM_KEY, ClonePopulator, CloneReconciler
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


def source(mode: str = "Filesystem", *, for_dv: str | None = DV_UID,
           for_claim: str | None = "ns/disk") -> dict[str, Any]:
    labels = {"cdi.kubevirt.io/clone-for-datavolume": for_dv} if for_dv else {}
    annotations = {"cdi.kubevirt.io/clone-for-claim": for_claim} if for_claim else {}
    return {"kind": "VolumeCloneSource",
            "metadata": {"name": "volume-clone-source-x", "namespace": "gold",
                         "labels": labels, "annotations": annotations},
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


COPY = {A + "clone.strategy": "copy"}


@pytest.mark.parametrize(("strategy", "src_ns", "where"), [
    # no strategy chosen yet (no PVC' yet): looked for in the target's namespace
    (None, "gold", "ns"),
    (None, "ns", "ns"),
    # every strategy puts PVC' beside the source claim: the storage fills it there
    # (csi-clone, snapshot), or one pod mounts both claims there (copy)
    ("csi-clone", "gold", "gold"),
    ("snapshot", "gold", "gold"),
    ("copy", "gold", "gold"),
    ("copy", "ns", "ns"),
    # an unknown value is no strategy of ours
    ("rsync", "gold", "ns"),
])
def test_prime_namespace(strategy: str | None, src_ns: str, where: str) -> None:
    ann = {A + "clone.strategy": strategy} if strategy else {}
    assert POP.prime_namespace(target(src_ns=src_ns, ann=ann)) == where


def test_copy_puts_prime_in_the_source_namespace() -> None:
    plan = decide(notes=COPY)
    made = next(a for a in plan.actions if isinstance(a, CreatePrime)).manifest
    assert made["metadata"]["namespace"] == "gold"
    # owner references do not cross namespaces: it names its target instead
    assert "ownerReferences" not in made["metadata"]
    assert claims.prime_target(made) == ("ns", "disk", UID)
    assert claims.prime_of(made, target())
    assert "dataSource" not in made["spec"]
    assert Annotate(COPY) in plan.actions


def test_copy_runs_the_target_pod_next_to_prime() -> None:
    """Streamed (the volumes on no common node): the flow's pod beside PVC', in the
    source namespace, with the target half of the TLS material beside it."""
    prime = prime_in("gold", data_source=False)
    plan = decide(target=target(ann=COPY), prime=prime)
    made = next(a for a in plan.actions if isinstance(a, CreatePod)).manifest
    assert made["metadata"]["namespace"] == "gold"
    assert made["metadata"]["name"] == f"cloner-{PRIME}"
    vols = {v["name"]: v for v in made["spec"]["volumes"]}
    assert vols["cdi-data-vol"]["persistentVolumeClaim"]["claimName"] == PRIME
    assert "cdi-clone-source" not in vols  # the target pod never sees the source
    assert vols["clone-tls"]["secret"] == {"secretName": f"clone-target-tls-{UID}",
                                           "defaultMode": 0o440}


@pytest.mark.parametrize("src_ns", ["ns", "gold"])
@pytest.mark.parametrize(("source_pv", "prime_pv", "want"), [
    (None, None, "local"),
    ("a", "a", "local"),
    ("a", "b", "stream"),  # no node reaches both volumes: two pods, both in src_ns
])
def test_a_copy_across_namespaces_is_placed_as_one_within_one(
        src_ns: str, source_pv: str | None, prime_pv: str | None, want: str) -> None:
    """PVC' where :meth:`ClonePopulator.prime_namespace` puts a copy's, then
    :func:`clone_pods.placement` on it: the source's namespace no longer decides."""
    made = next(a for a in decide(target=target(src_ns=src_ns), notes=COPY).actions
                if isinstance(a, CreatePrime)).manifest
    prime = {**made, "metadata": {**made["metadata"], "uid": "p-uid"},
             "spec": {**made["spec"], "volumeName": "pv-1"}, "status": {"phase": "Bound"}}
    hosts = {"a": HOST_A, "b": HOST_B, None: None}
    where = clone_pods.placement(source_claim=_claim(src_ns),
                                 source_volume=_pv(hosts[source_pv]), prime=prime,
                                 prime_volume=_pv(hosts[prime_pv]), binding_mode="Immediate")
    assert where == want
    src = source()
    src[SOURCE_CLAIM_KEY]["metadata"]["namespace"] = src_ns
    src[clone_pods.PLACEMENT_KEY] = where
    pod = next(a for a in decide(target=target(src_ns=src_ns, ann=COPY), prime=prime,
                                 source=src).actions if isinstance(a, CreatePod)).manifest
    assert pod["metadata"]["namespace"] == src_ns
    assert clone_pods.is_local(pod) == (want == "local")
    vols = {v["name"] for v in pod["spec"]["volumes"]}
    assert ("clone-tls" in vols) == (want == "stream")  # no Secret for one pod


@pytest.mark.parametrize(("strategy", "src_ns", "read"), [
    # a copy's pod and PVC' are the target's: their events are copied from where they run
    ("copy", "gold", "gold"),
    ("copy", "ns", "ns"),
    # a storage-filled PVC' in the source namespace: its provisioning is not told
    ("csi-clone", "gold", None),
    ("snapshot", "gold", None),
    ("csi-clone", "ns", "ns"),
    (None, "gold", "ns"),
])
def test_events_are_copied_from_where_a_copy_runs(strategy: str | None, src_ns: str,
                                                  read: str | None) -> None:
    ann = {A + "clone.strategy": strategy} if strategy else {}
    rec = CloneReconciler(None, POP, Settings())  # type: ignore[arg-type]  # no API read
    try:
        assert rec.events_namespace(target(src_ns=src_ns, ann=ann)) == read
    finally:
        rec.close()


def test_a_source_pod_that_failed_for_good_fails_the_clone() -> None:
    prime = prime_in("ns", data_source=False)
    plan = decide(target=target(ann=COPY), prime=prime,
                  pod={"metadata": {"name": f"cloner-{PRIME}"},
                       "status": {"phase": "Running"}},
                  helper_failed=("NotFound", "clone source: /source/disk.img not found"))
    changes = {k: v for a in plan.actions if isinstance(a, Annotate)
               for k, v in a.changes.items()}
    assert changes[A + "storage.pod.phase"] == "Failed"
    assert changes[A + "storage.condition.running.reason"] == "NotFound"
    assert any(isinstance(a, flow.DeletePod) for a in plan.actions)


def test_a_written_source_holds_the_clone_back() -> None:
    busy = "pod(s) w write to clone source gold/golden; the clone waits for them"
    plan = decide(source_busy=busy)
    assert Emit("Warning", "CloneSourceInUse", busy) in plan.actions
    assert not [a for a in plan.actions if isinstance(a, CreatePrime)]
    plan = decide(prime=prime_in("gold", data_source=False), source_busy=busy)
    assert not [a for a in plan.actions if isinstance(a, CreatePod)]


RUNNING_TARGET = {"metadata": {"name": f"cloner-{PRIME}"},
                  "status": {"phase": "Running", "podIP": "127.1.0.9"}}


def test_pods_pairings_and_confinement() -> None:
    for src_mode, dst_mode in (("Filesystem", "Block"), ("Block", "Filesystem")):
        prime = prime_in("ns", data_source=False)
        prime["spec"]["volumeMode"] = dst_mode
        tpod = clone_pods.render_target_pod(target=target(), prime=prime, config=CdiConfig(),
                                            settings=Settings())
        spod = clone_pods.render_source_pod(
            target=target(), source_claim=source(src_mode)[SOURCE_CLAIM_KEY],
            clone_source=source(), address="127.1.0.9:8444", config=CdiConfig(),
            settings=Settings())
        tenv = {e["name"]: e.get("value") for e in tpod["spec"]["containers"][0]["env"]}
        senv = {e["name"]: e.get("value") for e in spod["spec"]["containers"][0]["env"]}
        assert senv["CLONER_SOURCE"] == ("/dev/cdi-clone-source" if src_mode == "Block"
                                         else "/source/disk.img")
        assert tenv["CLONER_TARGET"] == ("/dev/cdi-block-volume" if dst_mode == "Block"
                                         else "/data/disk.img")
        assert senv["CLONE_TARGET"] == "127.1.0.9:8444"
        assert tpod["spec"]["containers"][0]["image"] == "rootdisk/clone-target"
        assert spod["spec"]["containers"][0]["image"] == "rootdisk/cloner"
        assert spod["metadata"]["namespace"] == "gold"
        assert spod["metadata"]["name"] == f"{UID}-source-pod"
        assert spod["metadata"]["ownerReferences"][0]["kind"] == "VolumeCloneSource"
        svols = {v["name"]: v for v in spod["spec"]["volumes"]}
        assert svols["cdi-clone-source"]["persistentVolumeClaim"] == {
            "claimName": "golden", "readOnly": True}
        assert svols["clone-tls"]["secret"]["secretName"] == f"clone-source-tls-{UID}"
        for pod in (tpod, spod):
            c = pod["spec"]["containers"][0]
            assert c["securityContext"]["runAsUser"] == 107
            assert c["securityContext"]["capabilities"] == {"drop": ["ALL"]}
            assert pod["spec"]["securityContext"]["fsGroup"] == 107
            # admissible in a namespace enforcing "restricted", as upstream's (issue 24)
            assert psa.evaluate(psa.RESTRICTED, None, pod["metadata"], pod["spec"]) == []
            # no key material in the pod spec: only the Secret's name
            assert "PRIVATE KEY" not in str(pod) and "CERTIFICATE" not in str(pod)


def test_secrets_carry_the_material_and_match_by_ca() -> None:
    import base64
    sec = clone_pods.render_secret(name="s", namespace="ns", ca=b"CA", cert=b"C", key=b"K",
                                   fingerprint="f1", owner={"uid": "o"}, target=target())
    assert base64.b64decode(sec["data"]["tls.key"]) == b"K"
    other = clone_pods.render_secret(name="t", namespace="gold", ca=b"CA", cert=b"C",
                                     key=b"K", fingerprint="f2", owner={"uid": "o"},
                                     target=target())
    assert clone_pods.secrets_match(sec, sec)
    assert not clone_pods.secrets_match(sec, other)
    assert not clone_pods.secrets_match(sec, None)
    assert clone_pods.ours(sec, target()) and not clone_pods.ours({"metadata": {}}, target())


def test_source_step() -> None:
    step = clone_pods.source_step
    assert step(finished=False, target_pod=None, source_pod=None) == clone_pods.SourceStep()
    pending = {"metadata": {}, "status": {"phase": "Pending"}}
    assert not step(finished=False, target_pod=pending, source_pod=None).create
    assert step(finished=False, target_pod=RUNNING_TARGET, source_pod=None).create
    spod = {"metadata": {"annotations": {
        "populators.rootdisk.io/clone-target-address": "127.1.0.9:8444"}}}
    assert step(finished=False, target_pod=RUNNING_TARGET, source_pod=spod) == \
        clone_pods.SourceStep()
    moved = {**RUNNING_TARGET, "status": {"phase": "Running", "podIP": "127.1.0.10"}}
    assert step(finished=False, target_pod=moved, source_pod=spod).delete_pod
    assert step(finished=False, target_pod=None, source_pod=spod).delete_pod
    # the target restarted since the source pod was made: a new stream is needed
    restarted = {**RUNNING_TARGET, "status": {**RUNNING_TARGET["status"],
                                              "containerStatuses": [{"restartCount": 1}]}}
    assert step(finished=False, target_pod=restarted, source_pod=spod).delete_pod
    spod_after = {"metadata": {"annotations": {
        "populators.rootdisk.io/clone-target-address": "127.1.0.9:8444",
        "populators.rootdisk.io/clone-target-restarts": "1"}}}
    assert not step(finished=False, target_pod=restarted, source_pod=spod_after).delete_pod
    done = step(finished=True, target_pod=RUNNING_TARGET, source_pod=spod)
    assert done.delete_pod and done.delete_secrets and not done.create


def _tpod(phase: str, ip: str | None = "127.1.0.9", waiting: str | None = None,
          deleting: bool = False) -> dict[str, Any]:
    status: dict[str, Any] = {"phase": phase}
    if ip:
        status["podIP"] = ip
    if waiting:
        status["containerStatuses"] = [{"state": {"waiting": {"reason": waiting}}}]
    meta: dict[str, Any] = {"name": f"cloner-{PRIME}"}
    if deleting:
        meta["deletionTimestamp"] = "2026-12-05T20:00:00Z"
    return {"metadata": meta, "status": status}


@pytest.mark.parametrize("pod,address", [
    (None, ""),
    (_tpod("Pending", ip=None), ""),  # not placed, or no sandbox yet
    # an IP, but the container still starting (or failing to pull its image): the
    # source pod waits for the target to run, as upstream's waits for it to be ready
    (_tpod("Pending"), ""),
    (_tpod("Pending", waiting="ContainerCreating"), ""),
    (_tpod("Pending", waiting="ErrImagePull"), ""),
    (_tpod("Running"), "127.1.0.9:8444"),
    (_tpod("Running", ip="fd00::9"), "[fd00::9]:8444"),
    (_tpod("Running", deleting=True), ""),
    (_tpod("Succeeded"), ""),
    (_tpod("Failed"), ""),
])
def test_target_address(pod: dict[str, Any] | None, address: str) -> None:
    assert clone_pods.target_address(pod) == address


SPOD_9 = {"metadata": {"annotations": {
    "populators.rootdisk.io/clone-target-address": "127.1.0.9:8444",
    "populators.rootdisk.io/clone-target-restarts": "0"}}}


@pytest.mark.parametrize("target_pod,source_pod,step", [
    # no target address yet: nothing to stream to, no source pod
    (None, None, clone_pods.SourceStep()),
    (_tpod("Pending", ip=None), None, clone_pods.SourceStep()),
    (_tpod("Pending"), None, clone_pods.SourceStep()),
    (_tpod("Pending", waiting="ContainerCreating"), None, clone_pods.SourceStep()),
    # running with its IP: the source pod is made
    (_tpod("Running"), None, clone_pods.SourceStep(create=True)),
    (_tpod("Running"), SPOD_9, clone_pods.SourceStep()),
    # its address changed (a new sandbox): a new source pod
    (_tpod("Running", ip="127.1.0.10"), SPOD_9, clone_pods.SourceStep(delete_pod=True)),
    # the target pod going: the source pod is not replaced for it
    (_tpod("Running", deleting=True), SPOD_9, clone_pods.SourceStep()),
])
def test_source_step_before_the_target_runs(target_pod: dict[str, Any] | None,
                                            source_pod: dict[str, Any] | None,
                                            step: clone_pods.SourceStep) -> None:
    assert clone_pods.source_step(finished=False, target_pod=target_pod,
                                  source_pod=source_pod) == step


def test_a_csi_clone_into_a_larger_filesystem_claim_runs_the_grow_pod() -> None:
    csi = {A + "clone.strategy": "csi-clone"}
    bound = prime_in("gold", data_source=True)
    plan = decide(target=target(ann=csi), prime=bound, prime_needs_pod=True)
    made = next(a for a in plan.actions if isinstance(a, CreatePod)).manifest
    assert made["metadata"]["namespace"] == "gold"
    env = {e["name"]: e.get("value") for e in made["spec"]["containers"][0]["env"]}
    assert env["CLONE_GROW_ONLY"] == "true" and env["CLONER_TARGET"] == "/data/disk.img"
    assert "CLONE_TLS_DIR" not in env
    assert not [v for v in made["spec"]["volumes"] if "secret" in v]
    assert not [a for a in plan.actions if isinstance(a, Rebind)]
    # without growing, Bound is populated
    plan = decide(target=target(ann=csi), prime=bound, prime_needs_pod=False,
                  volume={"metadata": {"name": "pv-1", "resourceVersion": "9"},
                          "spec": {"claimRef": {"namespace": "gold", "name": PRIME,
                                                "uid": "p-uid"}}})
    assert [a for a in plan.actions if isinstance(a, Rebind)]
    assert not [a for a in plan.actions if isinstance(a, CreatePod)]


def test_needs_growing() -> None:
    from populators.clone_strategy import needs_growing

    def claim(size: str, mode: str = "Filesystem") -> dict[str, Any]:
        return {"spec": {"volumeMode": mode, "resources": {"requests": {"storage": size}}}}
    assert needs_growing(source=claim("64Mi"), target=claim("128Mi"))
    assert not needs_growing(source=claim("64Mi"), target=claim("64Mi"))
    assert not needs_growing(source=claim("64Mi", "Block"), target=claim("128Mi", "Block"))


def _made(plan: flow.Plan) -> list[Any]:
    return [a for a in plan.actions if isinstance(a, (CreatePrime, CreatePod))]


def test_a_cross_namespace_source_serves_only_the_datavolume_it_was_made_for() -> None:
    """Someone's own claim pointing at a VolumeCloneSource made for another user's
    authorised clone reads nothing: no PVC', no pod, the claim fails with the reason."""
    forged = target()  # the DataVolume's UID (readable in its namespace) forged as owner
    forged["metadata"]["namespace"] = "mallory"  # of a claim in another namespace
    renamed = target()
    renamed["metadata"]["name"] = "other"  # or of another claim of that namespace
    for t, s in [(target(dv_uid=None), source()),           # a bare claim, no DataVolume
                 (target(dv_uid="someone-else"), source()),  # another DataVolume
                 (target(), source(for_dv=None)),            # a source nobody authorised
                 (forged, source()), (renamed, source()),
                 (target(), source(for_claim=None))]:        # made before claims were named
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


# -- the snapshot strategy ----------------------------------------------------------------

SNAP_NAME = f"tmp-snapshot-{UID}"


def test_a_snapshot_clone_waits_for_its_snapshot_then_restores_it_in_the_source_namespace(
        ) -> None:
    notes = {A + "clone.strategy": "snapshot"}
    plan = decide(prime_blocked=f"taking snapshot {SNAP_NAME} of gold/golden", notes=notes)
    assert not [a for a in plan.actions if isinstance(a, CreatePrime)]
    assert plan.waiting == f"taking snapshot {SNAP_NAME} of gold/golden" and plan.active
    assert Annotate(notes) in plan.actions  # the strategy is on the target meanwhile
    ready = clone_snapshot.data_source(target())
    plan = decide(prime_data_source=ready, notes=notes)
    made = next(a for a in plan.actions if isinstance(a, CreatePrime)).manifest
    assert made["metadata"]["namespace"] == "gold"  # the snapshot's namespace
    assert made["spec"]["dataSource"] == {"apiGroup": "snapshot.storage.k8s.io",
                                          "kind": "VolumeSnapshot", "name": SNAP_NAME}
    # once restored and Bound: no pod, straight to the rebind (as a CSI clone)
    bound = prime_in("gold", data_source=True)
    bound["spec"]["dataSource"] = ready
    plan = decide(target=target(ann=notes), prime=bound,
                  volume={"metadata": {"name": "pv-1", "resourceVersion": "5"},
                          "spec": {"claimRef": {"name": PRIME, "namespace": "gold",
                                                "uid": "p-uid"}}})
    assert not [a for a in plan.actions if isinstance(a, CreatePod)]
    assert any(isinstance(a, Rebind) for a in plan.actions)


def vs(*, ready: bool | None = None, error: str = "", ours: bool = True,
       restore: str | None = None) -> dict[str, Any]:
    snap = clone_snapshot.render(target=target(), namespace="gold", source_claim="golden",
                                 snapshot_class="local-snapshots",
                                 owner={"kind": "VolumeCloneSource", "name": "x", "uid": "u"})
    if not ours:
        snap["metadata"]["annotations"] = {}
    status: dict[str, Any] = {}
    if ready is not None:
        status["readyToUse"] = ready
    if error:
        status["error"] = {"message": error}
    if restore is not None:
        status["restoreSize"] = restore
    snap["status"] = status
    return snap


def test_the_snapshot_is_made_for_this_target_only() -> None:
    snap = vs()
    assert snap["metadata"]["name"] == SNAP_NAME and snap["metadata"]["namespace"] == "gold"
    assert snap["spec"] == {"volumeSnapshotClassName": "local-snapshots",
                            "source": {"persistentVolumeClaimName": "golden"}}
    assert clone_pods.ours(snap, target())
    assert snap["metadata"]["ownerReferences"][0]["kind"] == "VolumeCloneSource"


@pytest.mark.parametrize(("snap", "ready", "create", "waiting"), [
    (None, False, True, f"taking snapshot {SNAP_NAME} of gold/golden"),
    (vs(), False, False, f"waiting for snapshot {SNAP_NAME} of gold/golden to be ready"),
    (vs(ready=False), False, False,
     f"waiting for snapshot {SNAP_NAME} of gold/golden to be ready"),
    (vs(ready=False, error="no space"), False, False,
     f"snapshot {SNAP_NAME} of gold/golden failed: no space"),
    (vs(ready=True), True, False, ""),
    (vs(ready=True, restore="64Mi"), True, False, ""),
    (vs(ready=True, ours=False), False, False,
     f"VolumeSnapshot {SNAP_NAME} exists and was not made for this clone"),
])
def test_snapshot_state(snap: dict[str, Any] | None, ready: bool, create: bool,
                        waiting: str) -> None:
    got = clone_snapshot.state(snap, target=target(), source="gold/golden")
    assert (got.ready, got.create, got.waiting) == (ready, create, waiting)


@pytest.mark.parametrize(("restore", "wanted", "asked"), [
    ("1Gi", "1Gi", None), ("512Mi", "1Gi", None), (None, "1Gi", None),
    ("1074790400", "1Gi", "1074790400"),  # the source's capacity rounded up past the claim
    ("2Gi", "1Gi", str(2 * 2**30)), ("junk", "1Gi", None),
])
def test_prime_asks_for_no_less_than_the_snapshot_restores(restore: str | None, wanted: str,
                                                           asked: str | None) -> None:
    t = target()
    t["spec"]["resources"]["requests"]["storage"] = wanted
    assert clone_snapshot.restore_request(vs(ready=True, restore=restore), t) == asked
    got = clone_snapshot.state(vs(ready=True, restore=restore), target=t, source="gold/golden")
    assert got.ready and got.request == asked
    plan = decide(target=t, prime_data_source=clone_snapshot.data_source(t),
                  prime_request=asked, notes={A + "clone.strategy": "snapshot"})
    made = next(a for a in plan.actions if isinstance(a, CreatePrime)).manifest
    assert made["spec"]["resources"]["requests"]["storage"] == (asked or wanted)


@pytest.mark.parametrize(("prime_phase", "finished", "done"), [
    (None, False, False), ("Pending", False, False), ("Bound", False, True),
    (None, True, True), ("Pending", True, True),
])
def test_the_snapshot_goes_once_restored_or_finished(prime_phase: str | None, finished: bool,
                                                     done: bool) -> None:
    prime = None if prime_phase is None else prime_in("gold", data_source=True,
                                                      phase=prime_phase)
    assert clone_snapshot.done_with(prime=prime, finished=finished) is done


# -- one pod where it can mount both claims ---------------------------------------------

HOST_A = {"required": {"nodeSelectorTerms": [{"matchExpressions": [
    {"key": "kubernetes.io/hostname", "operator": "In", "values": ["a"]}]}]}}
HOST_B = {"required": {"nodeSelectorTerms": [{"matchExpressions": [
    {"key": "kubernetes.io/hostname", "operator": "In", "values": ["b"]}]}]}}


def _pv(affinity: dict[str, Any] | None) -> dict[str, Any]:
    return {"metadata": {"name": "pv"},
            "spec": {"nodeAffinity": affinity} if affinity else {}}


def _claim(ns: str) -> dict[str, Any]:
    return {"metadata": {"name": "golden", "namespace": ns},
            "spec": {"volumeMode": "Filesystem", "volumeName": "pv-golden"}}


@pytest.mark.parametrize(("source_mode", "want"), [
    # its class binds it for its first consumer: the source pod mounting it binds it
    ("WaitForFirstConsumer", "stream"),
    (None, "stream"),  # no class known: as before
    # its class binds it at once (a temporary claim restored from a snapshot): its
    # volume is coming, and where it lands decides
    ("Immediate", "wait"),
])
def test_placement_of_a_source_claim_not_bound_yet(source_mode: str | None,
                                                   want: str) -> None:
    assert clone_pods.placement(source_claim=_claim("ns"), source_volume=None,
                                prime=prime_in("ns", data_source=False),
                                prime_volume=_pv(None), binding_mode="Immediate",
                                source_binding_mode=source_mode) == want
    # across namespaces (never asked by the populator) it streams whatever the class
    assert clone_pods.placement(source_claim=_claim("gold"), source_volume=None,
                                prime=prime_in("ns", data_source=False),
                                prime_volume=_pv(None), binding_mode="Immediate",
                                source_binding_mode=source_mode) == "stream"


@pytest.mark.parametrize(("source_ns", "source_pv", "prime_bound", "prime_pv", "mode", "want"), [
    # a pod mounts only claims of its own namespace: across namespaces, two pods (the
    # populator never asks so: a copy's PVC' is in the source namespace)
    ("gold", _pv(None), True, _pv(None), "Immediate", "stream"),
    # a source claim with no volume yet: streamed, as before (its pod binds it)
    ("ns", None, True, _pv(None), "Immediate", "stream"),
    # a source volume any node reaches
    ("ns", _pv(None), True, _pv(HOST_B), "Immediate", "local"),
    ("ns", _pv(None), False, None, "Immediate", "local"),
    # a source volume on one node: PVC''s volume there too, or anywhere
    ("ns", _pv(HOST_A), True, _pv(HOST_A), "Immediate", "local"),
    ("ns", _pv(HOST_A), True, _pv(None), "Immediate", "local"),
    ("ns", _pv(HOST_A), True, _pv(HOST_B), "Immediate", "stream"),
    # PVC' provisioned for its first consumer: it follows the pod to the source's node
    ("ns", _pv(HOST_A), False, None, "WaitForFirstConsumer", "local"),
    # provisioned at once: where it lands decides
    ("ns", _pv(HOST_A), False, None, "Immediate", "wait"),
    ("ns", _pv(HOST_A), False, None, None, "wait"),
    # bound, its volume not read yet
    ("ns", _pv(HOST_A), True, None, "WaitForFirstConsumer", "wait"),
    # a node already picked for PVC' (the target's consumer): provisioned there, waited for
    ("ns", _pv(HOST_A), "picked", None, "WaitForFirstConsumer", "wait"),
])
def test_placement(source_ns: str, source_pv: dict[str, Any] | None, prime_bound: bool | str,
                   prime_pv: dict[str, Any] | None, mode: str | None, want: str) -> None:
    prime = prime_in("ns", data_source=False, phase="Bound" if prime_bound is True
                     else "Pending")
    if prime_bound is not True:
        del prime["spec"]["volumeName"]
    if prime_bound == "picked":
        prime["metadata"]["annotations"]["volume.kubernetes.io/selected-node"] = "b"
    assert clone_pods.placement(source_claim=_claim(source_ns), source_volume=source_pv,
                                prime=prime, prime_volume=prime_pv,
                                binding_mode=mode) == want


def _placed(where: str, mode: str = "Filesystem") -> dict[str, Any]:
    src = source(mode)
    src[SOURCE_CLAIM_KEY]["metadata"]["namespace"] = "ns"
    src[clone_pods.PLACEMENT_KEY] = where
    return src


@pytest.mark.parametrize(("src_mode", "dst_mode"), [
    ("Filesystem", "Filesystem"), ("Filesystem", "Block"), ("Block", "Filesystem"),
    ("Block", "Block")])
def test_one_pod_copies_when_it_can_mount_both_claims(src_mode: str, dst_mode: str) -> None:
    prime = prime_in("ns", data_source=False)
    prime["spec"]["volumeMode"] = dst_mode
    plan = decide(target=target(src_ns="ns", ann=COPY), prime=prime,
                  source=_placed("local", src_mode))
    pod = next(a for a in plan.actions if isinstance(a, CreatePod)).manifest
    assert clone_pods.is_local(pod)
    c = pod["spec"]["containers"][0]
    env = {e["name"]: e.get("value") for e in c["env"]}
    assert env["CLONER_SOURCE"] == ("/dev/cdi-clone-source" if src_mode == "Block"
                                    else "/source/disk.img")
    assert env["CLONER_TARGET"] == ("/dev/cdi-block-volume" if dst_mode == "Block"
                                    else "/data/disk.img")
    # no stream: no TLS material, no clone port
    assert "CLONE_TLS_DIR" not in env and "CLONE_PORT" not in env
    assert [p["name"] for p in c["ports"]] == ["metrics"]
    vols = {v["name"]: v for v in pod["spec"]["volumes"]}
    assert set(vols) == {"cdi-data-vol", "cdi-clone-source"}
    assert vols["cdi-clone-source"]["persistentVolumeClaim"] == {"claimName": "golden",
                                                                "readOnly": True}
    mounts = {m["name"]: m for m in c.get("volumeMounts", [])}
    devices = {d["name"]: d for d in c.get("volumeDevices", [])}
    if src_mode == "Block":
        assert devices["cdi-clone-source"]["devicePath"] == "/dev/cdi-clone-source"
    else:
        assert mounts["cdi-clone-source"] == {"name": "cdi-clone-source",
                                              "mountPath": "/source", "readOnly": True}
    assert ("cdi-data-vol" in devices) == (dst_mode == "Block")
    assert psa.evaluate(psa.RESTRICTED, None, pod["metadata"], pod["spec"]) == []


def test_two_pods_unless_placed_local() -> None:
    prime = prime_in("ns", data_source=False)
    for where in ("stream", None):
        src = _placed("stream")
        if where is None:
            del src[clone_pods.PLACEMENT_KEY]
        plan = decide(target=target(src_ns="ns", ann=COPY), prime=prime, source=src)
        pod = next(a for a in plan.actions if isinstance(a, CreatePod)).manifest
        assert not clone_pods.is_local(pod)
        assert "cdi-clone-source" not in {v["name"] for v in pod["spec"]["volumes"]}


def test_a_copy_waits_for_prime_volume_before_its_pod() -> None:
    prime = prime_in("ns", data_source=False, phase="Pending")
    plan = decide(target=target(src_ns="ns", ann=COPY), prime=prime, source=_placed("wait"))
    assert not [a for a in plan.actions if isinstance(a, CreatePod)]
    assert plan.waiting == "the volumes are being provisioned"
    # once the pod exists, the placement no longer holds anything back
    pod = clone_pods.render_target_pod(target=target(), prime=prime, config=CdiConfig(),
                                       settings=Settings())
    assert flow.decide(Observed(target=target(src_ns="ns", ann=COPY), storage_class=SC,
                                source=_placed("wait"), prime=prime, pod=pod, volume=None,
                                config=CdiConfig()), POP, Settings()).waiting != (
        "the volumes are being provisioned")
