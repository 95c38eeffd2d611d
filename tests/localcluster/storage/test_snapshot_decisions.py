"""Table tests of the snapshot controller's and the restore's pure decisions."""

from __future__ import annotations

from typing import Any

import pytest

from localcluster.storage import classes, decisions
from localcluster.storage import snapshot_decisions as sd
from localcluster.storage.snapshot_api import (
    CONTENT_FINALIZER,
    DEFAULT_SNAPSHOT_CLASS,
    SNAPSHOT_FINALIZER,
    snapshot_class,
)

P = classes.PROVISIONER
SCS = {sc["metadata"]["name"]: sc for sc in classes.storage_classes()}
SCS["other"] = {"metadata": {"name": "other"}, "provisioner": "example.com/other"}
DEFAULT = snapshot_class()
RETAIN = {"metadata": {"name": "keep"}, "driver": P, "deletionPolicy": "Retain"}
FOREIGN = {"metadata": {"name": "foreign", "annotations": {DEFAULT_SNAPSHOT_CLASS: "true"}},
           "driver": "example.com/other", "deletionPolicy": "Delete"}
VSCLASSES = {"local-snapshots": DEFAULT, "keep": RETAIN, "foreign": FOREIGN}


def claim(name: str = "src", *, sc: str = "local-immediate", phase: str = "Bound",
          volume: str | None = "pv-src", deleting: bool = False) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": "ns", "uid": "c1"}
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    spec: dict[str, Any] = {"storageClassName": sc}
    if volume:
        spec["volumeName"] = volume
    return {"metadata": meta, "spec": spec, "status": {"phase": phase}}


def pv(name: str = "pv-src", *, by: str = P, mode: str = "Block") -> dict[str, Any]:
    return {"metadata": {"name": name, "annotations": {decisions.PROVISIONED_BY: by}},
            "spec": {"volumeMode": mode, "storageClassName": "local-immediate"}}


def vs(*, source: dict[str, Any] | None = None, cls: str | None = None,
       finalizers: list[str] | None = None, deleting: bool = False,
       status: dict[str, Any] | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "snap", "namespace": "ns", "uid": "u1",
                            "finalizers": finalizers or []}
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    spec: dict[str, Any] = {"source": {"persistentVolumeClaimName": "src"} if source is None
                            else source}
    if cls:
        spec["volumeSnapshotClassName"] = cls
    return {"metadata": meta, "spec": spec, "status": status or {}}


def content(*, ready: bool = True, policy: str = "Delete", driver: str = P,
            uid: str = "u1", deleting: bool = False, mode: str = "Block",
            finalizers: tuple[str, ...] = (CONTENT_FINALIZER,)) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "snapcontent-u1", "finalizers": list(finalizers),
                            "resourceVersion": "7"}
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    out: dict[str, Any] = {
        "metadata": meta,
        "spec": {"volumeSnapshotRef": {"namespace": "ns", "name": "snap", "uid": uid},
                 "driver": driver, "deletionPolicy": policy, "sourceVolumeMode": mode,
                 "source": {"volumeHandle": "pv-src"}},
    }
    if ready:
        out["status"] = sd.content_status(handle="snapcontent-u1", restore_size=64 * 2**20,
                                          created_ns=1_767_225_600_000_000_000)
    return out


def plan(snapshot: dict[str, Any], *, claims: list[dict[str, Any]] | None = None,
         pvs: list[dict[str, Any]] | None = None, contents: list[dict[str, Any]] | None = None,
         vsclasses: dict[str, Any] | None = None) -> object:
    return sd.snapshot_plan(
        snapshot=snapshot,
        contents={c["metadata"]["name"]: c for c in contents or []},
        claims={("ns", c["metadata"]["name"]): c for c in ([claim()] if claims is None
                                                           else claims)},
        volumes={v["metadata"]["name"]: v for v in ([pv()] if pvs is None else pvs)},
        storage_classes=SCS, snapshot_classes=VSCLASSES if vsclasses is None else vsclasses,
        provisioner=P)


