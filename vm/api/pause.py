"""``PUT …/virtualmachineinstances/NAME/{pause,unpause}``: what upstream's virt-api
refuses, in its words (kubevirt/kubevirt d923fdb815cd, ``pkg/virt-api/rest/lifecycle.go``
PauseVMIRequestHandler / UnpauseVMIRequestHandler, ``subresource_test.go``'s tables), and
the PauseOptions/UnpauseOptions body (``dryRun: [All]``: checked, not done). Pure.

Upstream's unpause also refuses while a VM snapshot is in progress; rootdisk has no
snapshots, so that check never fires.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from vm.errors import VmError

VM_NOT_RUNNING = "VM is not running"
VMI_NOT_RUNNING = "VMI is not running"
ALREADY_PAUSED = "VMI is already paused"
NOT_PAUSED = "VMI is not paused"
LIVENESS = "Pausing VMIs with a non-GuestAgentPing LivenessProbe is not supported"


@dataclass(frozen=True)
class Refusal:
    code: int
    message: str


def _conflict(name: str, why: str) -> Refusal:
    return Refusal(409, f'Operation cannot be fulfilled on virtualmachineinstance.kubevirt.io '
                        f'"{name}": {why}')


def _paused(vmi: Mapping[str, Any]) -> bool:
    """Upstream's HasCondition(Paused): any Paused condition, whatever its status."""
    return any(isinstance(c, Mapping) and c.get("type") == "Paused"
               for c in (vmi.get("status") or {}).get("conditions") or [])


def _running(vmi: Mapping[str, Any]) -> bool:
    return (vmi.get("status") or {}).get("phase") == "Running"


def refuse(action: str, vmi: Mapping[str, Any]) -> Refusal | None:
    """Why ``action`` (pause | unpause) may not be done to ``vmi``; None: it may."""
    name = str((vmi.get("metadata") or {}).get("name") or "")
    if action == "pause":
        if not _running(vmi):
            return _conflict(name, VM_NOT_RUNNING)
        probe = (vmi.get("spec") or {}).get("livenessProbe")
        if probe is not None and not (isinstance(probe, Mapping)
                                      and probe.get("guestAgentPing") is not None):
            return Refusal(403, f'virtualmachineinstance.kubevirt.io "{name}" is forbidden: '
                                f'{LIVENESS}')
        if _paused(vmi):
            return _conflict(name, ALREADY_PAUSED)
        return None
    if not _running(vmi):
        return _conflict(name, VMI_NOT_RUNNING)
    if not _paused(vmi):
        return _conflict(name, NOT_PAUSED)
    return None


class BadOptions(VmError, ValueError):
    """The body is not PauseOptions/UnpauseOptions; the message names the field."""


def dry_run(raw: bytes, kind: str) -> bool:
    """Whether the ``kind`` (PauseOptions | UnpauseOptions) body asks for a dry run."""
    if not raw.strip():
        return False
    try:
        body = json.loads(raw)
    except ValueError as err:
        raise BadOptions(f"{kind}: not JSON: {err}") from None
    if not isinstance(body, dict):
        raise BadOptions(f"{kind}: must be an object")
    dry = body.get("dryRun")
    if dry is None:
        return False
    if not isinstance(dry, list) or not all(isinstance(d, str) for d in dry):
        raise BadOptions(f"{kind}.dryRun: must be a list of strings")
    if any(d != "All" for d in dry):
        raise BadOptions(f"{kind}.dryRun: only All is supported, got {dry!r}")
    return bool(dry)
