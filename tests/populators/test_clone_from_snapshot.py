"""The clone populator with a VolumeCloneSource naming a VolumeSnapshot (pure): upstream's
``computeStrategyForSourceSnapshot`` checks (provisioner, expansion, volume mode) with
their reasons word for word, PVC' restored from the user's snapshot in its namespace,
the clone's phase noted on the target, and upstream's host-assisted fallback: the
temporary claim restored from the snapshot, of a class serving its driver."""

from __future__ import annotations

from typing import Any

import pytest

from populators import clone_snapshot, flow
from populators.clone_populator import source_object
from populators.errors import SourceError
from populators.flow import Annotate, CreatePrime, Emit
from tests.populators.test_clone_flow import A, decide, source, target

SC = {"metadata": {"name": "local-reflink"}, "provisioner": "local",
      "volumeBindingMode": "Immediate", "allowVolumeExpansion": True}


def snap(*, ready: bool = True, restore: str = "1Gi", error: str = "") -> dict[str, Any]:
    status: dict[str, Any] = {"readyToUse": ready, "restoreSize": restore,
                              "boundVolumeSnapshotContentName": "snapcontent-1"}
    if error:
        status["error"] = {"message": error}
    return {"metadata": {"name": "gold-snap", "namespace": "gold"}, "status": status}


def content(*, driver: str = "local", mode: str = "Filesystem") -> dict[str, Any]:
    return {"spec": {"driver": driver, "sourceVolumeMode": mode}}


def from_snapshot(snapshot: dict[str, Any] | None = None, *,
                  c: dict[str, Any] | None = None, t: dict[str, Any] | None = None,
                  sc: dict[str, Any] | None = SC) -> clone_snapshot.FromSnapshot:
    return clone_snapshot.from_snapshot(snapshot, content=c, target=t or target(),
                                        target_class=sc, source="gold/gold-snap")


RESTORE = {"apiGroup": "snapshot.storage.k8s.io", "kind": "VolumeSnapshot",
           "name": "gold-snap"}


@pytest.mark.parametrize(("got", "expected"), [
    pytest.param(from_snapshot(None), clone_snapshot.FromSnapshot(
        waiting="The source snapshot gold-snap doesn't exist"), id="missing"),
    pytest.param(from_snapshot(snap(ready=False), c=content()), clone_snapshot.FromSnapshot(
        waiting="waiting for snapshot gold/gold-snap to be ready"), id="not ready"),
    pytest.param(from_snapshot(snap(error="broken"), c=content()),
                 clone_snapshot.FromSnapshot(waiting="snapshot gold/gold-snap failed: broken"),
                 id="in error"),
    pytest.param(from_snapshot(snap()), clone_snapshot.FromSnapshot(
        waiting="waiting for the content of snapshot gold/gold-snap"), id="no content yet"),
    pytest.param(from_snapshot(snap(), c=content(driver="other.csi")),
                 clone_snapshot.FromSnapshot(fallback=(
                     "NoProvisionerMatch", "The storageclass provisioner does not match the "
                     "volumesnapshotcontent driver")), id="another driver"),
    pytest.param(from_snapshot(snap(restore="512Mi"), c=content(),
                               sc={**SC, "allowVolumeExpansion": False}),
                 clone_snapshot.FromSnapshot(fallback=("NoVolumeExpansion",
                                                      "No volume expansion is possible")),
                 id="larger target, class cannot expand"),
    pytest.param(from_snapshot(snap(), c=content(mode="Block")),
                 clone_snapshot.FromSnapshot(fallback=(
                     "IncompatibleVolumeModes",
                     "The volume modes of source and target are incompatible")),
                 id="another volume mode"),
    pytest.param(from_snapshot(snap(), c=content()),
                 clone_snapshot.FromSnapshot(data_source=RESTORE), id="ready: restore it"),
    pytest.param(from_snapshot(snap(restore="512Mi"), c=content()),
                 clone_snapshot.FromSnapshot(data_source=RESTORE),
                 id="ready, larger target that can expand"),
    pytest.param(from_snapshot(snap(restore="2Gi"), c=content()),
                 clone_snapshot.FromSnapshot(data_source=RESTORE, request=str(2 * 1024**3)),
                 id="ready, PVC' asks the restoreSize when larger than the target"),
])
def test_from_snapshot(got: clone_snapshot.FromSnapshot,
                       expected: clone_snapshot.FromSnapshot) -> None:
    assert got == expected


def snapshot_source() -> dict[str, Any]:
    out = source()
    out["spec"] = {"source": {"apiGroup": "snapshot.storage.k8s.io",
                              "kind": "VolumeSnapshot", "name": "gold-snap"}}
    return out


def test_the_clone_source_may_name_a_snapshot_only_of_the_snapshot_group() -> None:
    assert source_object(snapshot_source()) == ("VolumeSnapshot", "gold-snap")
    odd = snapshot_source()
    odd["spec"]["source"]["apiGroup"] = "example.com"
    with pytest.raises(SourceError, match="not supported"):
        source_object(odd)


