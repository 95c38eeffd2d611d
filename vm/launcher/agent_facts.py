"""What the guest agent said, in upstream's shapes (pure; never raises).

Why it exists: the guest is not trusted. Each answer is read field by field: a value of
the wrong type is dropped, strings are cut to :data:`MAX_TEXT` characters and lists to
:data:`MAX_ITEMS`, so a malicious or broken agent can neither crash the launcher nor
grow the VMI's status. Names follow upstream (KubeVirt's ``VirtualMachineInstanceGuest
AgentInfo``, ``VirtualMachineInstanceGuestOSInfo``, ``…GuestOSUser``, ``…FileSystem``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

MAX_TEXT = 1024
MAX_ITEMS = 256
MAX_ADDRESSES = 64

OS_FIELDS = {
    "name": "name",
    "kernel-release": "kernelRelease",
    "version": "version",
    "pretty-name": "prettyName",
    "version-id": "versionId",
    "kernel-version": "kernelVersion",
    "machine": "machine",
    "id": "id",
}

REQUIRED_COMMANDS = (
    "guest-ping",
    "guest-get-time",
    "guest-info",
    "guest-shutdown",
    "guest-network-get-interfaces",
    "guest-get-fsinfo",
    "guest-get-host-name",
    "guest-get-users",
    "guest-get-timezone",
    "guest-get-osinfo",
)
"""upstream's ``requiredGuestAgentCommands`` (virt-handler's guestagent.go)."""
UNSUPPORTED_REASON = "This guest agent doesn't support required basic commands"


def _text(value: Any) -> str | None:
    return value[:MAX_TEXT] if isinstance(value, str) else None


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _items(value: Any, limit: int = MAX_ITEMS) -> list[dict[str, Any]]:
    if not isinstance(value, list):
        return []
    return [v for v in value[:limit] if isinstance(v, dict)]


def _compact(body: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in body.items() if v is not None and v != ""}


def agent_info(raw: Any) -> tuple[str, list[dict[str, Any]]]:
    """guest-info → (version, supportedCommands [{name, enabled}])."""
    if not isinstance(raw, dict):
        return "", []
    commands = [
        {"name": name, "enabled": item.get("enabled") is True}
        for item in _items(raw.get("supported_commands"))
        if (name := _text(item.get("name")))
    ]
    return _text(raw.get("version")) or "", commands


def os_info(raw: Any) -> dict[str, str]:
    if not isinstance(raw, dict):
        return {}
    return _compact({ours: _text(raw.get(theirs)) for theirs, ours in OS_FIELDS.items()})


def hostname(raw: Any) -> str:
    return (_text(raw.get("host-name")) or "") if isinstance(raw, dict) else ""


def timezone(raw: Any) -> str:
    """upstream's ``"<zone>, <offset>"``."""
    if not isinstance(raw, dict):
        return ""
    return f"{_text(raw.get('zone')) or ''}, {_int(raw.get('offset')) or 0}"


def users(raw: Any) -> list[dict[str, Any]]:
    out = []
    for item in _items(raw):
        name = _text(item.get("user"))
        if not name:
            continue
        login = item.get("login-time")
        seconds = float(login) if isinstance(login, (int, float)) and not isinstance(
            login, bool) and math.isfinite(login) else 0.0
        out.append(_compact({"userName": name, "domain": _text(item.get("domain")),
                             "loginTime": seconds}))
    return out


def filesystems(raw: Any) -> list[dict[str, Any]]:
    out = []
    for item in _items(raw):
        disks = [
            _compact({"serial": _text(d.get("serial"))})
            | {"busType": _text(d.get("bus-type")) or ""}
            for d in _items(item.get("disk"), MAX_ADDRESSES)
        ]
        entry = {
            "diskName": _text(item.get("name")) or "",
            "mountPoint": _text(item.get("mountpoint")) or "",
            "fileSystemType": _text(item.get("type")) or "",
            "usedBytes": _int(item.get("used-bytes")) or 0,
            "totalBytes": _int(item.get("total-bytes")) or 0,
        }
        if disks:
            entry["disk"] = disks
        out.append(entry)
    return out


def interfaces(raw: Any) -> list[dict[str, Any]]:
    """guest-network-get-interfaces → [{interfaceName, mac, ipAddresses}] (loopback out)."""
    out = []
    for item in _items(raw):
        name = _text(item.get("name")) or ""
        mac = (_text(item.get("hardware-address")) or "").lower()
        if name == "lo" or mac in ("", "00:00:00:00:00:00"):
            continue
        ips = [
            ip for a in _items(item.get("ip-addresses"), MAX_ADDRESSES)
            if (ip := _text(a.get("ip-address")))
        ]
        out.append({"interfaceName": name, "mac": mac, "ipAddresses": ips})
    return out


def unsupported_reason(commands: list[dict[str, Any]]) -> str | None:
    """upstream's check: a required command missing or disabled → the reason; an empty
    list (no guest-info answer yet) → None, as upstream falls back to the version."""
    if not commands:
        return None
    enabled = {c["name"]: c["enabled"] for c in commands}
    if all(enabled.get(name) is True for name in REQUIRED_COMMANDS):
        return None
    return UNSUPPORTED_REASON


@dataclass
class Facts:
    """The latest answers; kept across a disconnect (as upstream's agent store)."""

    connected: bool = False
    version: str = ""
    supported_commands: list[dict[str, Any]] = field(default_factory=list)
    hostname: str = ""
    os: dict[str, str] = field(default_factory=dict)
    timezone: str = ""
    users: list[dict[str, Any]] = field(default_factory=list)
    filesystems: list[dict[str, Any]] = field(default_factory=list)
    interfaces: list[dict[str, Any]] = field(default_factory=list)
    fs_freeze_status: str = ""

    def to_json(self) -> dict[str, Any]:
        """The launcher's ``guestinfo`` answer: upstream's guestosinfo body (every user
        and filesystem, not only the first 10) plus ``connected`` and ``interfaces``."""
        return {
            "connected": self.connected,
            "guestAgentVersion": self.version,
            "supportedCommands": self.supported_commands,
            "hostname": self.hostname,
            "os": self.os,
            "timezone": self.timezone,
            "userList": self.users,
            "fsInfo": {"disks": self.filesystems},
            "fsFreezeStatus": self.fs_freeze_status,
            "interfaces": self.interfaces,
        }
