"""What the VM controller knows of the world, as small frozen records.

The adapter builds these from API objects (:func:`vmi_view`, :func:`dv_view`); the pure
decisions read nothing else, so their tests are tables of these records.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

FINAL_PHASES = frozenset({"Succeeded", "Failed"})


@dataclass(frozen=True)
class Condition:
    type: str
    status: str
    reason: str = ""
    message: str = ""


@dataclass(frozen=True)
class VMIView:
    uid: str
    phase: str
    deleting: bool = False
    ever_running: bool = False
    conditions: tuple[Condition, ...] = ()

    @property
    def final(self) -> bool:
        return self.phase in FINAL_PHASES

    def condition(self, type_: str) -> Condition | None:
        return next((c for c in self.conditions if c.type == type_), None)


@dataclass(frozen=True)
class DVView:
    name: str
    phase: str
    exists: bool = True
    running_reason: str = ""
    """Reason of the DataVolume's Running condition when it is False."""
    owned: bool = True


def conditions_of(obj: Mapping[str, Any]) -> tuple[Condition, ...]:
    out = []
    for c in (obj.get("status") or {}).get("conditions") or []:
        if isinstance(c, Mapping) and c.get("type"):
            out.append(Condition(type=str(c["type"]), status=str(c.get("status", "Unknown")),
                                 reason=str(c.get("reason") or ""),
                                 message=str(c.get("message") or "")))
    return tuple(out)


def vmi_view(vmi: Mapping[str, Any]) -> VMIView:
    meta = vmi.get("metadata") or {}
    status = vmi.get("status") or {}
    transitions = status.get("phaseTransitionTimestamps") or []
    ever_running = status.get("phase") == "Running" or any(
        isinstance(t, Mapping) and t.get("phase") == "Running" for t in transitions)
    return VMIView(uid=str(meta.get("uid", "")), phase=str(status.get("phase") or "Pending"),
                   deleting=bool(meta.get("deletionTimestamp")), ever_running=ever_running,
                   conditions=conditions_of(vmi))


def dv_view(name: str, dv: Mapping[str, Any] | None, *, vm_uid: str) -> DVView:
    if dv is None:
        return DVView(name=name, phase="", exists=False)
    status = dv.get("status") or {}
    running = next((c for c in status.get("conditions") or []
                    if isinstance(c, Mapping) and c.get("type") == "Running"), None)
    reason = ""
    if running is not None and running.get("status") == "False":
        reason = str(running.get("reason") or "")
    owners = (dv.get("metadata") or {}).get("ownerReferences") or []
    owned = any(o.get("uid") == vm_uid and o.get("controller") for o in owners)
    return DVView(name=name, phase=str(status.get("phase") or ""), running_reason=reason,
                  owned=owned)
