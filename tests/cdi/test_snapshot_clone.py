"""Clones from a VolumeSnapshot seen from the DataVolume controller (pure): upstream's
validation of the snapshot (snapshot-clone-controller_test.go's tables, ported), the
target's size from the snapshot's restoreSize, the VolumeCloneSource naming the
snapshot, DataSources naming a snapshot, the DataVolume's phases and Events, and the
authorisation of a snapshot in another namespace."""

from __future__ import annotations

from collections.abc import Callable
from fractions import Fraction
from typing import Any

import pytest

from cdi import authorize, clone, datasource, snapshot_clone, status
from cdi.render import RenderError, render
from sizes import required_space
from tests.cdi.builders import claim, dv
from tests.cdi.test_render import CONFIG, LOCAL, profile_of, storage

MiB, GiB = 1024**2, 1024**3


def snap(restore: str | None = "1Gi", *, ready: bool = True, klass: str | None = "snap",
         error: str | None = None, with_status: bool = True) -> dict[str, Any]:
    out: dict[str, Any] = {"metadata": {"name": "gold-snap", "namespace": "gold"},
                           "spec": {"source": {"persistentVolumeClaimName": "golden"}}}
    if klass is not None:
        out["spec"]["volumeSnapshotClassName"] = klass
    if with_status:
        st: dict[str, Any] = {"readyToUse": ready,
                              "boundVolumeSnapshotContentName": "snapcontent-1"}
        if restore is not None:
            st["restoreSize"] = restore
        if error is not None:
            st["error"] = {"message": error}
        out["status"] = st
    return out


def content(mode: str | None = "Filesystem", driver: str = "local") -> dict[str, Any]:
    spec: dict[str, Any] = {"driver": driver}
    if mode is not None:
        spec["sourceVolumeMode"] = mode
    return {"metadata": {"name": "snapcontent-1"}, "spec": spec}


def snapshot_dv(**kw: Any) -> dict[str, Any]:
    return dv("copy", source={"snapshot": {"namespace": "gold", "name": "gold-snap"}}, **kw)


def controller_check(snapshot: dict[str, Any], d: dict[str, Any],
                     source_content: dict[str, Any] | None = None) -> str:
    """What the controller does before it creates the claim (cdi.reconcile's steps, pure):
    validate the snapshot, then render the claim from it; "" when accepted, else the
    waiting condition's message."""
    found = snapshot_clone.problem(snapshot, d)
    if found is not None:
        return snapshot_clone.validation_failed(found)
    source = snapshot_clone.as_source(snapshot, source_content or content(), Fraction(0))
    try:
        render(dv=d, storage_class=LOCAL, profile=profile_of(LOCAL), config_status=CONFIG,
               clone_from=(clone.SourceRef("gold", "gold-snap", clone.SNAPSHOT), source))
    except RenderError as err:
        return snapshot_clone.validation_failed(err.message)
    return ""


def _drop_status(s: dict[str, Any]) -> None:
    s.pop("status")


def _not_ready(s: dict[str, Any]) -> None:
    s["status"]["readyToUse"] = False


def _error(s: dict[str, Any]) -> None:
    s["status"]["error"] = {"message": "the disk broke"}


def _no_class(s: dict[str, Any]) -> None:
    s["spec"].pop("volumeSnapshotClassName")


def _empty_class(s: dict[str, Any]) -> None:
    s["spec"]["volumeSnapshotClassName"] = ""


@pytest.mark.parametrize(("expected", "change"), [
    pytest.param("no status on source snapshot yet", _drop_status,
                 id="No snapshot status should reject"),
    pytest.param("", _not_ready, id="Snapshot not ready should accept"),
    pytest.param("snapshot in error state with msg: the disk broke", _error,
                 id="Snapshot has Error should reject"),
    pytest.param("snapshot gold-snap/gold does not have volume snap class populated, can't"
                 " clone", _no_class, id="Snapshot has no volumesnapshotclassname should reject"),
    pytest.param("snapshot gold-snap/gold does not have volume snap class populated, can't"
                 " clone", _empty_class,
                 id="Snapshot has empty volumesnapshotclassname should reject"),
    pytest.param("", lambda s: None, id="valid snapshot should accept"),
])
def test_validation_depends_on_the_snapshots_state(
        expected: str, change: Callable[[dict[str, Any]], None]) -> None:
    s = snap()
    change(s)
    got = controller_check(s, snapshot_dv(pvc={"accessModes": ["ReadWriteOnce"],
                                               "resources": {"requests": {"storage": "1Gi"}}}))
    assert got == (snapshot_clone.validation_failed(expected) if expected else "")
    if expected:
        assert got.startswith("The clone doesn't meet the validation requirements: ")


SMALLER = "target resources requests storage size is smaller than the source"


