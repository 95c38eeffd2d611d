"""A VMI's guest agent status from its launcher's ``guestinfo`` answer (pure).

Why it exists: upstream's virt-handler keeps the condition ``AgentConnected=True`` while
the agent's channel is connected (removed, not set False, on disconnect), adds
``AgentVersionNotSupported=True`` when the agent lacks a required command (its
``guestagent.go``), copies the guest's OS into ``status.guestOSInfo`` and merges the
guest's addresses into ``status.interfaces`` by MAC (its ``netstat``). The launcher's
answer is checked here again: it is the launcher's word, which the handler does not trust
further than its shape.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from vm import podnetwork
from vm.controller.views import Condition
from vm.launcher import agent_facts

AGENT_CONNECTED = "AgentConnected"
AGENT_UNSUPPORTED = "AgentVersionNotSupported"
MAX_GUEST_ONLY = 10
"""Guest interfaces matching no VMI interface kept at most (upstream's limit)."""


@dataclass(frozen=True)
class AgentStatus:
    conditions: tuple[Condition, ...]
    """AgentConnected / AgentVersionNotSupported to set (the others of the kind go)."""
    guest_os_info: dict[str, str] | None
    """None: leave ``status.guestOSInfo`` as it is."""
    interfaces: list[dict[str, Any]]


def _strings(value: Any, limit: int) -> list[str]:
    if not isinstance(value, list):
        return []
    return [v[:agent_facts.MAX_TEXT] for v in value[:limit] if isinstance(v, str)]


def _keep_ip(ip: str, masquerade: bool) -> bool:
    if not masquerade:
        return True
    try:
        return not ipaddress.ip_address(ip.split("%")[0]).is_link_local
    except ValueError:
        return False


def merge_interfaces(*, vmi: Mapping[str, Any], old: Sequence[Any],
                     domain: Sequence[Any], guest: Sequence[Any]) -> list[dict[str, Any]]:
    """One entry per domain interface (``name``, ``mac``, ``infoSource: domain``), with
    the guest's ``interfaceName`` and addresses when the guest has its MAC (``domain,
    guest-agent``; masquerade drops link-local addresses), then up to
    :data:`MAX_GUEST_ONLY` guest interfaces matching none (``guest-agent``). An
    interface on the pod network keeps the pod's address the VMI controller wrote (as
    upstream keeps the pod's IPv4 when the guest reports one: the guest's own address
    behind masquerade is not reachable from outside). Other keys on an entry are kept."""
    before = {str(o.get("name")): o for o in old if isinstance(o, Mapping) and o.get("name")}
    by_mac: dict[str, Mapping[str, Any]] = {}
    for g in guest:
        if isinstance(g, Mapping) and isinstance(g.get("mac"), str):
            by_mac.setdefault(g["mac"].lower(), g)
    spec = vmi.get("spec") or {}
    masq = podnetwork.masquerade_interfaces(spec)
    pod = set(podnetwork.pod_networks(spec))
    out: list[dict[str, Any]] = []
    matched: set[str] = set()
    for d in domain:
        if not isinstance(d, Mapping) or not isinstance(d.get("name"), str):
            continue
        name, mac = d["name"], str(d.get("mac") or "").lower()
        prev = dict(before.get(name) or {})
        keep_ip = name in pod and bool(prev.get("ipAddress"))
        entry = {k: v for k, v in prev.items() if k not in ("interfaceName", "infoSource")
                 and (keep_ip or k not in ("ipAddress", "ipAddresses"))}
        entry.update(name=name, mac=mac, infoSource="domain")
        g = by_mac.get(mac) if mac else None
        if g is not None:
            matched.add(mac)
            entry["infoSource"] = "domain, guest-agent"
            entry["interfaceName"] = str(g.get("interfaceName") or "")[:agent_facts.MAX_TEXT]
            ips = [ip for ip in _strings(g.get("ipAddresses"), agent_facts.MAX_ADDRESSES)
                   if _keep_ip(ip, name in masq)]
            if ips and not keep_ip:
                entry["ipAddress"], entry["ipAddresses"] = ips[0], ips
        out.append(entry)
    guest_only = 0
    for mac, g in by_mac.items():
        if mac in matched or guest_only >= MAX_GUEST_ONLY:
            continue
        guest_only += 1
        ips = _strings(g.get("ipAddresses"), agent_facts.MAX_ADDRESSES)
        entry = {"mac": mac, "infoSource": "guest-agent",
                 "interfaceName": str(g.get("interfaceName") or "")[:agent_facts.MAX_TEXT]}
        if ips:
            entry["ipAddress"], entry["ipAddresses"] = ips[0], ips
        out.append(entry)
    return out


def from_guestinfo(*, vmi: Mapping[str, Any], info: Mapping[str, Any]) -> AgentStatus:
    old = vmi.get("status") or {}
    guest = info.get("interfaces") if info.get("connected") is True else None
    domain = info.get("domainInterfaces")
    interfaces = merge_interfaces(
        vmi=vmi, old=old.get("interfaces") or [],
        domain=domain if isinstance(domain, list) else [],
        guest=guest if isinstance(guest, list) else [])
    if info.get("connected") is not True:
        return AgentStatus((), None, interfaces)
    conditions = [Condition(AGENT_CONNECTED, "True")]
    commands = info.get("supportedCommands")
    commands = [c for c in commands if isinstance(c, dict) and isinstance(c.get("name"), str)
                ] if isinstance(commands, list) else []
    reason = agent_facts.unsupported_reason(
        [{"name": c["name"], "enabled": c.get("enabled") is True} for c in commands])
    if reason is not None:
        conditions.append(Condition(AGENT_UNSUPPORTED, "True", reason))
    raw_os = info.get("os")
    os_info = {k: v[:agent_facts.MAX_TEXT] for k, v in raw_os.items()
               if k in agent_facts.OS_FIELDS.values() and isinstance(v, str)
               } if isinstance(raw_os, dict) else {}
    return AgentStatus(tuple(conditions), os_info or None, interfaces)
