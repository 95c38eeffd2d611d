"""Table tests of the twin-PVC flow's decision (pure): given what exists, what happens."""

from __future__ import annotations

import json
from typing import Any

import pytest

from populators import events, flow
from populators.cdiconfig import CdiConfig
from populators.flow import (
    Annotate,
    CreatePod,
    CreatePrime,
    DeletePod,
    DeletePrime,
    Emit,
    Observed,
    Rebind,
)
from populators.import_populator import ImportPopulator
from populators.importer_pod import Settings

UID = "11111111-2222-3333-4444-555555555555"
PRIME = f"prime-{UID}"
POD = f"importer-{PRIME}"
A = "cdi.kubevirt.io/storage."

IMMEDIATE = {"metadata": {"name": "fast"}, "volumeBindingMode": "Immediate"}
WFFC = {"metadata": {"name": "local"}, "volumeBindingMode": "WaitForFirstConsumer"}
SOURCE = {"metadata": {"name": "src"}, "spec": {"source": {"http": {"url": "http://h/d"}}}}


def target(*, ann: dict[str, str] | None = None, sc: str = "fast", phase: str = "Pending",
           volume: str | None = None, deleting: bool = False) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "disk", "namespace": "ns", "uid": UID,
                            "resourceVersion": "42", "annotations": dict(ann or {})}
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    spec: dict[str, Any] = {
        "accessModes": ["ReadWriteOnce"], "storageClassName": sc, "volumeMode": "Filesystem",
        "resources": {"requests": {"storage": "1Gi"}},
        "dataSourceRef": {"apiGroup": "cdi.kubevirt.io", "kind": "VolumeImportSource",
                          "name": "src"}}
    if volume:
        spec["volumeName"] = volume
    return {"metadata": meta, "spec": spec, "status": {"phase": phase}}


def prime(*, phase: str = "Bound", volume: str | None = "pv-1",
          deleting: bool = False) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": PRIME, "namespace": "ns", "uid": "prime-uid",
                            "ownerReferences": [{"uid": UID, "controller": True}]}
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    spec: dict[str, Any] = {"storageClassName": "fast", "accessModes": ["ReadWriteOnce"],
                            "resources": {"requests": {"storage": "1Gi"}}}
    if volume:
        spec["volumeName"] = volume
    return {"metadata": meta, "spec": spec, "status": {"phase": phase}}


def pod(state: dict[str, Any], *, phase: str = "Running", restarts: int = 0,
        last: dict[str, Any] | None = None, ip: str = "127.1.0.5") -> dict[str, Any]:
    cs: dict[str, Any] = {"restartCount": restarts, "state": state}
    if last:
        cs["lastState"] = {"terminated": last}
    return {"metadata": {"name": POD, "uid": "pod-uid"},
            "status": {"phase": phase, "podIP": ip, "containerStatuses": [cs]}}


def volume(*, claim: str = PRIME, uid: str = "prime-uid") -> dict[str, Any]:
    return {"metadata": {"name": "pv-1", "resourceVersion": "7"},
            "spec": {"claimRef": {"namespace": "ns", "name": claim, "uid": uid}}}


def term(code: int, reason: str, retryable: bool) -> dict[str, Any]:
    return {"exitCode": code, "message": json.dumps(
        {"reason": reason, "message": f"{reason} happened", "retryable": retryable})}


def decide(**kw: Any) -> flow.Plan:
    base: dict[str, Any] = {"target": target(), "storage_class": IMMEDIATE,
                            "source": SOURCE, "prime": None, "pod": None, "volume": None}
    base.update(kw)
    return flow.decide(Observed(**base), ImportPopulator(), Settings())


def kinds(plan: flow.Plan) -> list[str]:
    return [type(a).__name__ for a in plan.actions]


def changes(plan: flow.Plan) -> dict[str, str]:
    out: dict[str, str] = {}
    for a in plan.actions:
        if isinstance(a, Annotate):
            out.update(a.changes)
    return out


SUCCEEDED_POD = pod({"terminated": term(0, "Completed", False)}, phase="Succeeded")
RUNNING_POD = pod({"running": {"startedAt": "t"}})

