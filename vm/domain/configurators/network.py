"""Interfaces on the pod network.

Upstream binds the pod network with masquerade (NAT behind the pod's IP) through a tap
device; that needs CAP_NET_ADMIN in the pod. This runtime gives the same guest view (one
NIC, outbound NAT, DHCP) with QEMU's user-mode network, which needs no privilege. Option ROMs are
left out (no PXE boot: a ``bootOrder`` on an interface is refused when the VMI is parsed).
"""

from __future__ import annotations

import dataclasses
import hashlib

from vm.domain.model import Domain, Interface
from vm.domain.options import BuildOptions
from vm.domain.vmi import VmiSpec

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


def configure(*, vmi: VmiSpec, options: BuildOptions, domain: Domain) -> Domain:
    seed = options.mac_seed or vmi.uid
    interfaces = tuple(
        Interface(
            alias=f"ua-{spec.name}",
            model=MODELS[spec.model],
            mac=(spec.mac or default_mac(seed=seed, name=spec.name)).lower(),
        )
        for spec in vmi.interfaces
    )
    return dataclasses.replace(domain, interfaces=interfaces)
