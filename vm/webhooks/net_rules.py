"""Admission rules for the pod network: an interface's ``ports`` and a pod network's
``vmNetworkCIDR`` are checked as the launcher will read them (``vm.domain.podnet``), so a
bad one is refused at ``kubectl apply`` naming the field instead of failing the VMI
later. An interface that lists no ports gets no inbound traffic here (KubeVirt forwards
every port): the launcher logs it and docs/vm.md says so, but admission stays silent, so
that kubectl prints what it prints against KubeVirt.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from vm.domain import podnet
from vm.domain.errors import DomainError
from vm.webhooks.vmi_rules import Problem


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