NOTES = {A + "clone.strategy": "snapshot", A + "clonePhase": "SnapshotClone"}


def test_prime_is_restored_from_the_users_snapshot_in_its_namespace() -> None:
    plan = decide(source=snapshot_source(), prime_data_source=RESTORE, notes=NOTES)
    made = next(a for a in plan.actions if isinstance(a, CreatePrime)).manifest
    assert made["metadata"]["namespace"] == "gold"
    assert made["spec"]["dataSource"] == RESTORE
    assert Annotate(NOTES) in plan.actions  # the DataVolume shows the step


def test_temp_claim_as_upstreams_create_temp_source_claim() -> None:
    t = target()
    owner = {"apiVersion": "cdi.kubevirt.io/v1beta1", "kind": "VolumeCloneSource",
             "name": "volume-clone-source-x", "uid": "vcs-uid", "controller": True}
    made = clone_snapshot.render_temp_claim(target=t, snapshot=snap(restore="70Mi"),
                                            content=content(mode="Filesystem"),
                                            namespace="gold", storage_class="local",
                                            owner=owner)
    uid = t["metadata"]["uid"]
    assert made["metadata"]["name"] == f"tmp-source-pvc-{uid}"
    assert made["metadata"]["namespace"] == "gold"
    assert made["metadata"]["ownerReferences"] == [owner]
    assert made["metadata"]["annotations"] == {
        "populators.rootdisk.io/target": f"ns/disk/{uid}"}
    assert made["spec"] == {"storageClassName": "local", "accessModes": ["ReadWriteOnce"],
                            "volumeMode": "Filesystem",
                            "resources": {"requests": {"storage": "70Mi"}},
                            "dataSource": RESTORE}
    # a restoreSize of 0: the target's request; no sourceVolumeMode: the target's mode
    zero = clone_snapshot.render_temp_claim(target=target(mode="Block"),
                                            snapshot=snap(restore="0"), content=None,
                                            namespace="gold", storage_class="local",
                                            owner=owner)
    assert zero["spec"]["resources"]["requests"]["storage"] == "1Gi"
    assert zero["spec"]["volumeMode"] == "Block"


def test_temp_class_is_the_first_by_name_serving_the_driver() -> None:
    classes = [{"metadata": {"name": n}, "provisioner": p}
               for n, p in (("zz", "local"), ("other", "x.csi"), ("aa", "local"))]
    assert clone_snapshot.temp_class(classes, "local") == "aa"
    assert clone_snapshot.temp_class(classes, "none.csi") is None
    assert clone_snapshot.temp_class(classes, None) is None


def test_the_fallback_copies_from_the_temp_claim_into_prime_beside_it() -> None:
    notes = {A + "clone.strategy": "copy",
             A + "cloneFallbackReason": "The volume modes of source and target are"
                                        " incompatible",
             A + "clonePhase": "HostClone"}
    temp = {"metadata": {"name": "tmp-source-pvc-x", "namespace": "gold"},
            "spec": {"volumeMode": "Filesystem"}, "status": {"phase": "Bound"}}
    src = {**snapshot_source(), "_sourceClaim": temp}
    plan = decide(source=src, notes=notes,
                  note_events=(Emit("Warning", "IncompatibleVolumeModes",
                                    "The volume modes of source and target are"
                                    " incompatible"),))
    made = next(a for a in plan.actions if isinstance(a, CreatePrime)).manifest
    # beside the temporary claim, in the snapshot's namespace, as upstream's tmp-pvc
    # (planHostAssistedFromSnapshot); named to its target, rebound to it afterwards
    assert made["metadata"]["namespace"] == "gold"
    assert made["metadata"]["annotations"]["populators.rootdisk.io/target"] == \
        f"ns/disk/{made['metadata']['name'].removeprefix('prime-')}"
    assert "dataSource" not in made["spec"]
    assert Annotate(notes) in plan.actions
    assert Emit("Warning", "IncompatibleVolumeModes",
                "The volume modes of source and target are incompatible") in plan.actions


def test_a_missing_snapshot_waits() -> None:
    plan = decide(source=snapshot_source(),
                  prime_blocked="The source snapshot gold-snap doesn't exist")
    assert plan.active and plan.waiting == "The source snapshot gold-snap doesn't exist"
    assert not [a for a in plan.actions if isinstance(a, CreatePrime | flow.Rebind)]


def test_restored_claim_for_the_grow_step() -> None:
    assert clone_snapshot.restored_claim(snap(restore="1Gi"), content(mode="Block")) == {
        "spec": {"volumeMode": "Block", "resources": {"requests": {"storage": "1Gi"}}}}
    assert clone_snapshot.restored_claim(None, content()) is None
