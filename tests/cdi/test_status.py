"""DataVolume status from the target claim and the populator's annotations."""

from __future__ import annotations

from typing import Any

import pytest

from cdi.status import Event, events_for, observe, status_patch
from tests.cdi.builders import claim, dv, sc

P = "cdi.kubevirt.io/"
WFFC = sc("local", binding="WaitForFirstConsumer")
IMMEDIATE = sc("local")
RUN = {P + "storage.condition.running": "true",
       P + "storage.condition.running.reason": "Pod is running"}


@pytest.mark.parametrize(("c", "cls", "phase", "progress", "restarts", "bound", "running",
                          "ready"), [
    (None, IMMEDIATE, "Pending", "N/A", 0, ("Unknown", "NotFound", "No PVC found"),
     ("False", "", ""), ("False", "", "")),
    (claim(), WFFC, "PendingPopulation", "N/A", 0, ("False", "Pending", "PVC disk Pending"),
     ("False", "", ""), ("False", "", "")),
    (claim(anns={"volume.kubernetes.io/selected-node": "n1"}), WFFC, "ImportScheduled", "N/A",
     0, ("False", "Pending", "PVC disk Pending"), ("False", "", ""), ("False", "", "")),
    (claim(anns={P + "storage.bind.immediate.requested": ""}), WFFC, "ImportScheduled", "N/A",
     0, ("False", "Pending", "PVC disk Pending"), ("False", "", ""), ("False", "", "")),
    (claim(populator=False), WFFC, "WaitForFirstConsumer", "N/A", 0,
     ("False", "Pending", "PVC disk Pending"), ("False", "", ""), ("False", "", "")),
    (claim(anns={P + "storage.pod.phase": "Running", P + "storage.pod.restarts": "2",
                 P + "storage.populator.progress": "45.10%", **RUN}), IMMEDIATE,
     "ImportInProgress", "45.10%", 2, ("False", "Pending", "PVC disk Pending"),
     ("True", "Pod is running", ""), ("False", "TransferRunning", "Import into disk in progress")),
    # the importer finished, the populator has not rebound the volume to the claim yet:
    # still in progress (it once went back to ImportScheduled here)
    (claim(anns={P + "storage.pod.phase": "Succeeded", P + "storage.populator.progress":
                 "100.0%", P + "storage.condition.running": "false",
                 P + "storage.condition.running.reason": "Completed"}), IMMEDIATE,
     "ImportInProgress", "100.0%", 0, ("False", "Pending", "PVC disk Pending"),
     ("False", "Completed", ""), ("False", "TransferRunning", "Import into disk in progress")),
    (claim(anns={P + "storage.pod.phase": "Succeeded",
                 "volume.kubernetes.io/selected-node": "n1"}), WFFC,
     "ImportInProgress", "N/A", 0, ("False", "Pending", "PVC disk Pending"),
     ("False", "", ""), ("False", "TransferRunning", "Import into disk in progress")),
    (claim(phase="Bound", anns={P + "storage.pod.phase": "Succeeded",
                                P + "storage.condition.running": "false",
                                P + "storage.condition.running.reason": "Completed"}),
     IMMEDIATE, "Succeeded", "100.0%", 0, ("True", "Bound", "PVC disk Bound"),
     ("False", "Completed", ""), ("True", "", "")),
    (claim(anns={P + "storage.pod.phase": "Failed", P + "storage.pod.restarts": "5",
                 P + "storage.condition.running": "false",
                 P + "storage.condition.running.reason": "NotFound",
                 P + "storage.condition.running.message": "HTTP 404 from the server"}),
     IMMEDIATE, "Failed", "N/A", 5, ("False", "Pending", "PVC disk Pending"),
     ("False", "NotFound", "HTTP 404 from the server"),
     ("False", "NotFound", "HTTP 404 from the server")),
    (claim(phase="Lost"), IMMEDIATE, "Failed", "N/A", 0, ("False", "ClaimLost", "Claim Lost"),
     ("False", "ClaimLost", "Claim Lost"), ("False", "ClaimLost", "Claim Lost")),
    # an adopted claim that is already bound and has no populator is simply there
    (claim(phase="Bound", populator=False), IMMEDIATE, "Succeeded", "100.0%", 0,
     ("True", "Bound", "PVC disk Bound"), ("False", "Completed", ""), ("True", "", "")),
])
def test_observe(c: Any, cls: Any, phase: str, progress: str, restarts: int, bound: Any,
                 running: Any, ready: Any) -> None:
    o = observe(dv=dv(), claim=c, storage_class=cls)
    assert (o.phase, o.progress, o.restarts) == (phase, progress, restarts)
    assert (o.bound, o.running, o.ready) == (bound, running, ready)


def test_succeeded_is_final() -> None:
    done = dv(status={"phase": "Succeeded"})
    assert observe(dv=done, claim=claim(phase="Bound"), storage_class=IMMEDIATE).phase == (
        "Succeeded")


