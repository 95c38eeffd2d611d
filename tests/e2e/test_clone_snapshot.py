"""Clones from a VolumeSnapshot on `rootdisk up` (the operator as a pod from manifests/):
a small DataVolume imported, snapshotted, and restored by a DataVolume with
``source.snapshot`` and by one whose ``sourceRef`` names a DataSource naming the
snapshot; the same bytes each time, into another volume mode by upstream's host-assisted
fallback. And what goes wrong, as upstream words it: a snapshot not there yet, a target
smaller than the restoreSize, another driver, a user without rights in the snapshot's
namespace."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import kubeclient
from kubeclient import Client, resources
from sizes import parse_bytes
from tests.e2e import kit
from tests.e2e.test_clone import DATASOURCES, VCS, VOLUMESNAPSHOTS, create_as, grant
from tests.fixtures.httpserver import HttpServer
from tests.fixtures.images import ImageFactory, compare
from tests.localcluster.clusterkit import needs_root, wait_for, wait_reasons

pytestmark = [needs_root, pytest.mark.slow, pytest.mark.e2e, pytest.mark.timeout(900)]

A = "cdi.kubevirt.io/"
TIMEOUT = 240
CLASS = "local-reflink"
STORAGE_CLASSES = kubeclient.Resource("storage.k8s.io", "v1", "storageclasses",
                                  namespaced=False)


def snapshot(name: str, claim: str) -> dict[str, Any]:
    return {"apiVersion": "snapshot.storage.k8s.io/v1", "kind": "VolumeSnapshot",
            "metadata": {"name": name},
            "spec": {"source": {"persistentVolumeClaimName": claim}}}


def wait_snapshot_ready(kube: Client, ns: str, name: str) -> dict[str, Any]:
    wait_for(lambda: ((kube.get_or_none(VOLUMESNAPSHOTS, name, ns) or {}).get("status")
                      or {}).get("readyToUse") is True, timeout=TIMEOUT,
             what=f"VolumeSnapshot {ns}/{name} readyToUse")
    return kube.get(VOLUMESNAPSHOTS, name, ns)


def from_snapshot(name: str, src_ns: str, snap: str = "gold-snap", *,
                  storage: dict[str, Any] | None = None,
                  pvc: dict[str, Any] | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"source": {"snapshot": {"namespace": src_ns, "name": snap}}}
    if pvc is not None:
        spec["pvc"] = pvc
    else:
        spec["storage"] = {"storageClassName": CLASS, **(storage or {})}
    return {"apiVersion": "cdi.kubevirt.io/v1beta1", "kind": "DataVolume",
            "metadata": {"name": name}, "spec": spec}



def ready_condition(kube: Client, ns: str, name: str) -> tuple[str, str, str]:
    ds = kube.get(DATASOURCES, name, ns)
    cond: dict[str, Any] = next((c for c in (ds.get("status") or {}).get("conditions") or []
                 if c["type"] == "Ready"), {})
    return cond.get("status", ""), cond.get("reason", ""), cond.get("message", "")


@pytest.fixture(scope="module")
def golden(kube: Client, images: ImageFactory, tmp_path_factory: pytest.TempPathFactory,
           ) -> Iterator[tuple[str, Path]]:
    """Namespace and reference image of a small imported DataVolume ``golden`` and its
    ready VolumeSnapshot ``gold-snap`` (the default VolumeSnapshotClass)."""
    root = tmp_path_factory.mktemp("www")
    ns = kit.namespace(kube, "snapgold")
    with HttpServer(root) as server:
        url = server.publish(images.get("raw").path, "golden.img")
        kube.create(kit.DVS, kit.datavolume("golden", {"http": {"url": url}},
                                            storage={"storageClassName": CLASS}), ns)
        status = kit.wait_dv(kube, ns, "golden", ("Succeeded", "Failed"), timeout=TIMEOUT)
    assert status["phase"] == "Succeeded", status
    kube.create(VOLUMESNAPSHOTS, snapshot("gold-snap", "golden"), ns)
    wait_snapshot_ready(kube, ns, "gold-snap")
    yield ns, images.get("raw").path


def test_a_datavolume_from_a_snapshot_has_the_same_bytes(kube: Client, ns: str,
                                                          golden: tuple[str, Path]) -> None:
    """source.snapshot, no size (spec.storage): the restoreSize; PVC' restored from the
    user's snapshot, rebound to the target; the snapshot stays (it is the user's)."""
    src_ns, reference = golden
    dv = kube.create(kit.DVS, from_snapshot("restored", src_ns), src_ns)
    status = kit.wait_dv(kube, src_ns, "restored", ("Succeeded", "Failed"), timeout=TIMEOUT)
    assert status["phase"] == "Succeeded", status
    claim = kube.get(resources.PVCS, "restored", src_ns)
    assert compare(reference, Path(kit.volume_path(kube, claim)))
    snap = kube.get(VOLUMESNAPSHOTS, "gold-snap", src_ns)
    assert parse_bytes(claim["spec"]["resources"]["requests"]["storage"]) == parse_bytes(
        str(snap["status"]["restoreSize"]))
    anns = claim["metadata"]["annotations"]
    assert anns[A + "clone.strategy"] == "snapshot"
    assert anns[A + "clonePhase"] == "SnapshotClone"
    events = {e["reason"]: e["message"] for e in
              kit.events_for(kube, src_ns, dv["metadata"]["uid"])}
    assert events["CloneFromSnapshotSourceInProgress"] == (
        f"Creating PVC from snapshot source is in progress (for snapshot {src_ns}/gold-snap)")
    assert events["CloneSucceeded"] == (
        f"Successfully cloned from {src_ns}/gold-snap into {src_ns}/restored")
    assert kube.get_or_none(VOLUMESNAPSHOTS, "gold-snap", src_ns) is not None
    # into another namespace, larger: the volume crosses over, the image is there
    kube.create(kit.DVS, from_snapshot("restored-big", src_ns,
                                       storage={"resources": {"requests": {
                                           "storage": "128Mi"}}}), ns)
    status = kit.wait_dv(kube, ns, "restored-big", ("Succeeded", "Failed"), timeout=TIMEOUT)
    assert status["phase"] == "Succeeded", status
    big = kube.get(resources.PVCS, "restored-big", ns)
    assert compare(reference, Path(kit.volume_path(kube, big)))
    kube.delete(kit.DVS, "restored", src_ns)


def test_a_missing_snapshot_waits_with_upstreams_words_then_restores(
        kube: Client, golden: tuple[str, Path]) -> None:
    src_ns, reference = golden
    name = f"later-{uuid.uuid4().hex[:6]}"
    dv = kube.create(kit.DVS, from_snapshot("waiting", src_ns, name), src_ns)
    want = ("False", "CloneWithoutSource", f"The source snapshot {name} doesn't exist")

    def ready() -> tuple[str, str, str]:
        conds = kit.dv_status(kube, src_ns, "waiting").get("conditions") or []
        cond: dict[str, Any] = next((c for c in conds if c["type"] == "Ready"), {})
        return cond.get("status", ""), cond.get("reason", ""), cond.get("message", "")
    wait_for(lambda: ready() == want, timeout=60, what="the DataVolume waits")
    assert kit.dv_status(kube, src_ns, "waiting")["phase"] == "Pending"
    wait_reasons(kube, src_ns, dv["metadata"]["uid"], "CloneWithoutSource")
    assert kube.get_or_none(resources.PVCS, "waiting", src_ns) is None
    kube.create(VOLUMESNAPSHOTS, snapshot(name, "golden"), src_ns)
    status = kit.wait_dv(kube, src_ns, "waiting", ("Succeeded", "Failed"), timeout=TIMEOUT)
    assert status["phase"] == "Succeeded", status
    claim = kube.get(resources.PVCS, "waiting", src_ns)
    assert compare(reference, Path(kit.volume_path(kube, claim)))
    kube.delete(kit.DVS, "waiting", src_ns)
    kube.delete(VOLUMESNAPSHOTS, name, src_ns)


def test_a_target_smaller_than_the_restore_size_waits(kube: Client,
                                                      golden: tuple[str, Path]) -> None:
    src_ns, _ = golden
    dv = kube.create(kit.DVS, from_snapshot("small", src_ns, pvc={
        "accessModes": ["ReadWriteOnce"], "storageClassName": CLASS,
        "resources": {"requests": {"storage": "16Mi"}}}), src_ns)
    want = "The clone doesn't meet the validation requirements: target resources requests " \
        "storage size is smaller than the source"
    wait_for(lambda: any(c.get("reason") == "CloneValidationFailed"
                         and c.get("message") == want for c in
                         kit.dv_status(kube, src_ns, "small").get("conditions") or []),
             timeout=60, what="CloneValidationFailed")
    assert kit.dv_status(kube, src_ns, "small")["phase"] == "Pending"
    wait_reasons(kube, src_ns, dv["metadata"]["uid"], "CloneValidationFailed")
    assert kube.get_or_none(resources.PVCS, "small", src_ns) is None
    kube.delete(kit.DVS, "small", src_ns)


def test_into_another_volume_mode_by_a_host_assisted_copy(kube: Client, ns: str,
                                                           golden: tuple[str, Path]) -> None:
    """The storage restores no snapshot into another volume mode: upstream's fallback, the
    snapshot restored into a temporary claim beside it, copied from there by the
    host-assisted pods into a Block target (two: the temporary claim, in a
    WaitForFirstConsumer class, binds only once the source pod mounts it; both pods and
    PVC' beside it in the snapshot's namespace); the temporary claim goes afterwards."""
    src_ns, reference = golden
    dv = kube.create(kit.DVS, from_snapshot("as-block", src_ns,
                                            storage={"volumeMode": "Block"}), ns)
    status = kit.wait_dv(kube, ns, "as-block", ("Succeeded", "Failed"), timeout=TIMEOUT)
    assert status["phase"] == "Succeeded", status
    claim = kube.get(resources.PVCS, "as-block", ns)
    assert claim["spec"]["volumeMode"] == "Block"
    assert compare(reference, Path(kit.volume_path(kube, claim)))
    anns = claim["metadata"]["annotations"]
    assert anns[A + "clone.strategy"] == "copy"
    assert anns[A + "cloneFallbackReason"] == \
        "The volume modes of source and target are incompatible"
    wait_reasons(kube, ns, claim["metadata"]["uid"], "IncompatibleVolumeModes")
    wait_reasons(kube, ns, dv["metadata"]["uid"], "CloneFromSnapshotSourceInProgress",
                 "CloneSucceeded")
    wait_for(lambda: kube.get_or_none(resources.PVCS, f"tmp-source-pvc-{claim['metadata']['uid']}",
                                      src_ns) is None, timeout=60,
             what="the temporary claim deleted")
    uid = claim["metadata"]["uid"]
    started = {(e.get("involvedObject") or {}).get("name")
               for e in kube.list(resources.EVENTS, src_ns) if e.get("reason") == "Started"}
    assert {f"cloner-prime-{uid}", f"{uid}-source-pod"} <= started
    assert not [e for e in kube.list(resources.EVENTS, ns)
                if (e.get("involvedObject") or {}).get("kind") == "Pod"]


def test_from_a_temporary_claim_bound_at_once_one_pod_copies(kube: Client, ns: str,
                                                            golden: tuple[str, Path]) -> None:
    """The host-assisted fallback from a snapshot, its temporary claim in a class that
    binds at once (the first by name of the snapshot's driver, made here): PVC' is made
    beside it in the snapshot's namespace, so one pod there reads the temporary claim
    itself; no source pod, no Secret, nothing run in the target's namespace. (In the
    `local` class it binds only once a pod mounts it: a source pod, two pods, as above.)"""
    src_ns, reference = golden
    cls = f"aaa-{uuid.uuid4().hex[:6]}"  # before `local` by name
    kube.create(STORAGE_CLASSES, {"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
                                  "metadata": {"name": cls},
                                  "provisioner": "local.localcluster.rootdisk.io",
                                  "parameters": {"pool": "standard"},
                                  "reclaimPolicy": "Delete",
                                  "volumeBindingMode": "Immediate"})
    try:
        kube.create(kit.DVS, from_snapshot("as-block-1", src_ns,
                                           storage={"volumeMode": "Block"}), ns)
        status = kit.wait_dv(kube, ns, "as-block-1", ("Succeeded", "Failed"),
                             timeout=TIMEOUT)
    finally:
        kube.delete(STORAGE_CLASSES, cls)
    assert status["phase"] == "Succeeded", status
    claim = kube.get(resources.PVCS, "as-block-1", ns)
    uid = claim["metadata"]["uid"]
    assert claim["metadata"]["annotations"][A + "clone.strategy"] == "copy"
    assert compare(reference, Path(kit.volume_path(kube, claim)))
    events = kube.list(resources.EVENTS, src_ns)
    started = {(e.get("involvedObject") or {}).get("name") for e in events
               if e.get("reason") == "Started"}
    assert f"cloner-prime-{uid}" in started and f"{uid}-source-pod" not in started
    assert not [e for e in kube.list(resources.EVENTS, ns)
                if (e.get("involvedObject") or {}).get("kind") == "Pod"]
    assert not [s for s in kube.list(resources.SECRETS, src_ns) + kube.list(
        resources.SECRETS, ns) if uid in s["metadata"]["name"]]
    wait_for(lambda: kube.get_or_none(resources.PVCS, f"tmp-source-pvc-{uid}", src_ns) is None
             and kube.get_or_none(resources.PVCS, f"prime-{uid}", src_ns) is None
             and kube.get_or_none(resources.PODS, f"cloner-prime-{uid}", src_ns) is None,
             timeout=60, what="the temporary claim, PVC' and the pod deleted")
    kube.delete(kit.DVS, "as-block-1", ns)


def test_a_class_of_another_driver_falls_back_and_cleans_up(
        kube: Client, ns: str, golden: tuple[str, Path]) -> None:
    """A target class of another driver: upstream's NoProvisionerMatch fallback, with its
    words on the target; the temporary claim is made in the first class (by name) of the
    snapshot's driver, and goes with the DataVolume."""
    src_ns, _ = golden
    cls = f"other-{uuid.uuid4().hex[:6]}"
    kube.create(STORAGE_CLASSES, {"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
                                  "metadata": {"name": cls},
                                  "provisioner": "other.example.com",
                                  "volumeBindingMode": "Immediate"})
    try:
        kube.create(kit.DVS, from_snapshot("elsewhere", src_ns, pvc={
            "accessModes": ["ReadWriteOnce"], "storageClassName": cls,
            "resources": {"requests": {"storage": "128Mi"}}}), ns)
        wait_for(lambda: (((kube.get_or_none(resources.PVCS, "elsewhere", ns) or {})
                           .get("metadata") or {}).get("annotations") or {}).get(
            A + "cloneFallbackReason") == "The storageclass provisioner does not match the "
            "volumesnapshotcontent driver", timeout=60, what="the fallback's reason")
        claim = kube.get(resources.PVCS, "elsewhere", ns)
        uid = claim["metadata"]["uid"]
        wait_reasons(kube, ns, uid, "NoProvisionerMatch")
        temp = f"tmp-source-pvc-{uid}"
        # (it binds once the source pod reads it, which waits for a target pod that never
        # comes: no provisioner serves the target's class)
        wait_for(lambda: kube.get_or_none(resources.PVCS, temp, src_ns) is not None,
                 timeout=60, what="the temporary claim made")
        made = kube.get(resources.PVCS, temp, src_ns)
        assert made["spec"]["storageClassName"] == "local"  # the first of the driver's
        assert made["spec"]["dataSource"] == {"apiGroup": "snapshot.storage.k8s.io",
                                              "kind": "VolumeSnapshot", "name": "gold-snap"}
        kube.delete(kit.DVS, "elsewhere", ns)
        wait_for(lambda: kube.get_or_none(resources.PVCS, temp, src_ns) is None, timeout=60,
                 what="the temporary claim deleted with the DataVolume")
    finally:
        kube.delete(STORAGE_CLASSES, cls)