@pytest.mark.parametrize(("restore", "target", "expected", "explicit_pvc"), [
    pytest.param("1Gi", "1Gi", "", True,
                 id="Explicit PVC request, target equal to restoreSize should accept"),
    pytest.param("1Gi", "2Gi", "", True,
                 id="Explicit PVC request, target bigger then restoreSize should accept"),
    pytest.param("2Gi", "1Gi", SMALLER, True,
                 id="Explicit PVC request, target smaller then restoreSize should reject"),
    pytest.param("1Gi", "1Gi", "", False,
                 id="Storage request, target equal to restoreSize should accept"),
    pytest.param("1Gi", "2Gi", "", False,
                 id="Storage request, target bigger then restoreSize should accept"),
    pytest.param("2Gi", "1Gi", SMALLER, False,
                 id="Storage request, target smaller then restoreSize should reject"),
    pytest.param("1Gi", "", "", False, id="Storage request, no target size should accept"),
    pytest.param("0", "", "size not specified by user/provisioner, can't tell how much "
                 "needed for restore", False,
                 id="Storage request, no target size no restoreSize should reject"),
    pytest.param("0", "1Gi", "", False,
                 id="Storage request, have target size and zero restoreSize should accept"),
    pytest.param("-1", "1Gi", "snapshot has no restore size", False,
                 id="Storage request, have target size negative restoreSize should reject"),
])
def test_validation_depends_on_restore_size_and_target_size(
        restore: str, target: str, expected: str, explicit_pvc: bool) -> None:
    if explicit_pvc:
        d = snapshot_dv(pvc={"accessModes": ["ReadWriteOnce"],
                             "resources": {"requests": {"storage": target}}})
    else:
        d = snapshot_dv(storage=storage(target or None))
    got = controller_check(snap(restore), d)
    assert got == (snapshot_clone.validation_failed(expected) if expected else "")


def test_permissive_clone_does_not_allow_less_than_the_restore_size() -> None:
    d = snapshot_dv(annotations={"cdi.kubevirt.io/permissiveClone": "true"},
                    pvc={"accessModes": ["ReadWriteOnce"],
                         "resources": {"requests": {"storage": "1Gi"}}})
    assert controller_check(snap("2Gi"), d) == snapshot_clone.validation_failed(SMALLER)


def _render(d: dict[str, Any], s: dict[str, Any],
            c: dict[str, Any] | None) -> dict[str, Any]:
    # the overhead the controller gives a Filesystem snapshot (the global one): it must
    # not shrink what a Block target gets
    source = snapshot_clone.as_source(s, c, Fraction("0.06"))
    target = render(dv=d, storage_class=LOCAL, profile=profile_of(LOCAL),
                    config_status=CONFIG,
                    clone_from=(clone.SourceRef("gold", "gold-snap", clone.SNAPSHOT), source))
    assert target.clone_source is not None
    return {"claim": target.claim, "vcs": target.clone_source}


def _fs_overhead() -> Fraction:
    from cdi.config import overhead_for
    return overhead_for(status=CONFIG, storage_class=LOCAL["metadata"]["name"],
                        volume_mode="Filesystem")


@pytest.mark.parametrize(("source_mode", "target_mode", "expected"), [
    # same mode: the restoreSize as it is
    ("Filesystem", "Filesystem", str(GiB)),
    ("Block", "Block", str(GiB)),
    # a Block snapshot into a Filesystem claim: inflated by the target's overhead
    ("Block", "Filesystem", "inflated"),
    # a Filesystem snapshot into a Block claim: the restoreSize as it is (upstream)
    ("Filesystem", "Block", str(GiB)),
    # a content that does not say its mode: Filesystem
    (None, "Filesystem", str(GiB)),
])
def test_size_omitted_takes_the_restore_size(source_mode: str | None, target_mode: str,
                                             expected: str) -> None:
    d = snapshot_dv(storage=storage(None, volumeMode=target_mode))
    got = _render(d, snap("1Gi"), content(source_mode))
    if expected == "inflated":
        expected = str(required_space(size=GiB, overhead=_fs_overhead()))
    assert got["claim"]["spec"]["resources"]["requests"]["storage"] == expected


def test_a_given_storage_size_is_inflated_as_for_any_storage_claim() -> None:
    got = _render(snapshot_dv(storage=storage("2Gi")), snap("1Gi"), content())
    assert got["claim"]["spec"]["resources"]["requests"]["storage"] == str(
        required_space(size=2 * GiB, overhead=_fs_overhead()))


def test_the_clone_source_names_the_snapshot_in_its_namespace() -> None:
    got = _render(snapshot_dv(storage=storage(None)), snap(), content())
    vcs, claim_spec = got["vcs"], got["claim"]["spec"]
    assert vcs["spec"]["source"] == {"apiGroup": "snapshot.storage.k8s.io",
                                     "kind": "VolumeSnapshot", "name": "gold-snap"}
    assert vcs["metadata"]["namespace"] == "gold"
    assert claim_spec["dataSourceRef"] == {"apiGroup": "cdi.kubevirt.io",
                                           "kind": "VolumeCloneSource",
                                           "name": "volume-clone-source-dv-uid",
                                           "namespace": "gold"}