CASES: list[tuple[str, dict[str, Any], list[str]]] = [
    ("ready: PVC' first", {}, ["CreatePrime", "Annotate", "Emit"]),
    ("no class yet", {"storage_class": None}, []),
    ("no source yet", {"source": None}, []),
    ("WFFC without a node waits", {"target": target(sc="local"), "storage_class": WFFC}, []),
    ("WFFC with a node", {"target": target(sc="local", ann={
        "volume.kubernetes.io/selected-node": "n1"}), "storage_class": WFFC},
     ["CreatePrime", "Annotate", "Emit"]),
    ("WFFC, immediate requested", {"target": target(sc="local", ann={
        A + "bind.immediate.requested": ""}), "storage_class": WFFC},
     ["CreatePrime", "Annotate", "Emit"]),
    ("PVC' exists: the pod", {"prime": prime()}, ["Annotate", "CreatePod", "Annotate"]),
    ("PVC' in use by another pod", {"prime": prime(), "users": ("someone",)},
     ["Annotate", "Emit"]),
    ("PVC' being deleted", {"prime": prime(deleting=True)}, ["Annotate"]),
    ("pod running", {"prime": prime(), "pod": RUNNING_POD}, ["Annotate", "Annotate"]),
    ("permanent failure", {"prime": prime(), "pod": pod(
        {"terminated": term(2, "NotFound", False)})},
     ["Annotate", "Emit", "DeletePod", "DeletePrime"]),
    ("succeeded: rebind", {"prime": prime(), "pod": SUCCEEDED_POD, "volume": volume()},
     ["Annotate", "Annotate", "Rebind"]),
    ("succeeded, PV not PVC''s", {"prime": prime(), "pod": SUCCEEDED_POD,
                                  "volume": volume(claim="other", uid="x")},
     ["Annotate", "Annotate", "Emit"]),
    ("rebound: wait for the binder", {
        "target": target(ann={A + "pod.phase": "Succeeded"}), "prime": prime(phase="Lost"),
        "pod": SUCCEEDED_POD, "volume": volume(claim="disk", uid=UID)},
     ["Annotate", "Annotate"]),
    ("bound: PVC' not Lost yet keeps", {
        "target": target(ann={A + "pod.phase": "Succeeded", A + "populator.progress":
                              "100.0%"}, phase="Bound", volume="pv-1"),
        "prime": prime(), "pod": SUCCEEDED_POD}, ["DeletePod"]),
    ("bound: cleanup", {
        "target": target(ann={A + "pod.phase": "Succeeded", A + "populator.progress":
                              "100.0%"}, phase="Bound", volume="pv-1"),
        "prime": prime(phase="Lost"), "pod": SUCCEEDED_POD}, ["DeletePod", "DeletePrime"]),
    ("bound, retained", {
        "target": target(ann={A + "pod.phase": "Succeeded", A + "populator.progress":
                              "100.0%", A + "pod.retainAfterCompletion": "true"},
                         phase="Bound", volume="pv-1"),
        "prime": prime(phase="Lost"), "pod": SUCCEEDED_POD}, []),
    ("failed before: nothing is restarted", {
        "target": target(ann={A + "pod.phase": "Failed"}), "prime": None}, []),
    ("target deleted mid-import", {"target": target(deleting=True), "prime": prime(),
                                   "pod": RUNNING_POD}, ["DeletePod", "DeletePrime"]),
    ("bad source fails for good", {"source": {"metadata": {"name": "src"}, "spec": {
        "source": {"gcs": {"url": "gs://x/y"}}}}}, ["Annotate", "Emit"]),
]


@pytest.mark.parametrize(("observed", "want"), [c[1:] for c in CASES],
                         ids=[c[0] for c in CASES])
def test_decide(observed: dict[str, Any], want: list[str]) -> None:
    assert kinds(decide(**observed)) == want


def test_prime_is_created_as_upstream() -> None:
    plan = decide(target=target(sc="local", ann={"volume.kubernetes.io/selected-node": "n1"}),
                  storage_class=WFFC)
    created = next(a for a in plan.actions if isinstance(a, CreatePrime)).manifest
    assert created["metadata"]["name"] == PRIME and created["metadata"]["namespace"] == "ns"
    assert created["metadata"]["ownerReferences"] == [{
        "apiVersion": "v1", "kind": "PersistentVolumeClaim", "name": "disk", "uid": UID,
        "controller": True, "blockOwnerDeletion": True}]
    assert created["metadata"]["labels"] == {"app": "containerized-data-importer",
                                             "velero.io/exclude-from-backup": "true"}
    ann = created["metadata"]["annotations"]
    assert ann[A + "bind.immediate.requested"] == ""
    assert ann["volume.kubernetes.io/selected-node"] == "n1"
    assert ann["cdi.kubevirt.io/storage.populator.kind"] == "VolumeImportSource"
    assert ann[A + "import.source"] == "http"
    assert ann[A + "import.endpoint"] == "http://h/d"
    assert created["spec"] == {"accessModes": ["ReadWriteOnce"],
                               "resources": {"requests": {"storage": "1Gi"}},
                               "storageClassName": "local", "volumeMode": "Filesystem"}
    assert "dataSourceRef" not in created["spec"]
    emit = next(a for a in plan.actions if isinstance(a, Emit))
    assert (emit.type, emit.reason) == ("Normal", "CreatedPVCPrimeSuccessfully")


def test_running_pod_is_polled_and_annotated() -> None:
    plan = decide(prime=prime(), pod=RUNNING_POD)
    assert plan.poll_progress == "http://127.1.0.5:8443/metrics" and plan.active
    assert changes(plan)[A + "pod.phase"] == "Running"
    assert changes(plan)[A + "condition.running"] == "true"


