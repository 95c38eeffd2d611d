"""A VMI's phase and conditions from its launcher pod and its claims (virt-controller).

Pending → Scheduling (the launcher pod exists) → Scheduled (the pod runs and is ready;
``nodeName`` set). The node handler moves Scheduled to Running and, from the domain's
state, to Succeeded or Failed. The controller also ends the VMI when the pod ends
(the compute container's exit 0: the guest powered off → Succeeded; else Failed, with
the launcher's reason; the console-log sidecar may keep the pod itself Running),
when the pod vanished, or when a DataVolume failed, so a VMI ends even on a node whose
handler is down. Phases only move forward.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from vm import podnetwork
from vm.controller.views import Condition
from vm.vmi.claims import Readiness

ORDER = {"": 0, "Pending": 1, "Scheduling": 2, "Scheduled": 3, "Running": 4,
         "Succeeded": 5, "Failed": 5, "Unknown": 0}
FINAL = frozenset({"Succeeded", "Failed"})
PULL_ERRORS = frozenset({"ErrImagePull", "ImagePullBackOff", "InvalidImageName"})
# why the kubelet cannot start the launcher (a Secret for cloud-init or SSH keys that does
# not exist: 'secret "x" not found'); shown on the VMI's Synchronized condition, as pull
# errors are (upstream shows only the latter, on the pod)
START_ERRORS = PULL_ERRORS | {"CreateContainerConfigError"}


@dataclass(frozen=True)
class PodView:
    name: str
    phase: str
    node: str = ""
    ready: bool = False
    unschedulable: str = ""
    """The PodScheduled=False message when the scheduler gave up on the pod."""
    waiting_reason: str = ""
    waiting_message: str = ""
    exit_code: int | None = None
    termination: Mapping[str, Any] = field(default_factory=dict)
    deleting: bool = False
    ip: str = ""
    started: bool = False
    """Upstream's ``isPodReady``: the pod runs, its compute container is running (its
    readiness is the VMI's probe, so not waited for) and every other container ready."""
    ready_condition: tuple[str, str, str] | None = None
    """The pod's Ready condition (status, reason, message), which the VMI's copies."""


def pod_view(pod: Mapping[str, Any]) -> PodView:
    meta = pod.get("metadata") or {}
    status = pod.get("status") or {}
    conds = {c.get("type"): c for c in status.get("conditions") or []}
    sched = conds.get("PodScheduled") or {}
    unsched = ""
    if sched.get("status") == "False" and sched.get("reason") == "Unschedulable":
        unsched = str(sched.get("message") or "Unschedulable")
    waiting_reason = waiting_message = ""
    exit_code = None
    termination: dict[str, Any] = {}
    statuses = status.get("containerStatuses") or []
    started = bool(statuses) and status.get("phase") == "Running" and all(
        "running" in (cs.get("state") or {}) if cs.get("name") == "compute"
        else cs.get("ready") is True for cs in statuses)
    for cs in statuses:
        if cs.get("name") != "compute":
            continue
        state = cs.get("state") or {}
        if "waiting" in state:
            waiting_reason = str(state["waiting"].get("reason") or "")
            waiting_message = str(state["waiting"].get("message") or "")
        if "terminated" in state:
            exit_code = int(state["terminated"].get("exitCode", 1))
            try:
                parsed = json.loads(state["terminated"].get("message") or "{}")
                if isinstance(parsed, dict):
                    termination = parsed
            except ValueError:
                termination = {"reason": str(state["terminated"].get("message"))[:256]}
    return PodView(name=str(meta.get("name", "")), phase=str(status.get("phase") or "Pending"),
                   node=str((pod.get("spec") or {}).get("nodeName") or ""),
                   ready=(conds.get("Ready") or {}).get("status") == "True",
                   unschedulable=unsched, waiting_reason=waiting_reason,
                   waiting_message=waiting_message, exit_code=exit_code,
                   termination=termination, deleting=bool(meta.get("deletionTimestamp")),
                   ip=str(status.get("podIP") or ""), started=started,
                   ready_condition=_condition(conds.get("Ready")))


def _condition(cond: Mapping[str, Any] | None) -> tuple[str, str, str] | None:
    if not cond:
        return None
    return (str(cond.get("status") or "Unknown"), str(cond.get("reason") or ""),
            str(cond.get("message") or ""))


def ready_condition(phase: str, launcher: PodView) -> Condition:
    """The VMI's Ready condition, as upstream's ``syncReadyConditionFromPod``: the pod's
    own (so the VMI's readiness probe decides it) once the guest runs."""
    if launcher.deleting:
        return Condition("Ready", "False", "PodTerminating", "virt-launcher pod is terminating")
    if phase != "Running":
        return Condition("Ready", "False", "GuestNotRunning",
                         "Guest VM is not reported as running")
    if launcher.ready_condition is None:
        return Condition("Ready", "False", "PodConditionMissing",
                         "virt-launcher pod is missing the Ready condition")
    status, reason, message = launcher.ready_condition
    return Condition("Ready", status, reason, message)


Action = Literal["none", "create-launcher", "create-binding", "delete-binding"]


