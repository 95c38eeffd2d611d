"""Admission rules for the pod network: an interface's ``ports`` and a pod network's
``vmNetworkCIDR`` are checked as the launcher will read them (``vm.domain.podnet``), so a
bad one is refused at ``kubectl apply`` naming the field instead of failing the VMI
later; and an interface that lists no ports gets a warning, since rootdisk then forwards
no inbound traffic to the guest where KubeVirt forwards every port (docs/vm.md).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from vm.domain import podnet
from vm.domain.errors import DomainError
from vm.webhooks.vmi_rules import Problem

NO_PORTS = ("no ports listed: rootdisk forwards no inbound traffic to the guest (KubeVirt "
            "forwards every port); list the ports the guest serves, 1024 or above")


def _devices(spec: Mapping[str, Any]) -> Mapping[str, Any]:
    domain = spec.get("domain")
    devices = domain.get("devices") if isinstance(domain, Mapping) else None
    return devices if isinstance(devices, Mapping) else {}


def network_problems(spec: Any, *, at: str = "spec") -> list[Problem]:
    if not isinstance(spec, Mapping):
        return []
    out: list[Problem] = []
    for i, net in enumerate(spec.get("networks") or []):
        pod = net.get("pod") if isinstance(net, Mapping) else None
        if isinstance(pod, Mapping):
            field = f"{at}.networks[{i}].pod.vmNetworkCIDR"
            try:
                podnet.subnet(pod.get("vmNetworkCIDR"), field)
            except DomainError as err:
                out.append(Problem(err.field, err.message))
    interfaces = _devices(spec).get("interfaces")
    for i, iface in enumerate(interfaces if isinstance(interfaces, list) else []):
        if isinstance(iface, Mapping):
            field = f"{at}.domain.devices.interfaces[{i}].ports"
            try:
                podnet.ports(iface.get("ports"), field)
            except DomainError as err:
                out.append(Problem(err.field, err.message))
    return out


def network_warnings(spec: Any, *, at: str = "spec") -> list[str]:
    if not isinstance(spec, Mapping):
        return []
    devices = _devices(spec)
    interfaces = devices.get("interfaces")
    if not interfaces:
        if spec.get("networks") or devices.get("autoattachPodInterface", True) is False:
            return []
        return [f"{at}.domain.devices.interfaces: the default pod interface: {NO_PORTS}"]
    pod_networks = {n.get("name") for n in spec.get("networks") or []
                    if isinstance(n, Mapping) and "pod" in n}
    return [f"{at}.domain.devices.interfaces[{i}].ports: {NO_PORTS}"
            for i, iface in enumerate(interfaces if isinstance(interfaces, list) else [])
            if isinstance(iface, Mapping) and iface.get("name") in pod_networks
            and not iface.get("ports")]