def test_across_namespaces_the_user_needs_rights_in_the_snapshots(
        kube: Client, ns: str, golden: tuple[str, Path]) -> None:
    """Upstream's snapshot rule: ``create datavolumes/source``, or both ``create pods``
    and ``create pvcs`` in the snapshot's namespace; ``pods`` alone is not enough."""
    src_ns, reference = golden
    user = f"u-{uuid.uuid4().hex[:6]}"
    grant(kube, ns, user, [{"apiGroups": ["cdi.kubevirt.io"], "resources": ["datavolumes"],
                            "verbs": ["create", "get", "list"]}])
    grant(kube, src_ns, user, [{"apiGroups": [""], "resources": ["pods"],
                                "verbs": ["create"]}])
    create_as(kube, user, kit.DVS, from_snapshot("denied", src_ns), ns)
    status = kit.wait_dv(kube, ns, "denied", ("Failed", "Succeeded"), timeout=TIMEOUT)
    assert status["phase"] == "Failed", status
    assert kit.condition(status, "Ready")["message"] == (
        f"User {user} has insufficient permissions in clone source namespace {src_ns}")
    grant(kube, src_ns, user, [{"apiGroups": [""], "resources": ["pvcs"],
                                "verbs": ["create"]}])
    create_as(kube, user, kit.DVS, from_snapshot("allowed", src_ns), ns)
    status = kit.wait_dv(kube, ns, "allowed", ("Failed", "Succeeded"), timeout=TIMEOUT)
    assert status["phase"] == "Succeeded", status
    assert compare(reference, Path(kit.volume_path(kube, kube.get(resources.PVCS, "allowed",
                                                                   ns))))