def test_controller_failure_waits_unless_permanent() -> None:
    o = observe(dv=dv(), claim=None, storage_class=None,
                failure=("ErrClaimNotValid", "no accessMode specified in StorageProfile x"))
    assert o.phase == "Pending"
    assert o.running == o.ready == ("False", "ErrClaimNotValid",
                                    "no accessMode specified in StorageProfile x")
    o = observe(dv=dv(), claim=None, storage_class=None,
                failure=("InvalidVolumeMode", "ContentType Archive cannot have block volumeMode"))
    assert o.phase == "Failed"
    assert o.ready == ("False", "InvalidVolumeMode",
                       "ContentType Archive cannot have block volumeMode")


@pytest.mark.parametrize(("previous", "anns", "phase", "events"), [
    (None, {P + "storage.pod.phase": "Pending"}, "ImportScheduled",
     [Event("Normal", "ImportScheduled", "Import into disk scheduled")]),
    ("ImportScheduled", {P + "storage.pod.phase": "Running"}, "ImportInProgress",
     [Event("Normal", "ImportInProgress", "Import into disk in progress")]),
    ("ImportInProgress", {P + "storage.pod.phase": "Running"}, "ImportInProgress", []),
    ("ImportInProgress", {P + "storage.pod.phase": "Failed",
                          P + "storage.condition.running.reason": "ChecksumMismatch",
                          P + "storage.condition.running.message": "sha256 differs"}, "Failed",
     [Event("Warning", "ImportFailed",
            "Failed to import into PVC disk: ChecksumMismatch: sha256 differs")]),
])
def test_events(previous: str | None, anns: dict[str, str], phase: str,
                events: list[Event]) -> None:
    o = observe(dv=dv(status={"phase": previous} if previous else None),
                claim=claim(anns=anns), storage_class=IMMEDIATE)
    assert o.phase == phase
    assert events_for(previous=previous, observed=o, claim_name="disk") == events


def test_succeeded_event() -> None:
    o = observe(dv=dv(status={"phase": "ImportInProgress"}),
                claim=claim(phase="Bound", anns={P + "storage.pod.phase": "Succeeded"}),
                storage_class=IMMEDIATE)
    assert events_for(previous="ImportInProgress", observed=o, claim_name="disk") == [
        Event("Normal", "ImportSucceeded", "Successfully imported into PVC disk")]


def test_status_patch_keeps_times_and_skips_no_change() -> None:
    d = dv()
    o = observe(dv=d, claim=claim(anns={P + "storage.pod.phase": "Running", **RUN}),
                storage_class=IMMEDIATE)
    first = status_patch(dv=d, observed=o, claim_name="disk", now="t1")
    assert first is not None
    assert first["phase"] == "ImportInProgress" and first["claimName"] == "disk"
    assert {c["type"]: c["lastTransitionTime"] for c in first["conditions"]} == {
        "Bound": "t1", "Ready": "t1", "Running": "t1"}
    d["status"] = first
    assert status_patch(dv=d, observed=o, claim_name="disk", now="t2") is None
    done = observe(dv=d, claim=claim(phase="Bound",
                                     anns={P + "storage.pod.phase": "Succeeded"}),
                   storage_class=IMMEDIATE)
    second = status_patch(dv=d, observed=done, claim_name="disk", now="t3")
    assert second is not None
    times = {c["type"]: c["lastTransitionTime"] for c in second["conditions"]}
    assert times == {"Bound": "t3", "Ready": "t3", "Running": "t3"}
    assert second["progress"] == "100.0%"


def test_in_progress_does_not_flap_back() -> None:
    pending_again = claim(anns={P + "storage.pod.phase": "Pending",
                                P + "storage.pod.restarts": "1"})
    o = observe(dv=dv(status={"phase": "ImportInProgress"}), claim=pending_again,
                storage_class=IMMEDIATE)
    assert (o.phase, o.restarts) == ("ImportInProgress", 1)
    assert events_for(previous="ImportInProgress", observed=o, claim_name="disk") == []
    first = observe(dv=dv(), claim=pending_again, storage_class=IMMEDIATE)
    assert first.phase == "ImportScheduled"


def test_a_clone_ends_with_upstreams_clone_events() -> None:
    o = observe(dv=dv(status={"phase": "CloneInProgress"}),
                claim=claim(phase="Bound", anns={P + "storage.pod.phase": "Succeeded"}),
                storage_class=IMMEDIATE)
    assert events_for(previous="CloneInProgress", observed=o, claim_name="disk",
                      clone=("gold", "golden", "ns")) == [
        Event("Normal", "CloneSucceeded", "Successfully cloned from gold/golden into ns/disk")]
    o = observe(dv=dv(status={"phase": "CloneInProgress"}),
                claim=claim(anns={P + "storage.pod.phase": "Failed",
                                  P + "storage.condition.running.reason": "TooSmall",
                                  P + "storage.condition.running.message": "no room"}),
                storage_class=IMMEDIATE)
    assert events_for(previous="CloneInProgress", observed=o, claim_name="disk",
                      clone=("gold", "golden", "ns")) == [
        Event("Warning", "CloneFailed",
              "Cloning from gold/golden into ns/disk failed: TooSmall: no room")]
