"""The DataVolume reconcile's decisions (pure): the target to create (or why not), the
status to write, the Events that announce it only when it is written, what a finished
DataVolume deletes, a DataVolume failed before its claim staying so, and the adoption of
an existing claim."""

from __future__ import annotations

from fractions import Fraction
from typing import Any

from cdi import clone, datavolume, snapshot_clone
from cdi.render import Target
from cdi.status import Event, Waiting
from tests.cdi.builders import claim, dv, sc
from tests.cdi.test_render import CONFIG, LOCAL, profile_of
from tests.cdi.test_snapshot_clone import snap, snapshot_dv

P = "cdi.kubevirt.io/"
NOW = "2026-01-01T00:00:00Z"
DONE = {P + "storage.pod.phase": "Succeeded", P + "storage.condition.running": "false",
        P + "storage.condition.running.reason": "Completed"}


def decide(d: dict[str, Any], c: dict[str, Any] | None = None,
           failure: tuple[str, str] | None = None) -> datavolume.Plan:
    return datavolume.decide(dv=d, claim=c, storage_class=sc("local"), failure=failure,
                             now=NOW)


def test_a_new_phase_is_written_then_announced() -> None:
    plan = decide(dv(), claim())
    assert plan.phase == "ImportScheduled"
    assert plan.status is not None and plan.status["phase"] == "ImportScheduled"
    assert plan.status["claimName"] == "disk"
    assert plan.events == (Event("Normal", "ImportScheduled", "Import into disk scheduled"),)
    assert (plan.delete_import_source, plan.delete_upload_source,
            plan.delete_clone_source) == (None, None, False)


def test_an_unchanged_status_is_neither_written_nor_announced() -> None:
    first = decide(dv(), claim())
    assert first.status is not None
    again = decide(dv(status=first.status), claim())
    assert again == datavolume.Plan(phase="ImportScheduled")


def test_a_succeeded_import_deletes_its_source_and_any_clone_source() -> None:
    plan = decide(dv(), claim(phase="Bound", anns=DONE))
    assert plan.phase == "Succeeded"
    assert plan.events == (Event("Normal", "ImportSucceeded",
                                 "Successfully imported into PVC disk"),)
    assert plan.delete_import_source == "volume-import-source-dv-uid"
    assert plan.delete_upload_source is None
    assert plan.delete_clone_source
    # written before: nothing announced again, the deletions still happen
    again = decide(dv(status=plan.status), claim(phase="Bound", anns=DONE))
    assert again.status is None and again.events == ()
    assert again.delete_import_source == "volume-import-source-dv-uid"


def test_a_succeeded_upload_deletes_its_upload_source() -> None:
    plan = decide(dv(source={"upload": {}}), claim(phase="Bound", anns=DONE))
    assert plan.delete_upload_source == "volume-upload-source-dv-uid"
    assert plan.events == (Event("Normal", "UploadSucceeded",
                                 "Successfully uploaded into disk"),)


def test_a_clone_tells_its_source_and_keeps_it_when_pods_are_retained() -> None:
    source = {"pvc": {"namespace": "gold", "name": "golden"}}
    plan = decide(dv(source=source), claim(phase="Bound", anns=DONE))
    assert plan.events == (Event("Normal", "CloneSucceeded",
                                 "Successfully cloned from gold/golden into ns/disk"),)
    assert plan.delete_clone_source
    kept = decide(dv(source=source, annotations={P + "storage.pod.retainAfterCompletion":
                                                 "true"}), claim(phase="Bound", anns=DONE))
    assert not kept.delete_clone_source


def test_a_waiting_failure_is_also_told_in_a_warning() -> None:
    why = Waiting("CloneWithoutSource", "snapshot gold-snap not found")
    plan = decide(dv(source={"snapshot": {"namespace": "ns", "name": "gold-snap"}}),
                  None, why)
    assert plan.phase == "Pending" and plan.status is not None
    assert plan.events == (Event("Warning", "CloneWithoutSource",
                                 "snapshot gold-snap not found"),)
    # a failure that is not a wait is on the status only
    failed = decide(dv(), None, datavolume.not_managed("disk"))
    assert failed.status is not None and failed.events == ()
    # told once: when the status does not change, no Warning again
    assert decide(dv(source={"snapshot": {"namespace": "ns", "name": "gold-snap"}},
                     status=plan.status), None, why).events == ()


def test_failed_before_its_claim_was_made_stays_failed_without_writes() -> None:
    plan = decide(dv(status={"phase": "Failed"}), None)
    assert plan == datavolume.Plan(phase="Failed")


def test_adoption_adds_the_datavolume_as_an_owner_not_a_second_controller() -> None:
    d = dv()
    theirs = {"apiVersion": "v1", "kind": "Pod", "name": "x", "uid": "u", "controller": True}
    c = {**claim(), "metadata": {**claim()["metadata"], "resourceVersion": "9",
                                 "ownerReferences": [theirs]}}
    patch = datavolume.adoption_patch(c, d)
    assert patch["metadata"]["resourceVersion"] == "9"
    assert patch["metadata"]["annotations"] == {P + "createdForDataVolume": "dv-uid"}
    refs = patch["metadata"]["ownerReferences"]
    assert refs[0] == theirs
    assert refs[1]["uid"] == "dv-uid" and refs[1]["controller"] is False
    alone = datavolume.adoption_patch({**c, "metadata": {**c["metadata"],
                                                         "ownerReferences": []}}, d)
    assert alone["metadata"]["ownerReferences"][0]["controller"] is True


def test_a_claim_made_by_someone_else_is_refused_in_upstreams_words() -> None:
    assert datavolume.not_managed("disk") == (
        "ErrResourceExists", 'Resource "disk" already exists and is not managed by DataVolume')


def test_the_target_claim_is_rendered_or_a_snapshot_that_does_not_fit_waits() -> None:
    pvc = {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}
    ref = clone.SourceRef("gold", "gold-snap", clone.SNAPSHOT)

    def target(d: dict[str, Any], restore: str) -> Target | tuple[str, str]:
        source = snapshot_clone.as_source(snap(restore), None, Fraction(0))
        return datavolume.target(dv=d, storage_class=LOCAL, profile=profile_of(LOCAL),
                                 config_status=CONFIG, clone_from=(ref, source))

    fits = target(snapshot_dv(pvc=pvc), "1Gi")
    assert isinstance(fits, Target) and fits.clone_source is not None
    too_small = target(snapshot_dv(pvc=pvc), "2Gi")
    assert isinstance(too_small, Waiting)
    assert too_small == ("CloneValidationFailed", snapshot_clone.validation_failed(
        "target resources requests storage size is smaller than the source"))
    # any other render failure is the DataVolume's, not a wait
    broken = datavolume.target(dv=dv(), storage_class=LOCAL, profile=profile_of(LOCAL),
                               config_status=CONFIG, clone_from=None)
    assert broken == ("MissingStorage", "spec.pvc or spec.storage is required")
    assert not isinstance(broken, Waiting)