def test_a_data_source_naming_a_snapshot(kube: Client, ns: str,
                                         golden: tuple[str, Path]) -> None:
    """Ready follows the snapshot (upstream's reasons and words); a DataVolume whose
    sourceRef names the DataSource restores the snapshot."""
    src_ns, reference = golden
    name = f"fedora-{uuid.uuid4().hex[:6]}"
    kube.create(DATASOURCES, {"apiVersion": "cdi.kubevirt.io/v1beta1", "kind": "DataSource",
                              "metadata": {"name": "fedora"},
                              "spec": {"source": {"snapshot": {"namespace": src_ns,
                                                               "name": name}}}}, src_ns)
    wait_for(lambda: ready_condition(kube, src_ns, "fedora") == (
        "False", "NotFound", "Snapshot not found"), timeout=60, what="Ready False NotFound")
    kube.create(VOLUMESNAPSHOTS, snapshot(name, "golden"), src_ns)
    # the snapshot's events bring the DataSource along, before the operator's 10 s resync
    wait_snapshot_ready(kube, src_ns, name)
    wait_for(lambda: ready_condition(kube, src_ns, "fedora") == (
        "True", "Ready", "DataSource is ready to be consumed"), timeout=3,
        what="Ready True")
    dv = {"apiVersion": "cdi.kubevirt.io/v1beta1", "kind": "DataVolume",
          "metadata": {"name": "vm-disk"},
          "spec": {"sourceRef": {"kind": "DataSource", "name": "fedora",
                                 "namespace": src_ns},
                   "storage": {"storageClassName": CLASS}}}
    created = kube.create(kit.DVS, dv, ns)
    status = kit.wait_dv(kube, ns, "vm-disk", ("Succeeded", "Failed"), timeout=TIMEOUT)
    assert status["phase"] == "Succeeded", status
    claim = kube.get(resources.PVCS, "vm-disk", ns)
    assert compare(reference, Path(kit.volume_path(kube, claim)))
    wait_reasons(kube, ns, created["metadata"]["uid"], "CloneFromSnapshotSourceInProgress")
    kube.delete(VOLUMESNAPSHOTS, name, src_ns)
    wait_for(lambda: ready_condition(kube, src_ns, "fedora") == (
        "False", "NotFound", "Snapshot not found"), timeout=60, what="Ready False again")