def test_permanent_failure_gives_up_with_the_reason() -> None:
    plan = decide(prime=prime(), pod=pod({"terminated": term(2, "ChecksumMismatch", False)}))
    c = changes(plan)
    assert (c[A + "pod.phase"], c[A + "condition.running.reason"]) == (
        "Failed", "ChecksumMismatch")
    assert c[A + "condition.running.message"] == "ChecksumMismatch happened"
    assert DeletePod(POD, "pod-uid") in plan.actions
    assert DeletePrime(PRIME, "prime-uid", "ns") in plan.actions
    assert not plan.active


def test_retryable_failure_is_left_to_the_kubelet() -> None:
    plan = decide(prime=prime(), pod=pod({"waiting": {"reason": "CrashLoopBackOff"}},
                                         restarts=1, last=term(1, "TransferFailed", True)))
    assert kinds(plan) == ["Annotate", "Annotate"] and plan.active
    assert changes(plan)[A + "pod.restarts"] == "1"
    assert changes(plan)[A + "condition.running.reason"] == "TransferFailed"


def test_retries_past_the_limit_fail() -> None:
    plan = decide(prime=prime(), config=CdiConfig(retry_limit=1),
                  pod=pod({"waiting": {"reason": "CrashLoopBackOff"}}, restarts=1,
                          last=term(1, "TransferFailed", True)))
    assert changes(plan)[A + "pod.phase"] == "Failed"
    assert DeletePod(POD, "pod-uid") in plan.actions


def test_evicted_pod_is_replaced_and_its_restarts_kept() -> None:
    evicted = {"metadata": {"name": POD, "uid": "pod-uid", "annotations": {
        "populators.rootdisk.io/previous-restarts": "1"}},
               "status": {"phase": "Failed", "reason": "Evicted"}}
    plan = decide(prime=prime(), pod=evicted, target=target(ann={A + "pod.restarts": "1"}))
    assert DeletePod(POD, "pod-uid") in plan.actions
    assert changes(plan)[A + "pod.restarts"] == "2"
    # The next pod carries the count, so the limit still holds across pods.
    after = decide(prime=prime(), target=target(ann={A + "pod.restarts": "2"}))
    created = next(a for a in after.actions if isinstance(a, CreatePod)).manifest
    assert created["metadata"]["annotations"]["populators.rootdisk.io/previous-restarts"] \
        == "2"


def test_rebind_names_the_target_with_its_resource_version() -> None:
    plan = decide(prime=prime(), pod=SUCCEEDED_POD, volume=volume())
    rebind = next(a for a in plan.actions if isinstance(a, Rebind))
    assert rebind == Rebind("pv-1", {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
                                     "namespace": "ns", "name": "disk", "uid": UID,
                                     "resourceVersion": "42"}, "7")
    assert changes(plan)[A + "populator.progress"] == "100.0%"
    assert changes(plan)[A + "pod.phase"] == "Succeeded"


def test_succeeded_import_does_not_need_the_source_any_more() -> None:
    plan = decide(target=target(ann={A + "pod.phase": "Succeeded"}), source=None,
                  prime=prime(), pod=None, volume=volume())
    assert "Rebind" in kinds(plan)


def test_annotations_written_only_when_they_change() -> None:
    first = decide(prime=prime(), pod=RUNNING_POD)
    t = target(ann=changes(first))
    again = decide(target=t, prime=prime(), pod=RUNNING_POD)
    assert kinds(again) == []


def test_copied_events_have_stable_names() -> None:
    event = {"metadata": {"name": "prime-x.abc"}, "reason": "Provisioning",
             "message": "ok", "type": "Normal", "involvedObject": {"name": PRIME}}
    one = events.copied_event(target=target(), event=event)
    assert one == events.copied_event(target=target(), event=event)
    assert one["involvedObject"]["uid"] == UID and one["reason"] == "Provisioning"
    assert one["message"] == f"[{PRIME}] ok"
    other = events.copied_event(target=target(), event={**event, "metadata": {"name": "y"}})
    assert other["metadata"]["name"] != one["metadata"]["name"]


def test_a_server_ended_at_its_deadline_is_replaced_never_rebound() -> None:
    """Exit 0 with upstream's deadlinePassed: a new pod (and with it a new certificate),
    the target back to Pending; no rebind, no restart counted."""
    ended = {"metadata": {"name": POD, "uid": "pod-uid", "annotations": {
        "populators.rootdisk.io/previous-restarts": "1"}},
             "status": {"phase": "Succeeded", "containerStatuses": [{
                 "restartCount": 0, "state": {"terminated": {
                     "exitCode": 0, "reason": "Completed", "message": json.dumps({
                         "reason": "DeadlinePassed", "message": "Deadline Passed",
                         "retryable": False, "deadlinePassed": True})}}}]}}
    plan = decide(prime=prime(), pod=ended, volume=volume(),
                  target=target(ann={A + "pod.restarts": "1"}))
    assert DeletePod(POD, "pod-uid") in plan.actions
    assert not any(isinstance(a, Rebind) for a in plan.actions)
    got = changes(plan)
    assert got[A + "pod.phase"] == "Pending" and got[A + "condition.running"] == "false"
    assert got[A + "condition.running.reason"] == "DeadlinePassed"
    assert got.get(A + "pod.restarts", "1") == "1"  # carried on, not one more
