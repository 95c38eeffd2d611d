"""A VirtualMachine's status from its VMI, DataVolumes and the sync's plan.

``printableStatus`` is the first of upstream's list that matches (Terminating,
Stopping, Migrating, Paused, Running, ErrorPvcNotFound, DataVolumeError,
ErrorUnschedulable, Provisioning, WaitingForVolumeBinding, ErrImagePull,
ImagePullBackOff, Starting, CrashLoopBackOff, Stopped, WaitingForReceiver; else
Unknown; rootdisk never migrates). Conditions: the VMI's are mirrored (Ready among
them; without a VMI, Ready=False ``VMINotExists``), plus the VM's own DataVolumesReady
and Failure. A condition keeps its lastTransitionTime while its status does not change.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from vm.controller import datavolumes
from vm.controller.backoff import StartFailure
from vm.controller.runstrategy import Plan, RunStrategy
from vm.controller.views import Condition, DVView, VMIView

VM_OWNED = frozenset({"Failure", "DataVolumesReady", "RestartRequired",
                      "ManualRecoveryRequired"})


@dataclass(frozen=True)
class StatusInput:
    deleting: bool
    strategy: RunStrategy | None
    vmi: VMIView | None
    dvs: tuple[DVView, ...]
    plan: Plan | None
    failure: str = ""
    """A sync error (bad spec, API refusal) for the Failure condition."""


def _cond(vmi: VMIView | None, type_: str, status: str, reasons: Sequence[str] = ()) -> bool:
    c = vmi.condition(type_) if vmi else None
    return c is not None and c.status == status and (not reasons or c.reason in reasons)


def printable_status(i: StatusInput) -> str:
    vmi = i.vmi
    live = vmi is not None and not vmi.final
    start_failure: StartFailure | None = i.plan.start_failure if i.plan else None
    checks: list[tuple[str, bool]] = [
        ("Terminating", i.deleting),
        ("Stopping", live and bool((vmi and vmi.deleting) or (i.plan and i.plan.stopping))),
        ("Paused", live and _cond(vmi, "Paused", "True")),
        ("Running", vmi is not None and vmi.phase == "Running"),
        ("ErrorPvcNotFound", _cond(vmi, "Synchronized", "False", ["FailedPvcNotFound"])),
        ("DataVolumeError", datavolumes.has_errors(i.dvs)),
        ("ErrorUnschedulable", _cond(vmi, "PodScheduled", "False", ["Unschedulable"])),
        ("Provisioning", not datavolumes.all_ready(i.dvs)),
        ("WaitingForVolumeBinding", live and datavolumes.waiting_for_binding(i.dvs)),
        ("ErrImagePull", live and _cond(vmi, "Synchronized", "False", ["ErrImagePull"])),
        ("ImagePullBackOff", live and _cond(vmi, "Synchronized", "False",
                                            ["ImagePullBackOff"])),
        ("Starting", live),
        ("CrashLoopBackOff", start_failure is not None and i.strategy in (
            RunStrategy.ALWAYS, RunStrategy.RERUN_ON_FAILURE)),
        ("Stopped", vmi is None or vmi.final),
    ]
    return next((name for name, hit in checks if hit), "Unknown")


def conditions(i: StatusInput) -> list[Condition]:
    out: list[Condition] = []
    if i.vmi is None:
        out.append(Condition("Ready", "False", "VMINotExists", "VMI does not exist"))
    else:
        out.extend(c for c in i.vmi.conditions if c.type not in VM_OWNED)
        if i.vmi.final and not any(c.type == "Ready" for c in i.vmi.conditions):
            out.append(Condition("Ready", "False", "VMIFinal", f"VMI is {i.vmi.phase}"))
    if i.dvs:
        if datavolumes.all_ready(i.dvs):
            out.append(Condition("DataVolumesReady", "True", "AllDVsReady",
                                 "All of the VMI's DVs are bound and ready"))
        else:
            pending = ", ".join(d.name for d in i.dvs
                                if not (d.exists and d.phase in datavolumes.READY_PHASES))
            out.append(Condition("DataVolumesReady", "False", "NotAllDVsReady",
                                 f"Not all of the VMI's DVs are ready: {pending}"))
    if i.failure:
        out.append(Condition("Failure", "True", "FailedCreate", i.failure))
    return out


def merge_conditions(*, new: Sequence[Condition], old: Sequence[Mapping[str, Any]],
                     now: str) -> list[dict[str, Any]]:
    """Conditions as API dicts; lastTransitionTime kept from ``old`` when unchanged.

    A condition ``old`` has keeps its place there and a new one goes after them (as
    upstream's condition manager updates in place and appends): two controllers that
    each write some of an object's conditions, in orders of their own, then agree on
    the list. (The VMI controller put the guest agent's condition first, the node handler
    last; each write woke the other, several times a second for as long as a VM with an
    agent ran.)"""
    before = {str(c.get("type")): c for c in old if isinstance(c, Mapping)}
    made: dict[str, dict[str, Any]] = {}
    for c in new:
        prev = before.get(c.type)
        stamp = now
        if prev is not None and prev.get("status") == c.status and prev.get(
                "lastTransitionTime"):
            stamp = str(prev["lastTransitionTime"])
        d: dict[str, Any] = {"type": c.type, "status": c.status, "lastProbeTime": None,
                             "lastTransitionTime": stamp}
        if c.reason:
            d["reason"] = c.reason
        if c.message:
            d["message"] = c.message
        made[c.type] = d
    order = [t for t in before if t in made] + [t for t in made if t not in before]
    return [made[t] for t in order]


def vm_status(i: StatusInput, *, old: Mapping[str, Any], now: str) -> dict[str, Any]:
    """The whole status the controller writes (fields it does not own are kept)."""
    status = {k: v for k, v in old.items() if k not in (
        "created", "ready", "printableStatus", "conditions", "stateChangeRequests",
        "startFailure", "runStrategy")}
    vmi = i.vmi
    status["created"] = vmi is not None
    status["ready"] = _cond(vmi, "Ready", "True")
    status["printableStatus"] = printable_status(i)
    status["conditions"] = merge_conditions(
        new=conditions(i), old=old.get("conditions") or [], now=now)
    if i.strategy is not None:
        status["runStrategy"] = i.strategy.value
    if i.plan is not None:
        if i.plan.requests:
            status["stateChangeRequests"] = [r.to_status() for r in i.plan.requests]
        if i.plan.start_failure is not None:
            status["startFailure"] = i.plan.start_failure.to_status()
    else:
        for key in ("stateChangeRequests", "startFailure"):
            if key in old:
                status[key] = old[key]
    return status