def test_a_claim_cannot_borrow_another_users_snapshot_clone_source(
        kube: Client, ns: str, golden: tuple[str, Path]) -> None:
    """The attack: alice's authorised cross-namespace clone from the snapshot leaves its
    VolumeCloneSource in the snapshot's namespace (kept: she retains her pods); mallory,
    who may not read that namespace, points a Block claim of hers at it (a Block target
    would take the fallback, a temporary claim restored from the snapshot). Her claim
    fails with CrossNamespaceSourceDenied, and nothing is restored for it."""
    src_ns, _ = golden
    grant(kube, ns, "alice", [{"apiGroups": ["cdi.kubevirt.io"],
                               "resources": ["datavolumes"], "verbs": ["create", "get"]}])
    grant(kube, src_ns, "alice", [{"apiGroups": ["cdi.kubevirt.io"],
                                   "resources": ["datavolumes/source"], "verbs": ["create"]}])
    legit = from_snapshot("legit", src_ns)
    legit["metadata"]["annotations"] = {A + "storage.pod.retainAfterCompletion": "true"}
    made = create_as(kube, "alice", kit.DVS, legit, ns)
    status = kit.wait_dv(kube, ns, "legit", ("Succeeded", "Failed"), timeout=TIMEOUT)
    assert status["phase"] == "Succeeded", status
    vcs_name = f"volume-clone-source-{made['metadata']['uid']}"
    assert kube.get_or_none(VCS, vcs_name, src_ns) is not None
    theirs = kit.namespace(kube, "mallory")
    grant(kube, theirs, "mallory", [{"apiGroups": [""], "resources": ["persistentvolumeclaims"],
                                     "verbs": ["create", "get"]}])
    create_as(kube, "mallory", resources.PVCS, {
        "apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "loot"},
        "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": CLASS,
                 "volumeMode": "Block", "resources": {"requests": {"storage": "128Mi"}},
                 "dataSourceRef": {"apiGroup": "cdi.kubevirt.io", "kind": "VolumeCloneSource",
                                   "name": vcs_name, "namespace": src_ns}}}, theirs)

    def denied() -> bool:
        ann = kube.get(resources.PVCS, "loot", theirs)["metadata"].get("annotations") or {}
        return ann.get(A + "storage.condition.running.reason") == "CrossNamespaceSourceDenied"

    wait_for(denied, timeout=TIMEOUT, what="mallory's claim denied")
    assert not [c["metadata"]["name"] for c in kube.list(resources.PVCS, src_ns)
                if (c["metadata"].get("annotations") or {}).get(
                    "populators.rootdisk.io/target", "").startswith(f"{theirs}/loot/")]
    assert kube.get(resources.PVCS, "loot", theirs)["status"].get("phase") != "Bound"
    kube.delete(resources.PVCS, "loot", theirs)
    kube.delete(kit.DVS, "legit", ns)