WHAT = "the source PersistentVolumeClaim ns/src"


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"claims": []}, f"{WHAT} does not exist"),
    ({"claims": [claim(phase="Pending", volume=None)]}, f"{WHAT} is not Bound yet"),
    ({"claims": [claim(deleting=True)]}, f"{WHAT} is being deleted"),
    ({"pvs": []}, f"the volume pv-src of {WHAT} does not exist"),
    ({"claims": [claim(sc="other")]},
     f"{WHAT} is of StorageClass 'other', provisioned by 'example.com/other'; only volumes "
     f"of {P} can be snapshotted"),
    ({"pvs": [pv(by="someone")]}, f"the volume pv-src of {WHAT} was not made by {P}"),
    ({"vsclasses": {"foreign": FOREIGN}},
     f"no default VolumeSnapshotClass for driver '{P}' (annotated {DEFAULT_SNAPSHOT_CLASS}: "
     '"true"); name one in spec.volumeSnapshotClassName'),
    ({"vsclasses": {**VSCLASSES, "second": {**DEFAULT, "metadata": {
        "name": "second", "annotations": {DEFAULT_SNAPSHOT_CLASS: "true"}}}}},
     f"2 default VolumeSnapshotClasses for driver '{P}' (local-snapshots, second); name one "
     "in spec.volumeSnapshotClassName"),
])
def test_refusals(kwargs: dict[str, Any], message: str) -> None:
    assert plan(vs(), **kwargs) == sd.Fail(message)


@pytest.mark.parametrize(("snapshot", "message"), [
    (vs(cls="missing"), "VolumeSnapshotClass 'missing' does not exist"),
    (vs(cls="foreign"), "VolumeSnapshotClass 'foreign' is for driver 'example.com/other', "
                        f"the source volume's driver is '{P}'"),
    (vs(source={"volumeSnapshotContentName": "handmade"}),
     "pre-provisioned snapshots (spec.source.volumeSnapshotContentName) are not supported "
     "by localcluster"),
    (vs(source={}), "spec.source.persistentVolumeClaimName is required"),
    (vs(status={"boundVolumeSnapshotContentName": "snapcontent-u1", "readyToUse": True}),
     "the bound VolumeSnapshotContent snapcontent-u1 is missing"),
])
def test_snapshot_refusals(snapshot: dict[str, Any], message: str) -> None:
    assert plan(snapshot) == sd.Fail(message)


def test_take_with_the_default_class() -> None:
    take = plan(vs())
    assert isinstance(take, sd.Take)
    assert take.volume == "pv-src" and take.class_name == "local-snapshots"
    assert take.content == {
        "apiVersion": "snapshot.storage.k8s.io/v1", "kind": "VolumeSnapshotContent",
        "metadata": {"name": "snapcontent-u1", "finalizers": [CONTENT_FINALIZER]},
        "spec": {
            "volumeSnapshotRef": {"apiVersion": "snapshot.storage.k8s.io/v1",
                                  "kind": "VolumeSnapshot", "namespace": "ns",
                                  "name": "snap", "uid": "u1"},
            "driver": P, "deletionPolicy": "Delete", "volumeSnapshotClassName":
                "local-snapshots", "sourceVolumeMode": "Block",
            "source": {"volumeHandle": "pv-src"}}}


def test_take_with_a_named_class_keeps_its_policy() -> None:
    take = plan(vs(cls="keep"))
    assert isinstance(take, sd.Take) and take.class_name is None
    assert take.content["spec"]["deletionPolicy"] == "Retain"


def test_an_unready_content_is_taken_again_without_its_claim() -> None:
    take = plan(vs(), claims=[], pvs=[], contents=[content(ready=False)])
    assert isinstance(take, sd.Take) and take.volume == "pv-src"
    assert take.content["metadata"]["resourceVersion"] == "7"


def test_a_ready_content_is_reported_whatever_became_of_the_claim() -> None:
    assert plan(vs(), claims=[], pvs=[], contents=[content()]) == sd.Report({
        "boundVolumeSnapshotContentName": "snapcontent-u1", "readyToUse": True,
        "error": None, "restoreSize": "64Mi", "creationTime": "2026-01-01T00:00:00Z"})


def test_a_content_bound_to_another_snapshot_is_not_used() -> None:
    assert isinstance(plan(vs(), contents=[content(uid="other")]), sd.Take)


@pytest.mark.parametrize(("snapshot", "contents", "expected"), [
    (vs(deleting=True), [content()], sd.Nothing("no finalizer of ours")),
    (vs(deleting=True, finalizers=[SNAPSHOT_FINALIZER]), [content()],
     sd.Finish(delete_content="snapcontent-u1")),
    (vs(deleting=True, finalizers=[SNAPSHOT_FINALIZER]), [content(deleting=True)],
     sd.Nothing("waiting for content snapcontent-u1 to be deleted")),
    (vs(deleting=True, finalizers=[SNAPSHOT_FINALIZER]), [],
     sd.Finish(remove_finalizer=True)),
    (vs(deleting=True, finalizers=[SNAPSHOT_FINALIZER]), [content(policy="Retain")],
     sd.Finish(remove_finalizer=True)),
])
def test_deletion(snapshot: dict[str, Any], contents: list[dict[str, Any]],
                  expected: object) -> None:
    assert plan(snapshot, contents=contents) == expected


