"""VMI phases from the launcher pod and the claims."""

from __future__ import annotations

import pytest

from vm.vmi.claims import Readiness
from vm.vmi.lifecycle import PodView, advance, decide, pod_view

READY = Readiness("ready")


def test_pending_creates_the_launcher_when_claims_are_ready() -> None:
    out = decide(phase="", launcher=None, binding=None, volumes=READY)
    assert (out.phase, out.action) == ("Pending", "create-launcher")


@pytest.mark.parametrize(("verdict", "phase", "action", "cond"), [
    ("missing", "Pending", "none", ("Synchronized", "FailedPvcNotFound")),
    ("wait", "Pending", "none", ("Provisioning", "Provisioning")),
    ("bind", "Pending", "create-binding", ("Provisioning", "WaitingForVolumeBinding")),
    ("failed", "Failed", "none", None),
])
def test_claims_not_ready(verdict: str, phase: str, action: str, cond: tuple | None) -> None:
    out = decide(phase="Pending", launcher=None, binding=None,
                 volumes=Readiness(verdict, "msg"))  # type: ignore[arg-type]
    assert (out.phase, out.action) == (phase, action)
    if cond:
        assert (out.conditions[0].type, out.conditions[0].reason) == cond


def test_binding_pod_removed_once_bound() -> None:
    out = decide(phase="Pending", launcher=None, binding=PodView("b", "Succeeded"),
                 volumes=READY)
    assert out.action == "delete-binding"


def test_scheduling_then_scheduled() -> None:
    out = decide(phase="Pending", launcher=PodView("p", "Pending"), binding=None, volumes=READY)
    assert out.phase == "Scheduling"
    out = decide(phase="Scheduling", launcher=PodView("p", "Running", node="n1", ready=True),
                 binding=None, volumes=READY)
    assert (out.phase, out.node) == ("Scheduled", "n1")
    # the handler's Running is not undone
    out = decide(phase="Running", launcher=PodView("p", "Running", node="n1", ready=True,
                                                   ready_condition=("True", "", "")),
                 binding=None, volumes=READY)
    assert out.phase == "Running"
    assert {c.type: c.status for c in out.conditions}["Ready"] == "True"


def test_unschedulable_and_pull_errors_become_conditions() -> None:
    out = decide(phase="Scheduling", launcher=PodView("p", "Pending", unschedulable="0/1 nodes",
                                                      waiting_reason="ErrImagePull"),
                 binding=None, volumes=READY)
    reasons = {c.type: c.reason for c in out.conditions}
    assert reasons["PodScheduled"] == "Unschedulable" and reasons["Synchronized"] == "ErrImagePull"


def test_pod_end_ends_the_vmi() -> None:
    ok = decide(phase="Running", launcher=PodView("p", "Succeeded", exit_code=0),
                binding=None, volumes=READY)
    assert ok.phase == "Succeeded"
    bad = decide(phase="Running", launcher=PodView("p", "Failed", exit_code=3, termination={
        "phase": "Failed", "reason": "GuestCrashed", "message": "boom"}),
                 binding=None, volumes=READY)
    assert (bad.phase, bad.reason, bad.message) == ("Failed", "GuestCrashed", "boom")
    # the sidecar still runs: the pod is Running, the compute container has ended
    sidecar = decide(phase="Running", launcher=PodView("p", "Running", exit_code=0),
                     binding=None, volumes=READY)
    assert sidecar.phase == "Succeeded"
    gone = decide(phase="Running", launcher=None, binding=None, volumes=READY)
    assert (gone.phase, gone.reason) == ("Failed", "PodVanished")
    assert decide(phase="Failed", launcher=None, binding=None, volumes=READY).phase == "Failed"


def test_advance_never_goes_back() -> None:
    assert advance("Running", "Scheduled") == "Running"
    assert advance("Succeeded", "Failed") == "Succeeded"
    assert advance("Pending", "Scheduling") == "Scheduling"


def test_pod_view_reads_termination_message() -> None:
    pod = {"metadata": {"name": "p"}, "spec": {"nodeName": "n"}, "status": {
        "phase": "Failed", "conditions": [{"type": "PodScheduled", "status": "True"}],
        "containerStatuses": [
            {"name": "guest-console-log", "state": {"terminated": {"exitCode": 0}}},
            {"name": "compute", "state": {"terminated": {
                "exitCode": 2, "message": '{"phase":"Failed","reason":"QemuCrashed"}'}}}]}}
    v = pod_view(pod)
    assert (v.exit_code, v.termination["reason"], v.node) == (2, "QemuCrashed", "n")


