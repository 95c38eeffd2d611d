"""A VMI's phase from its launcher's domain state (upstream's
``calculateVmPhaseForStatusReason``): running or paused → Running (paused adds the
Paused condition), shutdown → Succeeded, crashed → Failed, starting → unchanged."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from vm.controller.views import Condition

FINAL = ("Succeeded", "Failed")


@dataclass(frozen=True)
class Update:
    phase: str
    reason: str = ""
    paused: Condition | None = None
    """The Paused condition to set, or None to remove it."""


def from_state(*, phase: str, answer: Mapping[str, Any]) -> Update | None:
    """None: nothing to change (final VMI, launcher still starting, unknown state)."""
    if phase in FINAL or phase not in ("Scheduled", "Running"):
        return None
    state = answer.get("state")
    reason = str(answer.get("reason") or "")
    if state == "running":
        return Update(phase="Running")
    if state == "paused":
        return Update(phase="Running", paused=Condition(
            "Paused", "True", "PausedByUser", "VMI was paused by user"))
    if state == "shutdown":
        return Update(phase="Succeeded", reason=reason or "GuestShutdown")
    if state == "crashed":
        return Update(phase="Failed", reason=reason or "GuestCrashed")
    return None
