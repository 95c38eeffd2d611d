"""The pod network's masquerade view of one interface: the guest's subnet and the ports
to forward, read from the VMI (pure, every refusal naming its field).

Why it exists: upstream's masquerade binding gives the guest ``vmNetworkCIDR``'s second
address (default 10.0.2.2/24, gateway 10.0.2.1) and DNATs inbound traffic on the pod IP
to it: the interface's ``ports`` only, or every port when none are listed. QEMU's user
network (libslirp) can give the same addresses and forward single ports; these are the
checked facts both renderers spell.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from typing import Any, Literal

from vm.domain.errors import DomainError

Protocol = Literal["tcp", "udp"]
DEFAULT_CIDR = "10.0.2.0/24"  # upstream's default vmNetworkCIDR
PROTOCOLS: dict[str, Protocol] = {"TCP": "tcp", "UDP": "udp"}


@dataclass(frozen=True)
class PortSpec:
    protocol: Protocol
    port: int


@dataclass(frozen=True)
class Subnet:
    """The guest's side of the NAT: its network, the gateway (first host) and the guest
    (second host), as upstream's masquerade addresses."""

    network: str
    gateway: str
    guest: str


DEFAULT = Subnet(network=DEFAULT_CIDR, gateway="10.0.2.1", guest="10.0.2.2")

PRIVILEGED_PORT_BASE = 30000
"""A guest port the node keeps for privileged programs is taken at the pod IP on this
base plus the port (22 at 30022)."""


def node_port(port: int, unprivileged_start: int) -> int:
    """Where the pod IP takes the guest's ``port``: that port, or one below the node's
    ``net.ipv4.ip_unprivileged_port_start`` moved to ``PRIVILEGED_PORT_BASE + port``.

    On a real cluster each pod has a network namespace of its own, where the container
    runtime lets any user listen on any port (containerd's ``enable_unprivileged_ports``)
    and a DNAT sends the pod IP's port 22 to the guest's. localcluster's pods share the
    node's network: its launcher (uid 107, no capabilities) can listen on the pod IP's
    unprivileged ports only. virt-api's port-forward (``rootdisk ssh``) dials the moved
    port, so users still ask for port 22."""
    return port if port >= unprivileged_start else PRIVILEGED_PORT_BASE + port


def subnet(cidr: Any, field: str) -> Subnet:
    if cidr is None or cidr == "":
        cidr = DEFAULT_CIDR
    if not isinstance(cidr, str):
        raise DomainError(field, "must be a string")
    try:
        net = ipaddress.ip_network(cidr, strict=True)
    except ValueError as err:
        raise DomainError(field, f"not a valid CIDR: {err}") from err
    if not isinstance(net, ipaddress.IPv4Network):
        raise DomainError(field, "must be an IPv4 CIDR")
    if net.prefixlen > 29:
        # gateway, guest and QEMU's DNS address (the third host) must fit
        raise DomainError(field, f"{cidr} is too small: the prefix must be at most /29")
    return Subnet(network=str(net), gateway=str(net[1]), guest=str(net[2]))


def ports(raw: Any, field: str) -> tuple[PortSpec, ...]:
    """An interface's ``ports``: port 1-65535 (required), protocol TCP (default) or UDP."""
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise DomainError(field, "must be a list")
    result: list[PortSpec] = []
    for i, item in enumerate(raw):
        here = f"{field}[{i}]"
        if not isinstance(item, dict):
            raise DomainError(here, "must be an object")
        port = item.get("port")
        if isinstance(port, bool) or not isinstance(port, int):
            raise DomainError(f"{here}.port", "must be an integer")
        if not 1 <= port <= 65535:
            raise DomainError(f"{here}.port", f"must be between 1 and 65535, got {port}")
        proto = item.get("protocol", "TCP")
        if proto not in PROTOCOLS:
            raise DomainError(f"{here}.protocol", f"must be TCP or UDP, got {str(proto)[:20]!r}")
        spec = PortSpec(protocol=PROTOCOLS[proto], port=port)
        if spec in result:
            raise DomainError(f"{here}.port", f"{proto} port {port} is listed twice")
        result.append(spec)
    return tuple(result)
