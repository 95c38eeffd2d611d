"""Interfaces on the pod network.

Upstream binds the pod network with masquerade (NAT behind the pod's IP) through a tap
device; that needs CAP_NET_ADMIN in the pod. This runtime gives the same guest view with
QEMU's user-mode network (libslirp), which needs no privilege: one NIC, outbound NAT,
DHCP giving upstream's addresses (``vmNetworkCIDR``'s second host, default 10.0.2.2/24,
gateway 10.0.2.1), and the interface's listed ``ports`` forwarded from the pod IP to the
guest's same port (a port below the node's unprivileged start at ``podnet.node_port``).
Upstream forwards every port when none are listed; libslirp can only
forward single ports it listens on, so here an interface without ``ports`` gets no
inbound traffic (see docs/vm.md). Option ROMs are left out (no PXE boot: a ``bootOrder``
on an interface is refused when the VMI is parsed).
"""

from __future__ import annotations

import dataclasses
import hashlib

from vm.domain import podnet
from vm.domain.errors import DomainError
from vm.domain.model import Domain, Interface, PortForward
from vm.domain.options import BuildOptions
from vm.domain.vmi import InterfaceSpec, VmiSpec

MODELS = {
    "virtio": "virtio-non-transitional",
    "e1000": "e1000",
    "e1000e": "e1000e",
    "rtl8139": "rtl8139",
}


def default_mac(*, seed: str, name: str) -> str:
    """A stable, locally administered unicast MAC for an interface without one."""
    digest = hashlib.sha256(f"{seed}/{name}".encode()).digest()
    return ":".join(f"{b:02x}" for b in (0x02, *digest[:5]))


def _forwards(
    spec: InterfaceSpec, index: int, options: BuildOptions, taken: set[tuple[str, int]]
) -> tuple[PortForward, ...]:
    field = f"spec.domain.devices.interfaces[{index}].ports"
    pod_ip = options.pod_ip or ""
    if spec.ports and not pod_ip:
        raise DomainError(field, "the pod IP is not known (POD_IP is not set): nowhere to "
                          "forward the ports from")
    result = []
    for i, port in enumerate(spec.ports):
        at = podnet.node_port(port.port, options.unprivileged_port_start)
        if at < options.unprivileged_port_start or at > 65535:
            raise DomainError(
                f"{field}[{i}].port",
                f"{port.port} is below this node's net.ipv4.ip_unprivileged_port_start "
                f"({options.unprivileged_port_start}) and cannot be moved to a port the "
                "launcher (uid 107, no capabilities, on the node's network) may listen on",
            )
        if (port.protocol, at) in taken:
            moved = f" (taken at {at})" if at != port.port else ""
            raise DomainError(f"{field}[{i}].port",
                              f"{port.protocol.upper()} port {port.port}{moved} is forwarded "
                              "by another port or interface already")
        taken.add((port.protocol, at))
        result.append(PortForward(protocol=port.protocol, address=pod_ip, port=at,
                                  guest_port=port.port))
    return tuple(result)


def on_demand(iface: Interface, *, protocol: str, guest_port: int, pod_ip: str,
              unprivileged_start: int, taken: tuple[PortForward, ...] = ()) -> PortForward:
    """The forward of ``guest_port`` asked for after the start (virt-api's port-forward
    of a port the VMI does not list): the one there is, or a new one where a listed port
    would be, when the interface lists no ports (upstream then forwards every port);
    refused, naming why, when it lists some (upstream forwards only those)."""
    for f in (*iface.forwards, *taken):
        if f.protocol == protocol and f.guest_port == guest_port:
            return f
    if not iface.all_ports:
        raise DomainError("spec.domain.devices.interfaces[0].ports",
                          f"{protocol.upper()} port {guest_port} is not listed: only the"
                          " listed ports reach the guest")
    if not pod_ip:
        raise DomainError("POD_IP", "the pod IP is not known: nowhere to forward from")
    if protocol not in ("tcp", "udp") or not 1 <= guest_port <= 65535:
        raise DomainError("port", f"not a TCP or UDP port: {protocol}/{guest_port}")
    at = podnet.node_port(guest_port, unprivileged_start)
    if at > 65535 or any(f.protocol == protocol and f.port == at
                         for f in (*iface.forwards, *taken)):
        raise DomainError("port", f"{protocol.upper()} port {guest_port} cannot be taken at"
                          f" {at} on the pod IP")
    return PortForward(protocol=protocol, address=pod_ip, port=at,  # type: ignore[arg-type]
                       guest_port=guest_port)


MAX_INTERFACES = 4  # each takes a pcie.0 slot of its own (render_qemu.NIC_SLOT)


def configure(*, vmi: VmiSpec, options: BuildOptions, domain: Domain) -> Domain:
    if len(vmi.interfaces) > MAX_INTERFACES:
        raise DomainError("spec.domain.devices.interfaces",
                          f"at most {MAX_INTERFACES} interfaces on the pod network are supported")
    seed = options.mac_seed or vmi.uid
    taken: set[tuple[str, int]] = set()
    interfaces = tuple(
        Interface(
            alias=f"ua-{spec.name}",
            model=MODELS[spec.model],
            mac=(spec.mac or default_mac(seed=seed, name=spec.name)).lower(),
            network=spec.subnet.network,
            gateway=spec.subnet.gateway,
            guest=spec.subnet.guest,
            forwards=_forwards(spec, i, options, taken),
            all_ports=spec.all_ports,
        )
        for i, spec in enumerate(vmi.interfaces)
    )
    return dataclasses.replace(domain, interfaces=interfaces)
