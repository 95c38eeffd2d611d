"""virt-api's guest agent subresources, as pure decisions (upstream's
``pkg/virt-api/rest/subresource.go`` and ``lifecycle.go``).

``guestosinfo`` is upstream's ``VirtualMachineInstanceGuestAgentInfo`` (the first 10
users and filesystems); ``userlist`` and ``filesystemlist`` hold them all. The handler's
answer is the launcher's word: only the fields named here are passed on.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from vm.controller.views import conditions_of

MAX_ANSWER = 2 * 1024 * 1024
"""Longest answer virt-api reads from a handler (bytes)."""
INFO_LIMIT = 10
"""Users and filesystems in guestosinfo (upstream's GetUsers(10), GetFS(10))."""

VMI_NOT_RUNNING = "VMI is not running"
NO_AGENT = "VMI does not have guest agent connected"
VM_NOT_RUNNING = "VM is not running"
PAUSED = "VMI is paused"
NO_AGENT_NO_ACPI = "VMI neither have the agent connected nor the ACPI feature enabled"


def _has(vmi: Mapping[str, Any], kind: str, status: str | None = None) -> bool:
    return any(c.type == kind and (status is None or c.status == status)
               for c in conditions_of(vmi))


def refuse_info(vmi: Mapping[str, Any]) -> str | None:
    if (vmi.get("status") or {}).get("phase") != "Running":
        return VMI_NOT_RUNNING
    if not _has(vmi, "AgentConnected"):
        return NO_AGENT
    return None


def refuse_softreboot(vmi: Mapping[str, Any]) -> str | None:
    if (vmi.get("status") or {}).get("phase") != "Running":
        return VM_NOT_RUNNING
    if _has(vmi, "Paused", "True"):
        return PAUSED
    if not _has(vmi, "AgentConnected"):
        acpi = ((((vmi.get("spec") or {}).get("domain") or {}).get("features") or {})
                .get("acpi") or {})
        if isinstance(acpi, Mapping) and acpi.get("enabled") is False:
            return NO_AGENT_NO_ACPI
    return None


def _list(value: Any) -> list[Any]:
    return [v for v in value if isinstance(v, dict)] if isinstance(value, list) else []


def shape(sub: str, info: Mapping[str, Any]) -> dict[str, Any]:
    users = _list(info.get("userList"))
    fs_info = info.get("fsInfo")
    disks = _list(fs_info.get("disks")) if isinstance(fs_info, Mapping) else []
    if sub == "userlist":
        return {"metadata": {}, "items": users}
    if sub == "filesystemlist":
        return {"metadata": {}, "items": disks}
    os_info = info.get("os")
    out: dict[str, Any] = {
        "guestAgentVersion": str(info.get("guestAgentVersion") or ""),
        "supportedCommands": _list(info.get("supportedCommands")),
        "hostname": str(info.get("hostname") or ""),
        "os": dict(os_info) if isinstance(os_info, Mapping) else {},
        "timezone": str(info.get("timezone") or ""),
        "fsInfo": {"disks": disks[:INFO_LIMIT]},
        "fsFreezeStatus": str(info.get("fsFreezeStatus") or ""),
    }
    if users:
        out["userList"] = users[:INFO_LIMIT]
    return {k: v for k, v in out.items() if v not in ("", [], None)} | {
        "fsInfo": out["fsInfo"], "os": out["os"]}
