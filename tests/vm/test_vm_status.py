"""dataVolumeTemplates → DataVolumes, printableStatus (first match wins), conditions."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from vm.controller import datavolumes
from vm.controller.backoff import StartFailure
from vm.controller.runstrategy import Plan, RunStrategy
from vm.controller.status import StatusInput, merge_conditions, printable_status, vm_status
from vm.controller.views import Condition, DVView, VMIView, dv_view, vmi_view

EXAMPLE = Path(__file__).resolve().parents[2] / "manifests" / "examples" / "vm-datavolume.yaml"


def example_vm() -> dict:
    vm = yaml.safe_load(EXAMPLE.read_text(encoding="utf-8"))
    vm["metadata"].update(namespace="ns1", uid="vm-uid")
    return vm


def test_datavolume_from_template() -> None:
    vm = example_vm()
    vm["spec"]["template"]["spec"]["priorityClassName"] = "high"
    [dv] = datavolumes.missing_datavolumes(vm=vm, existing={})
    assert dv["apiVersion"] == "cdi.kubevirt.io/v1beta1" and dv["kind"] == "DataVolume"
    assert dv["metadata"]["name"] == "demo-rootdisk"
    assert dv["metadata"]["namespace"] == "ns1"
    assert dv["metadata"]["labels"]["kubevirt.io/created-by"] == "vm-uid"
    assert dv["metadata"]["annotations"]["cdi.kubevirt.io/allowClaimAdoption"] == "true"
    assert dv["metadata"]["ownerReferences"] == [{
        "apiVersion": "kubevirt.io/v1", "kind": "VirtualMachine", "name": "demo",
        "uid": "vm-uid", "controller": True, "blockOwnerDeletion": True}]
    assert dv["spec"]["source"] == {"http": {"url": "http://127.0.0.1:8080/guest.qcow2"}}
    assert dv["spec"]["priorityClassName"] == "high"
    # the VM's own template is not changed
    assert "labels" not in vm["spec"]["dataVolumeTemplates"][0]["metadata"]


def test_existing_datavolumes_are_not_made_again_nor_for_a_deleting_vm() -> None:
    vm = example_vm()
    existing = {"demo-rootdisk": DVView("demo-rootdisk", "ImportInProgress")}
    assert datavolumes.missing_datavolumes(vm=vm, existing=existing) == []
    vm["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    assert datavolumes.missing_datavolumes(vm=vm, existing={}) == []


@pytest.mark.parametrize(("phase", "reason", "ready", "error"), [
    ("Succeeded", "", True, False), ("WaitForFirstConsumer", "", True, False),
    ("PendingPopulation", "", True, False), ("ImportInProgress", "", False, False),
    ("Failed", "", False, True), ("ImportInProgress", "Error", False, True),
    ("ImportScheduled", "ImagePullFailed", False, True),
])
def test_readiness_and_errors(phase: str, reason: str, ready: bool, error: bool) -> None:
    dvs = [DVView("a", phase, running_reason=reason)]
    assert datavolumes.all_ready(dvs) is ready
    assert datavolumes.has_errors(dvs) is error


def test_dv_view_reads_running_condition_and_ownership() -> None:
    dv = {"metadata": {"ownerReferences": [{"uid": "vm-uid", "controller": True}]},
          "status": {"phase": "ImportInProgress", "conditions": [
              {"type": "Running", "status": "False", "reason": "Error"}]}}
    assert dv_view("a", dv, vm_uid="vm-uid") == DVView("a", "ImportInProgress",
                                                       running_reason="Error")
    assert dv_view("a", None, vm_uid="x").exists is False


def test_vmi_view_remembers_running() -> None:
    v = vmi_view({"metadata": {"uid": "u"}, "status": {
        "phase": "Failed", "phaseTransitionTimestamps": [{"phase": "Running"}]}})
    assert v.ever_running and v.final


def _vmi(phase: str, *conds: Condition, deleting: bool = False) -> VMIView:
    return VMIView("u", phase, deleting=deleting, conditions=conds)


def _plan(**kw: object) -> Plan:
    base: dict = {"action": "none", "requests": (), "start_failure": None}
    base.update(kw)
    return Plan(**base)


READY_DV = (DVView("d", "Succeeded"),)
SF = StartFailure(1, "u", datetime(2026, 1, 1, tzinfo=UTC))
STATUS_CASES = [
    ("Terminating", dict(deleting=True, vmi=_vmi("Running"))),
    ("Stopping", dict(vmi=_vmi("Running", deleting=True))),
    ("Stopping", dict(vmi=_vmi("Running"), plan=_plan(stopping=True))),
    ("Paused", dict(vmi=_vmi("Running", Condition("Paused", "True")))),
    ("Running", dict(vmi=_vmi("Running"))),
    ("ErrorPvcNotFound", dict(vmi=_vmi("Pending", Condition(
        "Synchronized", "False", "FailedPvcNotFound")))),
    ("DataVolumeError", dict(dvs=(DVView("d", "Failed"),))),
    ("ErrorUnschedulable", dict(vmi=_vmi("Scheduling", Condition(
        "PodScheduled", "False", "Unschedulable")))),
    ("Provisioning", dict(dvs=(DVView("d", "ImportInProgress"),))),
    ("Provisioning", dict(dvs=(DVView("d", "", exists=False),))),
    ("WaitingForVolumeBinding", dict(vmi=_vmi("Pending"),
                                     dvs=(DVView("d", "WaitForFirstConsumer"),))),
    ("ErrImagePull", dict(vmi=_vmi("Scheduling", Condition(
        "Synchronized", "False", "ErrImagePull")))),
    ("Starting", dict(vmi=_vmi("Scheduled"), dvs=READY_DV)),
    ("CrashLoopBackOff", dict(plan=_plan(start_failure=SF))),
    ("Stopped", dict(strategy=RunStrategy.HALTED, plan=_plan(start_failure=SF))),
    ("Stopped", dict(vmi=_vmi("Succeeded"))),
    ("Stopped", dict()),
]


@pytest.mark.parametrize(("want", "kw"), STATUS_CASES, ids=[c[0] for c in STATUS_CASES])
def test_printable_status(want: str, kw: dict) -> None:
    base: dict = {"deleting": False, "strategy": RunStrategy.ALWAYS, "vmi": None, "dvs": (),
                  "plan": _plan()}
    base.update(kw)
    assert printable_status(StatusInput(**base)) == want


def test_status_mirrors_vmi_conditions_and_keeps_transition_times() -> None:
    vmi = _vmi("Running", Condition("Ready", "True"), Condition("AgentConnected", "True"))
    i = StatusInput(deleting=False, strategy=RunStrategy.ALWAYS, vmi=vmi, dvs=READY_DV,
                    plan=_plan(requests=()))
    old = {"conditions": [{"type": "Ready", "status": "True",
                           "lastTransitionTime": "2020-01-01T00:00:00Z"}],
           "volumeSnapshotStatuses": [{"name": "x"}],
           "stateChangeRequests": [{"action": "Start"}]}
    st = vm_status(i, old=old, now="2026-01-01T00:00:00Z")
    conds = {c["type"]: c for c in st["conditions"]}
    assert conds["Ready"]["lastTransitionTime"] == "2020-01-01T00:00:00Z"
    assert conds["AgentConnected"]["lastTransitionTime"] == "2026-01-01T00:00:00Z"
    assert conds["DataVolumesReady"]["status"] == "True"
    assert st["ready"] is True and st["created"] is True
    assert st["printableStatus"] == "Running" and st["runStrategy"] == "Always"
    assert "stateChangeRequests" not in st  # consumed by the plan
    assert st["volumeSnapshotStatuses"] == [{"name": "x"}]  # not ours: kept


def test_no_vmi_means_not_ready() -> None:
    i = StatusInput(deleting=False, strategy=RunStrategy.HALTED, vmi=None, dvs=(),
                    plan=_plan(), failure="spec.runStrategy: Invalid RunStrategy 'x'")
    st = vm_status(i, old={}, now="t")
    conds = {c["type"]: c for c in st["conditions"]}
    assert conds["Ready"]["reason"] == "VMINotExists" and st["ready"] is False
    assert conds["Failure"]["message"].startswith("spec.runStrategy")


def test_merge_conditions_new_status_gets_new_time() -> None:
    out = merge_conditions(new=[Condition("Ready", "False")],
                           old=[{"type": "Ready", "status": "True", "lastTransitionTime": "a"}],
                           now="b")
    assert out[0]["lastTransitionTime"] == "b"


def test_two_writers_of_the_vmi_conditions_agree_on_their_order() -> None:
    """The VMI controller writes the conditions it owns after those it keeps (the agent's
    first), the node handler the agent's after the rest: each write from the other's
    status, in turn, must reach a fixed point, or each wakes the other for as long as the
    VM runs (it did: 70 versions of one VMI in 15 s)."""
    agent = Condition("AgentConnected", "True")
    owned = [Condition("PodScheduled", "True"),
             Condition("Ready", "False", "ContainersNotReady")]
    conditions: list[dict[str, Any]] = []
    writes = []
    for round_ in range(3):
        now = f"2026-12-06T09:00:0{round_}Z"
        conditions = merge_conditions(new=[agent, *owned], old=conditions, now=now)  # controller
        writes.append(conditions)
        conditions = merge_conditions(new=[*owned, agent], old=conditions, now=now)  # handler
        writes.append(conditions)
    assert all(w == writes[0] for w in writes), writes
    assert [c["type"] for c in writes[0]] == ["AgentConnected", "PodScheduled", "Ready"]


def test_a_kept_condition_keeps_its_place_and_a_new_one_goes_last() -> None:
    old = merge_conditions(new=[Condition("A", "True"), Condition("B", "True")], old=[],
                           now="t0")
    got = merge_conditions(new=[Condition("C", "True"), Condition("B", "False"),
                                Condition("A", "True")], old=old, now="t1")
    assert [(c["type"], c["status"], c["lastTransitionTime"]) for c in got] == [
        ("A", "True", "t0"), ("B", "False", "t1"), ("C", "True", "t1")]
