"""The masquerade view of the pod network: the guest's addresses and the forwarded ports,
and the refusals that name their field (the rendered arguments are in golden/)."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from tests.vm.domain.cases import MINIMAL, options
from vm.domain.builder import build
from vm.domain.errors import DomainError
from vm.domain.model import Interface, PortForward


def _vmi(*interfaces: dict[str, Any], cidr: str | None = None) -> dict[str, Any]:
    vmi = copy.deepcopy(MINIMAL)
    pod = {"vmNetworkCIDR": cidr} if cidr else {}
    vmi["spec"]["networks"] = [{"name": i["name"], "pod": pod} for i in interfaces]
    vmi["spec"]["domain"]["devices"]["interfaces"] = list(interfaces)
    return vmi


def test_listed_ports_are_forwarded_from_the_pod_ip_to_upstreams_guest_address() -> None:
    vmi = _vmi({"name": "default", "masquerade": {}, "macAddress": "02:00:00:00:00:07",
                "ports": [{"name": "http", "port": 8080}, {"port": 5353, "protocol": "UDP"}]})
    domain = build(vmi=vmi, options=options(pod_ip="127.1.0.4", unprivileged_port_start=1024))
    assert domain.interfaces == (
        Interface(
            alias="ua-default", model="virtio-non-transitional", mac="02:00:00:00:00:07",
            network="10.0.2.0/24", gateway="10.0.2.1", guest="10.0.2.2",
            forwards=(PortForward("tcp", "127.1.0.4", 8080, 8080),
                      PortForward("udp", "127.1.0.4", 5353, 5353)),
        ),
    )


def test_vm_network_cidr_gives_its_first_host_as_gateway_and_second_to_the_guest() -> None:
    vmi = _vmi({"name": "default", "masquerade": {}}, cidr="192.168.7.0/28")
    (iface,) = build(vmi=vmi, options=options()).interfaces
    assert (iface.network, iface.gateway, iface.guest, iface.forwards) == (
        "192.168.7.0/28", "192.168.7.1", "192.168.7.2", ())


def test_the_defaulted_interface_forwards_nothing_and_needs_no_pod_ip() -> None:
    (iface,) = build(vmi=MINIMAL, options=options()).interfaces
    assert (iface.guest, iface.forwards) == ("10.0.2.2", ())


@pytest.mark.parametrize(
    ("interfaces", "opts", "field", "words"),
    [
        ([{"name": "a", "ports": [{"port": 8080}]}], {},
         "spec.domain.devices.interfaces[0].ports", "POD_IP is not set"),
        ([{"name": "a", "ports": [{"port": 22}, {"port": 30022}]}],
         {"pod_ip": "127.1.0.4", "unprivileged_port_start": 1024},
         "spec.domain.devices.interfaces[0].ports[1].port",
         "TCP port 30022 is forwarded by another port or interface already"),
        ([{"name": "a", "ports": [{"port": 22}]}],
         {"pod_ip": "127.1.0.4", "unprivileged_port_start": 40000},
         "spec.domain.devices.interfaces[0].ports[0].port",
         "22 is below this node's net.ipv4.ip_unprivileged_port_start (40000) and cannot be"
         " moved"),
        ([{"name": "a", "ports": [{"port": 8080}]}, {"name": "b", "ports": [{"port": 8080}]}],
         {"pod_ip": "127.1.0.4"},
         "spec.domain.devices.interfaces[1].ports[0].port",
         "TCP port 8080 is forwarded by another port or interface already"),
    ],
    ids=["no pod ip", "moved port taken", "privileged port unmovable", "same port twice"],
)
def test_forwards_that_cannot_be_made_are_refused_naming_the_port(
    interfaces: list[dict[str, Any]], opts: dict[str, Any], field: str, words: str
) -> None:
    with pytest.raises(DomainError) as err:
        build(vmi=_vmi(*interfaces), options=options(**opts))
    assert err.value.field == field
    assert words in err.value.message


def test_a_port_at_the_unprivileged_start_is_allowed() -> None:
    vmi = _vmi({"name": "a", "ports": [{"port": 1024}]})
    (iface,) = build(vmi=vmi, options=options(pod_ip="127.1.0.4",
                                              unprivileged_port_start=1024)).interfaces
    assert iface.forwards == (PortForward("tcp", "127.1.0.4", 1024, 1024),)


def test_a_privileged_port_is_taken_at_the_pod_ip_above_the_base() -> None:
    """The launcher cannot listen on the node's port 22; the guest's 22 is at 30022 (and
    virt-api's port-forward dials there: test_portforward)."""
    vmi = _vmi({"name": "a", "ports": [{"port": 22}, {"port": 1023, "protocol": "UDP"}]})
    (iface,) = build(vmi=vmi, options=options(pod_ip="127.1.0.4",
                                              unprivileged_port_start=1024)).interfaces
    assert iface.forwards == (PortForward("tcp", "127.1.0.4", 30022, 22),
                              PortForward("udp", "127.1.0.4", 31023, 1023))
    (root,) = build(vmi=vmi, options=options(pod_ip="127.1.0.4",
                                             unprivileged_port_start=0)).interfaces
    assert root.forwards == (PortForward("tcp", "127.1.0.4", 22, 22),
                             PortForward("udp", "127.1.0.4", 1023, 1023))