@pytest.mark.parametrize(("obj", "snapshots", "expected"), [
    (content(), {("ns", "snap"): vs()}, sd.ContentPlan()),
    (content(), {}, sd.ContentPlan(delete=True)),
    (content(uid="old"), {("ns", "snap"): vs()}, sd.ContentPlan(delete=True)),
    (content(policy="Retain"), {}, sd.ContentPlan()),
    (content(deleting=True), {}, sd.ContentPlan(delete_image=True, remove_finalizer=True)),
    (content(deleting=True, policy="Retain"), {}, sd.ContentPlan(remove_finalizer=True)),
    (content(deleting=True, finalizers=()), {}, sd.ContentPlan()),
    (content(driver="example.com/other", deleting=True), {}, sd.ContentPlan()),
])
def test_content_plan(obj: dict[str, Any], snapshots: dict[Any, Any],
                      expected: sd.ContentPlan) -> None:
    assert sd.content_plan(content=obj, snapshots=snapshots, provisioner=P) == expected


READY = {"boundVolumeSnapshotContentName": "snapcontent-u1", "readyToUse": True,
         "restoreSize": "64Mi"}
WAIT = "waiting for VolumeSnapshot ns/snap: "


@pytest.mark.parametrize(("capacity", "mode", "snapshot", "obj", "expected"), [
    (64 * 2**20, "Block", vs(status=READY), content(), sd.RestoreFrom("snapcontent-u1")),
    (2**30, "Block", vs(status=READY), content(), sd.RestoreFrom("snapcontent-u1")),
    (64 * 2**20, "Block", None, None,
     decisions.Wait("WaitingForSnapshot", WAIT + "it does not exist")),
    (64 * 2**20, "Block", vs(deleting=True, status=READY), content(),
     decisions.Wait("WaitingForSnapshot", WAIT + "it is being deleted")),
    (64 * 2**20, "Block", vs(status={**READY, "readyToUse": False}), content(),
     decisions.Wait("WaitingForSnapshot", WAIT + "it is not ready to use yet")),
    (64 * 2**20, "Block", vs(), None,
     decisions.Wait("WaitingForSnapshot", WAIT + "it is not ready to use yet")),
    (64 * 2**20, "Block", vs(status=READY), None,
     decisions.Wait("WaitingForSnapshot",
                    WAIT + "its VolumeSnapshotContent snapcontent-u1 is missing")),
    (32 * 2**20, "Block", vs(status=READY), content(),
     decisions.Refuse("ProvisioningFailed", f"requested volume size {32 * 2**20} is less "
                      f"than the size {64 * 2**20} for the source snapshot snap")),
    (64 * 2**20, "Filesystem", vs(status=READY), content(),
     decisions.Refuse("ProvisioningFailed", "the claim's volumeMode Filesystem differs from "
                      "the volumeMode Block of the source of VolumeSnapshot ns/snap; "
                      "localcluster cannot change a volume's mode")),
    (64 * 2**20, "Block", vs(status=READY), content(driver="example.com/other"),
     decisions.Refuse("ProvisioningFailed", "VolumeSnapshot ns/snap was taken by driver "
                      f"'example.com/other', not '{P}'")),
])
def test_restore(capacity: int, mode: str, snapshot: dict[str, Any] | None,
                 obj: dict[str, Any] | None, expected: object) -> None:
    target = claim("restored")
    assert sd.restore(claim=target, capacity=capacity, mode=mode, snapshot_name="snap",
                      snapshot=snapshot, content=obj, provisioner=P) == expected


@pytest.mark.parametrize(("current", "want", "differs"), [
    ({}, {"readyToUse": False, "error": {"message": "m", "time": "t1"}}, True),
    ({"readyToUse": False, "error": {"message": "m", "time": "t0"}},
     {"readyToUse": False, "error": {"message": "m", "time": "t1"}}, False),
    ({"readyToUse": False, "error": {"message": "m"}}, {"readyToUse": True, "error": None},
     True),
    ({"readyToUse": True}, {"readyToUse": True, "error": None}, False),
])
def test_status_differs(current: dict[str, Any], want: dict[str, Any], differs: bool) -> None:
    assert sd.status_differs(current, want) is differs
