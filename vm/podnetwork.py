"""A VMI's pod network as upstream defaults it (pure).

Upstream's mutating webhook gives a VMI with neither ``spec.networks`` nor interfaces one
interface ``default`` on the pod network with the masquerade binding, unless
``spec.domain.devices.autoattachPodInterface`` is false. Here the VMI is not mutated, so
whoever reads its networks reads them through these functions: the VMI controller (the
pod's address in ``status.interfaces``), the node handler (which interface keeps that
address when the guest agent reports its own) and the probe rules. Two readers that
disagreed once rewrote ``status.interfaces`` against each other several times a second
for as long as such a VM ran.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

DEFAULT = "default"


def _devices(spec: Mapping[str, Any]) -> Mapping[str, Any]:
    domain = spec.get("domain")
    devices = domain.get("devices") if isinstance(domain, Mapping) else None
    return devices if isinstance(devices, Mapping) else {}


def defaulted(spec: Mapping[str, Any]) -> bool:
    """Whether ``spec`` gets upstream's default pod network and interface."""
    devices = _devices(spec)
    return (not spec.get("networks") and not devices.get("interfaces")
            and devices.get("autoattachPodInterface", True) is not False)


def pod_networks(spec: Mapping[str, Any]) -> list[str]:
    """The names of ``spec``'s networks on the pod network, in order (``default`` when
    defaulted)."""
    if defaulted(spec):
        return [DEFAULT]
    networks = spec.get("networks")
    return [str(n.get("name") or DEFAULT) for n in networks or []
            if isinstance(n, Mapping) and n.get("pod") is not None]


def masquerade_interfaces(spec: Mapping[str, Any]) -> set[str]:
    """The names of ``spec``'s interfaces with the masquerade binding (``default`` when
    defaulted)."""
    if defaulted(spec):
        return {DEFAULT}
    interfaces = _devices(spec).get("interfaces")
    return {str(i.get("name")) for i in interfaces or []
            if isinstance(i, Mapping) and "masquerade" in i}