def test_sources_resolve_to_a_snapshot() -> None:
    direct = snapshot_dv()
    assert clone.resolve_source(direct, lambda ns, n: None) == clone.SourceRef(
        "gold", "gold-snap", clone.SNAPSHOT)
    data_sources = {("ns", "fedora"): {"metadata": {"namespace": "ns"}, "spec": {
        "source": {"snapshot": {"name": "fedora-snap"}}}}}
    by_ref = dv("copy", source=None, sourceRef={"kind": "DataSource", "name": "fedora"})
    by_ref["spec"].pop("source")
    assert clone.resolve_source(by_ref, lambda ns, n: data_sources.get((ns, n))) == \
        clone.SourceRef("ns", "fedora-snap", clone.SNAPSHOT)
    # a DataSource naming a DataSource that names a snapshot (one level)
    data_sources[("ns", "latest")] = {"metadata": {"namespace": "ns"}, "spec": {
        "source": {"dataSource": {"name": "fedora"}}}}
    by_ref["spec"]["sourceRef"]["name"] = "latest"
    assert clone.resolve_source(by_ref, lambda ns, n: data_sources.get((ns, n))) == \
        clone.SourceRef("ns", "fedora-snap", clone.SNAPSHOT)
    # a snapshot source without a namespace is the DataVolume's (the webhook asks one)
    bare = dv("copy", source={"snapshot": {"name": "s"}})
    assert clone.snapshot_source(bare) == clone.SourceRef("ns", "s", clone.SNAPSHOT)
    assert clone.snapshot_source(dv("copy")) is None


# -- DataSource ------------------------------------------------------------------------------


def _ds(source: dict[str, Any]) -> dict[str, Any]:
    return {"metadata": {"name": "fedora", "namespace": "g"}, "spec": {"source": source}}


@pytest.mark.parametrize(("found", "expected"), [
    pytest.param(None, ("False", "NotFound", "Snapshot not found"), id="not found"),
    pytest.param({"status": {"readyToUse": False}},
                 ("False", "SnapshotNotReady", "Snapshot phase is not ready"), id="not ready"),
    pytest.param({}, ("False", "SnapshotNotReady", "Snapshot phase is not ready"),
                 id="no status"),
    pytest.param({"status": {"readyToUse": True}},
                 ("True", "Ready", "DataSource is ready to be consumed"), id="ready"),
])
def test_data_source_ready_follows_the_snapshot(found: dict[str, Any] | None,
                                                expected: tuple[str, str, str]) -> None:
    asked: list[tuple[str, str, str]] = []

    def lookup(kind: str, ns: str, name: str) -> dict[str, Any] | None:
        asked.append((kind, ns, name))
        return found
    d = _ds({"snapshot": {"name": "fedora-snap"}})
    assert datasource.ready(data_source=d, lookup=lookup) == expected
    assert asked == [("VolumeSnapshot", "g", "fedora-snap")]  # the namespace defaults
    assert datasource.refers_to(d) == ("VolumeSnapshot", "g", "fedora-snap")
    # through a DataSource naming it
    outer = _ds({"dataSource": {"name": "fedora"}})
    assert datasource.ready(data_source=outer, lookup=lambda k, ns, n: d if k == "DataSource"
                            else found) == expected


# -- the DataVolume's phases and Events --------------------------------------------------------


def _clone_claim(phase: str = "Pending", **anns: str) -> dict[str, Any]:
    c = claim("copy", phase=phase, anns={k.replace("_", "."): v for k, v in anns.items()})
    c["spec"]["dataSourceRef"] = {"apiGroup": "cdi.kubevirt.io", "kind": "VolumeCloneSource",
                                  "name": "volume-clone-source-dv-uid"}
    return c


A = "cdi.kubevirt.io/"


