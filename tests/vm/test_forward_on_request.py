"""The decisions behind forwarding a guest port on request (pure): which VMIs get it
(those that list no ports, as upstream forwards every port then) and where the forward
goes; the launcher's request shape."""

from __future__ import annotations

from typing import Any

import pytest

from vm.api.portforward import forwarded_on_request
from vm.domain.configurators.network import on_demand
from vm.domain.errors import DomainError
from vm.domain.model import Interface, PortForward
from vm.handler import forwards
from vm.launcher import protocol

OPEN = Interface(alias="ua-default", model="virtio", all_ports=True)
LISTED = Interface(alias="ua-default", model="virtio", all_ports=False,
                   forwards=(PortForward("tcp", "127.9.0.2", 8080, 8080),))


def _vmi(interfaces: list[dict[str, Any]] | None) -> dict[str, Any]:
    devices = {} if interfaces is None else {"interfaces": interfaces}
    return {"spec": {"domain": {"devices": devices}}}


@pytest.mark.parametrize(("vmi", "expected"), [
    (_vmi(None), True),  # upstream's defaulted interface lists nothing
    (_vmi([{"name": "default", "masquerade": {}}]), True),
    (_vmi([{"name": "default", "masquerade": {}, "ports": []}]), True),
    (_vmi([{"name": "default", "masquerade": {}, "ports": [{"port": 22}]}]), False),
    ({}, True),
])
def test_which_vmis_forward_on_request(vmi: dict[str, Any], expected: bool) -> None:
    assert forwarded_on_request(vmi) is expected


def test_where_the_forward_goes() -> None:
    assert on_demand(OPEN, protocol="tcp", guest_port=8081, pod_ip="127.9.0.2",
                     unprivileged_start=1024) == PortForward("tcp", "127.9.0.2", 8081, 8081)
    # a privileged port is taken where a listed one would be (podnet.node_port)
    assert on_demand(OPEN, protocol="tcp", guest_port=22, pod_ip="127.9.0.2",
                     unprivileged_start=1024).port == 30022
    # one there already is the answer
    there = PortForward("udp", "127.9.0.2", 5353, 5353)
    assert on_demand(OPEN, protocol="udp", guest_port=5353, pod_ip="127.9.0.2",
                     unprivileged_start=1024, taken=(there,)) is there
    assert on_demand(LISTED, protocol="tcp", guest_port=8080, pod_ip="127.9.0.2",
                     unprivileged_start=1024) == LISTED.forwards[0]


@pytest.mark.parametrize(("iface", "kwargs", "words"), [
    (LISTED, {"guest_port": 8081}, "TCP port 8081 is not listed: only the listed ports"),
    (OPEN, {"guest_port": 8081, "pod_ip": ""}, "the pod IP is not known"),
    (OPEN, {"guest_port": 80, "unprivileged_start": 1024,
            "taken": (PortForward("tcp", "127.9.0.2", 30080, 8),)}, "cannot be taken at 30080"),
])
def test_refusals(iface: Interface, kwargs: dict[str, Any], words: str) -> None:
    args: dict[str, Any] = {"protocol": "tcp", "pod_ip": "127.9.0.2", "unprivileged_start": 0,
                            **kwargs}
    with pytest.raises(DomainError, match=words):
        on_demand(iface, **args)


@pytest.mark.parametrize(("body", "parsed"), [
    ({"port": 22}, protocol.Request(cmd="forward", forward=protocol.ForwardRequest(22))),
    ({"port": 53, "protocol": "udp"},
     protocol.Request(cmd="forward", forward=protocol.ForwardRequest(53, "udp"))),
    ({"port": 0}, protocol.BadRequest("port: must be a port number from 1 to 65535")),
    ({"port": "22"}, protocol.BadRequest("port: must be a port number from 1 to 65535")),
    ({"port": 22, "protocol": "sctp"}, protocol.BadRequest("protocol: must be tcp or udp")),
])
def test_forward_requests(body: dict[str, Any], parsed: object) -> None:
    assert protocol.parse_request(line=protocol.encode({"cmd": "forward", **body})) == parsed


ENDPOINTS = {"subsets": [
    {"addresses": [{"ip": "127.9.0.2"}, {"ip": "127.9.0.3"}],
     "notReadyAddresses": [{"ip": "127.9.0.4"}],
     "ports": [{"port": 8080, "protocol": "TCP"}, {"port": 53, "protocol": "UDP"},
               {"port": 9, "protocol": "SCTP"}, {"port": 0}]},
    {"addresses": [{"ip": "127.9.0.2"}], "ports": [{"name": "ssh", "port": 22}]},
]}


def _running(ports: list[dict[str, Any]] | None, ip: str | None = "127.9.0.2") -> dict[str, Any]:
    iface: dict[str, Any] = {"name": "default", "masquerade": {}}
    if ports is not None:
        iface["ports"] = ports
    return {"spec": {"domain": {"devices": {"interfaces": [iface]}}},
            "status": {"interfaces": [{"ipAddress": ip}] if ip else []}}


def test_the_ports_services_target() -> None:
    assert forwards.endpoint_ports(ENDPOINTS) == {
        "127.9.0.2": {(8080, "tcp"), (53, "udp"), (22, "tcp")},
        "127.9.0.3": {(8080, "tcp"), (53, "udp")}}  # not-ready addresses: none yet


def test_what_a_vmi_gets_forwarded_for_services() -> None:
    seen = [forwards.endpoint_ports(ENDPOINTS)]
    assert forwards.wanted(_running(None), seen, set()) == [
        (22, "tcp"), (53, "udp"), (8080, "tcp")]
    assert forwards.wanted(_running(None), seen, {(22, "tcp"), (53, "udp")}) == [(8080, "tcp")]
    assert forwards.wanted(_running([{"port": 22}]), seen, set()) == []  # lists its own
    assert forwards.wanted(_running(None, ip=None), seen, set()) == []
    assert forwards.wanted(_running(None, ip="127.9.0.9"), seen, set()) == []
