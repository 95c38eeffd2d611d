"""What a VirtualMachine's runStrategy asks of its VMI, one sync at a time.

Upstream's ``syncRunStrategy`` in pure form:

- **Always**: a VMI must exist; a final one, or one named by a Stop request, is
  deleted and the next sync creates a new one (after the crash-loop back-off).
- **RerunOnFailure**: a Failed VMI is deleted and started again; a Succeeded one is
  deleted and not restarted. Without a VMI, start only on a Start request or when the
  strategy just changed to RerunOnFailure.
- **Manual**: only ``status.stateChangeRequests`` start and stop it.
- **Halted**: any VMI is deleted.
- **Once**: a VMI is created when the strategy becomes Once; it is never restarted.

``spec.running`` maps to Always/Halted. No VMI is created until the DataVolumes of the
VM's templates are ready. Start requests are consumed when a VMI is created; a Stop
request when its VMI is gone.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any, Literal

from vm.controller.backoff import StartFailure, next_failure
from vm.controller.views import VMIView
from vm.errors import VmError


class RunStrategy(StrEnum):
    ALWAYS = "Always"
    RERUN_ON_FAILURE = "RerunOnFailure"
    MANUAL = "Manual"
    HALTED = "Halted"
    ONCE = "Once"
    WAIT_AS_RECEIVER = "WaitAsReceiver"


class InvalidRunStrategy(VmError, ValueError):
    """The spec's running/runStrategy cannot be read; the message names the field."""


def run_strategy(spec: Mapping[str, Any]) -> RunStrategy:
    running = spec.get("running")
    strategy = spec.get("runStrategy")
    if running is not None and strategy is not None:
        raise InvalidRunStrategy(
            "spec.running: Running and RunStrategy are mutually exclusive")
    if running is not None:
        return RunStrategy.ALWAYS if running else RunStrategy.HALTED
    if strategy is None:
        raise InvalidRunStrategy("spec.runStrategy: RunStrategy must be specified")
    try:
        return RunStrategy(strategy)
    except ValueError:
        raise InvalidRunStrategy(
            f"spec.runStrategy: Invalid RunStrategy {strategy!r}") from None


@dataclass(frozen=True)
class Request:
    """One entry of ``status.stateChangeRequests``."""

    action: str
    uid: str = ""
    data: Mapping[str, str] = field(default_factory=dict)

    def to_status(self) -> dict[str, Any]:
        out: dict[str, Any] = {"action": self.action}
        if self.uid:
            out["uid"] = self.uid
        if self.data:
            out["data"] = dict(self.data)
        return out


def requests_of(status: Mapping[str, Any]) -> tuple[Request, ...]:
    out = []
    for r in status.get("stateChangeRequests") or []:
        if isinstance(r, Mapping) and r.get("action") in ("Start", "Stop"):
            out.append(Request(action=str(r["action"]), uid=str(r.get("uid") or ""),
                               data=dict(r.get("data") or {})))
    return tuple(out)


@dataclass(frozen=True)
class VMState:
    strategy: RunStrategy
    last_strategy: str = ""
    """``status.runStrategy``: the strategy the previous sync acted on."""
    deleting: bool = False
    requests: tuple[Request, ...] = ()
    start_failure: StartFailure | None = None


Action = Literal["none", "create", "delete"]


@dataclass(frozen=True)
class Plan:
    action: Action
    requests: tuple[Request, ...]
    start_failure: StartFailure | None
    waiting: str = ""
    """Why a wanted start did not happen: ``DataVolumesNotReady`` or ``Backoff``."""
    requeue_after: float | None = None
    stopping: bool = False
    """The VMI is wanted gone (shown as Stopping while it lives)."""
    paused: bool = False
    """The VMI to create starts paused (a Start request with ``paused=true``)."""


def _stop_for(requests: list[Request], vmi: VMIView) -> bool:
    return bool(requests) and requests[0].action == "Stop" and (
        not requests[0].uid or requests[0].uid == vmi.uid)


def decide(*, vm: VMState, vmi: VMIView | None, dvs_ready: bool, now: datetime,
           jitter: float) -> Plan:
    requests = list(vm.requests)
    failure = vm.start_failure
    if vmi is not None and vmi.final:
        if vmi.phase == "Failed" and not vmi.ever_running:
            failure = next_failure(previous=failure, failed_uid=vmi.uid, now=now, jitter=jitter)
        elif vmi.ever_running:
            failure = None
    if requests and requests[0].action == "Stop" and (
            vmi is None or (requests[0].uid and requests[0].uid != vmi.uid)):
        requests.pop(0)
    if (requests and requests[0].action == "Start" and vmi is not None and not vmi.final
            and not vmi.deleting):
        requests.pop(0)

    def plan(action: Action, **kw: Any) -> Plan:
        return Plan(action=action, requests=tuple(requests), start_failure=failure, **kw)

    if vm.deleting:
        return plan("delete" if vmi is not None and not vmi.deleting else "none",
                    stopping=vmi is not None)
    if vmi is not None and vmi.deleting:
        return plan("none", stopping=True)

    s = vm.strategy
    start_requested = bool(requests) and requests[0].action == "Start"
    if vmi is not None:
        stop = _stop_for(requests, vmi)
        delete = (
            s is RunStrategy.HALTED
            or stop
            or (s is RunStrategy.ALWAYS and vmi.final)
            or (s is RunStrategy.RERUN_ON_FAILURE and vmi.final)
        )
        if (s is RunStrategy.RERUN_ON_FAILURE and vmi.phase == "Failed" and not stop
                and not any(r.action == "Start" for r in requests)):
            requests.append(Request(action="Start"))
        if delete:
            return plan("delete", stopping=not vmi.final)
        return plan("none")

    want = {
        RunStrategy.ALWAYS: True,
        RunStrategy.RERUN_ON_FAILURE: start_requested or vm.last_strategy != s,
        RunStrategy.MANUAL: start_requested,
        RunStrategy.HALTED: False,
        RunStrategy.ONCE: vm.last_strategy != s or start_requested,
        RunStrategy.WAIT_AS_RECEIVER: False,
    }[s]
    if not want:
        return plan("none")
    if not dvs_ready:
        return plan("none", waiting="DataVolumesNotReady")
    if failure is not None and now < failure.retry_after:
        return plan("none", waiting="Backoff",
                    requeue_after=(failure.retry_after - now).total_seconds())
    paused = False
    if start_requested:
        paused = requests.pop(0).data.get("paused") == "true"
    return plan("create", paused=paused)