def test_pod_network_interface_gets_the_pod_ip() -> None:
    from vm.vmi.lifecycle import interfaces
    spec = {"networks": [{"name": "default", "pod": {}}, {"name": "m", "multus": {}}]}
    assert interfaces(spec, "10.0.0.7") == [{"name": "default", "ipAddress": "10.0.0.7",
                                             "ipAddresses": ["10.0.0.7"],
                                             "infoSource": "domain"}]
    assert interfaces(spec, "") == []
    # upstream's defaulting: no networks, no interfaces -> the pod network "default"
    assert interfaces({}, "10.0.0.7")[0]["ipAddress"] == "10.0.0.7"
    assert interfaces({"domain": {"devices": {"autoattachPodInterface": False}}},
                      "10.0.0.7") == []
    out = decide(phase="Running", launcher=PodView("p", "Running", node="n", ready=True,
                                                   ip="10.0.0.7"),
                 binding=None, volumes=READY)
    assert out.ip == "10.0.0.7"


def test_a_missing_secret_is_shown_on_the_vmi() -> None:
    out = decide(phase="Scheduling", launcher=PodView(
        "p", "Pending", node="n1", waiting_reason="CreateContainerConfigError",
        waiting_message='secret "ud" not found'), binding=None, volumes=READY)
    [sync] = [c for c in out.conditions if c.type == "Synchronized"]
    assert (sync.status, sync.reason, sync.message) == (
        "False", "CreateContainerConfigError", 'secret "ud" not found')


def _pod(ready: str, *, compute: str = "running", sidecar_ready: bool = True,
         deleting: bool = False) -> dict:
    return {"metadata": {"name": "p", **({"deletionTimestamp": "t"} if deleting else {})},
            "spec": {"nodeName": "n"},
            "status": {"phase": "Running", "podIP": "10.0.0.9", "conditions": [
                {"type": "Ready", "status": ready,
                 **({"reason": "ContainersNotReady",
                     "message": "containers with unready status: [compute]"}
                    if ready == "False" else {})}],
                "containerStatuses": [
                    {"name": "compute", "ready": ready == "True", "state": {compute: {}}},
                    {"name": "guest-console-log", "ready": sidecar_ready,
                     "state": {"running": {}}}]}}


@pytest.mark.parametrize(("phase", "pod", "want_phase", "ready"), [
    # the compute container runs but its (the VMI's) readiness probe has not passed:
    # the VMI is still scheduled, and Ready follows the pod once the guest runs
    ("Scheduling", _pod("False"), "Scheduled",
     ("False", "GuestNotRunning", "Guest VM is not reported as running")),
    ("Running", _pod("False"), "Running",
     ("False", "ContainersNotReady", "containers with unready status: [compute]")),
    ("Running", _pod("True"), "Running", ("True", "", "")),
    # a sidecar not ready: not scheduled yet
    ("Scheduling", _pod("False", sidecar_ready=False), "Scheduling",
     ("False", "GuestNotRunning", "Guest VM is not reported as running")),
    ("Scheduling", _pod("False", compute="waiting"), "Scheduling",
     ("False", "GuestNotRunning", "Guest VM is not reported as running")),
    ("Running", _pod("True", deleting=True), "Running",
     ("False", "PodTerminating", "virt-launcher pod is terminating")),
])
def test_ready_follows_the_pods_ready_condition(phase: str, pod: dict, want_phase: str,
                                                ready: tuple[str, str, str]) -> None:
    out = decide(phase=phase, launcher=pod_view(pod), binding=None, volumes=READY)
    assert out.phase == want_phase
    [cond] = [c for c in out.conditions if c.type == "Ready"]
    assert (cond.status, cond.reason, cond.message) == ready


def test_ready_without_the_pods_condition() -> None:
    pod = _pod("True")
    pod["status"]["conditions"] = []
    out = decide(phase="Running", launcher=pod_view(pod), binding=None, volumes=READY)
    [cond] = [c for c in out.conditions if c.type == "Ready"]
    assert (cond.status, cond.reason) == ("False", "PodConditionMissing")