@pytest.mark.parametrize(("anns", "claim_phase", "phase", "reason", "message"), [
    pytest.param({}, "Pending", "CloneScheduled", "CloneScheduled",
                 "Cloning into copy scheduled", id="empty phase"),
    pytest.param({A + "clonePhase": "Snapshot"}, "Pending",
                 "SnapshotForSmartCloneInProgress", "SnapshotForSmartCloneInProgress",
                 "Creating snapshot for smart-clone is in progress (for pvc gold/gold-snap)",
                 id="snapshot phase"),
    pytest.param({A + "clonePhase": "SnapshotClone", A + "storage.pod.phase": "Running"},
                 "Pending", "CloneFromSnapshotSourceInProgress",
                 "CloneFromSnapshotSourceInProgress",
                 "Creating PVC from snapshot source is in progress (for snapshot "
                 "gold/gold-snap)", id="pvc from snapshot phase"),
    pytest.param({A + "clonePhase": "HostClone", A + "storage.pod.phase": "Pending"},
                 "Pending", "CloneInProgress", "CloneInProgress",
                 "Cloning into copy in progress", id="host clone phase"),
    pytest.param({A + "clonePhase": "SnapshotClone", A + "storage.pod.phase": "Succeeded"},
                 "Pending", "RebindInProgress", "RebindInProgress",
                 "Rebinding PersistentVolumeClaim for DataVolume ns/copy", id="rebind phase"),
    pytest.param({A + "clonePhase": "SnapshotClone", A + "storage.pod.phase": "Succeeded"},
                 "Bound", "Succeeded", "CloneSucceeded",
                 "Successfully cloned from gold/gold-snap into ns/copy", id="succeeded phase"),
])
def test_phases_map_as_upstream(anns: dict[str, str], claim_phase: str, phase: str,
                                reason: str, message: str) -> None:
    c = claim("copy", phase=claim_phase, anns=anns)
    c["spec"]["dataSourceRef"] = {"apiGroup": "cdi.kubevirt.io", "kind": "VolumeCloneSource",
                                  "name": "volume-clone-source-dv-uid", "namespace": "gold"}
    if claim_phase == "Bound":
        c["spec"]["volumeName"] = "pv-1"
    observed = status.observe(dv=snapshot_dv(), claim=c, storage_class=None)
    assert observed.phase == phase
    events = status.events_for(previous="Pending", observed=observed, claim_name="copy",
                               clone=("gold", "gold-snap", "ns"), clone_kind="snapshot")
    assert [(e.reason, e.message) for e in events] == [(reason, message)]


@pytest.mark.parametrize("failure", [
    status.Waiting("CloneWithoutSource", "The source snapshot gold-snap doesn't exist"),
    status.Waiting("CloneValidationFailed",
                   "The clone doesn't meet the validation requirements: no status on source "
                   "snapshot yet"),
])
def test_a_snapshot_not_there_or_not_valid_leaves_the_datavolume_pending(
        failure: status.Waiting) -> None:
    observed = status.observe(dv=snapshot_dv(), claim=None, storage_class=None,
                              failure=failure)
    assert observed.phase == "Pending"
    assert observed.ready == ("False", failure[0], failure[1])
    # the same reason from a PVC clone (a plain tuple) is final, as before
    final = status.observe(dv=snapshot_dv(), claim=None, storage_class=None,
                           failure=("CloneValidationFailed", "x"))
    assert final.phase == "Failed"


def test_missing_snapshot_message_is_upstreams() -> None:
    assert snapshot_clone.without_source("gold-snap") == \
        "The source snapshot gold-snap doesn't exist"


# -- authorisation -------------------------------------------------------------------------------


ALICE = authorize.Requester(username="alice", groups=("dev",))


def _answers(allowed: set[str]) -> tuple[Callable[[dict[str, Any]], bool], list[str]]:
    asked: list[str] = []

    def ask(review: dict[str, Any]) -> bool:
        attrs = review["spec"]["resourceAttributes"]
        key = attrs["resource"] + ("/" + attrs["subresource"] if attrs.get("subresource")
                                   else "")
        assert attrs["namespace"] == "gold" and attrs["name"] == "gold-snap"
        assert attrs["verb"] == "create" and review["spec"]["user"] == "alice"
        asked.append(key)
        return key in allowed
    return ask, asked


@pytest.mark.parametrize(("allowed", "expected", "asked"), [
    ({"datavolumes/source"}, True, ["datavolumes/source"]),
    ({"pods", "pvcs"}, True, ["datavolumes/source", "pods", "pvcs"]),
    ({"pods"}, False, ["datavolumes/source", "pods", "pvcs"]),
    ({"pvcs"}, False, ["datavolumes/source", "pods"]),
    (set(), False, ["datavolumes/source", "pods"]),
])
def test_snapshot_clone_needs_datavolumes_source_or_both_pods_and_pvcs(
        allowed: set[str], expected: bool, asked: list[str]) -> None:
    ask, seen = _answers(allowed)
    assert authorize.allowed(ask=ask, who=ALICE, namespace="gold", name="gold-snap",
                             snapshot=True) is expected
    assert seen == asked


def test_a_claim_clone_needs_only_one_of_datavolumes_source_or_pods() -> None:
    ask, _ = _answers({"pods"})
    assert authorize.allowed(ask=ask, who=ALICE, namespace="gold", name="gold-snap")
    ask, _ = _answers({"pvcs"})
    assert not authorize.allowed(ask=ask, who=ALICE, namespace="gold", name="gold-snap")
