"""Which guest ports a Service reaches, for VMIs that list no ports (pure).

Upstream's masquerade binding forwards every port of such a VMI, so a Service selecting
its launcher pod reaches any guest port. QEMU's user network forwards only the ports it
was told (``hostfwd``, no wildcard), so the node handler reads the Endpoints that name a
launcher pod's IP and asks the launcher to forward each of their ports (the control
request ``forward``, as virt-api's port-forward does). A VMI that lists ports keeps
exactly those, as upstream.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

Port = tuple[int, str]
"""(port, "tcp" | "udp")."""


def endpoint_ports(endpoints: Mapping[str, Any]) -> dict[str, set[Port]]:
    """An Endpoints object's ready addresses → the ports each is targeted on."""
    out: dict[str, set[Port]] = {}
    for subset in endpoints.get("subsets") or []:
        if not isinstance(subset, Mapping):
            continue
        ports: set[Port] = set()
        for p in subset.get("ports") or []:
            number, proto = (p or {}).get("port"), str((p or {}).get("protocol") or "TCP")
            if isinstance(number, int) and not isinstance(number, bool) \
                    and 1 <= number <= 65535 and proto in ("TCP", "UDP"):
                ports.add((number, proto.lower()))
        for address in subset.get("addresses") or []:
            ip = (address or {}).get("ip")
            if isinstance(ip, str) and ip and ports:
                out.setdefault(ip, set()).update(ports)
    return out


def lists_ports(vmi: Mapping[str, Any]) -> bool:
    devices = ((vmi.get("spec") or {}).get("domain") or {}).get("devices") or {}
    interfaces = devices.get("interfaces") or []
    first = interfaces[0] if interfaces and isinstance(interfaces[0], Mapping) else {}
    return bool(first.get("ports"))


def pod_ip(vmi: Mapping[str, Any]) -> str | None:
    interfaces = (vmi.get("status") or {}).get("interfaces") or []
    ip = (interfaces[0] or {}).get("ipAddress") if interfaces else None
    return ip if isinstance(ip, str) and ip else None


def wanted(vmi: Mapping[str, Any], by_endpoints: Iterable[Mapping[str, set[Port]]],
           done: set[Port]) -> list[Port]:
    """The ports still to forward for ``vmi``: those Services target on its pod IP, when
    it lists no ports, less those forwarded already."""
    ip = pod_ip(vmi)
    if ip is None or lists_ports(vmi):
        return []
    ports: set[Port] = set()
    for mapping in by_endpoints:
        ports |= mapping.get(ip, set())
    return sorted(ports - done)