@dataclass(frozen=True)
class Outcome:
    phase: str
    reason: str = ""
    message: str = ""
    node: str = ""
    conditions: tuple[Condition, ...] = ()
    action: Action = "none"
    event: tuple[str, str, str] | None = None
    """(type, reason, message) of an Event to record on the VMI."""
    ip: str = ""
    """The launcher pod's address, while it runs."""


def advance(current: str, new: str) -> str:
    """``new`` unless it would move the phase backwards or out of a final phase."""
    if current in FINAL:
        return current
    return new if ORDER.get(new, 0) >= ORDER.get(current, 0) else current


def decide(*, phase: str, launcher: PodView | None, binding: PodView | None,
           volumes: Readiness) -> Outcome:
    phase = phase or "Pending"
    if phase in FINAL:
        return Outcome(phase=phase)
    if launcher is None:
        if phase in ("Scheduled", "Running"):
            return Outcome(phase="Failed", reason="PodVanished",
                           message="the launcher pod is gone",
                           event=("Warning", "Stopped", "the launcher pod is gone"))
        if volumes.verdict == "failed":
            return Outcome(phase="Failed", reason="DataVolumeFailed", message=volumes.message,
                           event=("Warning", "FailedDataVolumeImport", volumes.message))
        if volumes.verdict == "missing":
            return Outcome(phase="Pending", conditions=(Condition(
                "Synchronized", "False", "FailedPvcNotFound", volumes.message),),
                event=("Warning", "FailedPvcNotFound", volumes.message))
        if volumes.verdict == "wait":
            return Outcome(phase="Pending", conditions=(
                Condition("Provisioning", "True", "Provisioning", volumes.message),))
        if volumes.verdict == "bind":
            return Outcome(phase="Pending", conditions=(
                Condition("Provisioning", "True", "WaitingForVolumeBinding", volumes.message),),
                action="none" if binding is not None else "create-binding")
        if binding is not None:
            return Outcome(phase="Pending", action="delete-binding")
        return Outcome(phase="Pending", action="create-launcher",
                       event=("Normal", "SuccessfulCreate", "Created virtual machine pod"))
    if launcher.phase in ("Succeeded", "Failed") or launcher.exit_code is not None:
        # the compute container's end is the guest's: the guest-console-log sidecar
        # keeps the pod Running after it
        succeeded = launcher.exit_code == 0 or (launcher.exit_code is None
                                                and launcher.phase == "Succeeded")
        reason = str(launcher.termination.get("reason") or "")
        message = str(launcher.termination.get("message") or "")[:1024]
        if not succeeded and not reason:
            reason = "LauncherFailed"
            message = message or f"the launcher exited with {launcher.exit_code}"
        return Outcome(phase="Succeeded" if succeeded else "Failed", reason=reason,
                       message=message, node=launcher.node,
                       conditions=(Condition("Ready", "False", "PodTerminating",
                                             message or "the launcher pod has ended"),))
    conds: list[Condition] = []
    if launcher.unschedulable:
        conds.append(Condition("PodScheduled", "False", "Unschedulable",
                               launcher.unschedulable))
    elif launcher.node:
        conds.append(Condition("PodScheduled", "True"))
    if launcher.waiting_reason in START_ERRORS:
        conds.append(Condition("Synchronized", "False", launcher.waiting_reason,
                               launcher.waiting_message))
    conds.append(ready_condition(phase, launcher))
    if launcher.phase == "Running" and (launcher.started or launcher.ready):
        return Outcome(phase=advance(phase, "Scheduled"), node=launcher.node,
                       conditions=tuple(conds), ip=launcher.ip)
    return Outcome(phase=advance(phase, "Scheduling"), node=launcher.node,
                   conditions=tuple(conds))


def interfaces(spec: Mapping[str, Any], pod_ip: str) -> list[dict[str, Any]]:
    """``status.interfaces``: a pod-network interface has the launcher pod's address
    (masquerade, upstream's default binding); other networks are not reported. A VMI
    with neither networks nor interfaces has upstream's defaulted pod network
    (:mod:`vm.podnetwork`)."""
    if not pod_ip:
        return []
    return [{"name": name, "ipAddress": pod_ip, "ipAddresses": [pod_ip], "infoSource": "domain"}
            for name in podnetwork.pod_networks(spec)]


def keep_handler_fields(new: list[dict[str, Any]], old: list[Any]) -> list[dict[str, Any]]:
    """``new`` (the pod addresses) with what the node handler added from the domain and
    the guest agent kept: an entry's ``mac``, ``interfaceName`` and ``infoSource``, and
    the entries of other interfaces (the handler's: no hotplug, so none goes stale)."""
    before = {o.get("name"): o for o in old if isinstance(o, Mapping) and o.get("name")}
    out = []
    for entry in new:
        prev = before.get(entry["name"]) or {}
        out.append({**{k: v for k, v in prev.items()
                       if k not in ("ipAddress", "ipAddresses")}, **entry,
                    **{k: prev[k] for k in ("infoSource",) if k in prev}})
    named = {e["name"] for e in new}
    out += [dict(o) for o in old if isinstance(o, Mapping) and o.get("name") not in named]
    return out
