"""The VMI's guest agent status from a launcher's guestinfo answer (upstream's rules)."""

from __future__ import annotations

from typing import Any

import pytest

from vm import podnetwork
from vm.controller.views import Condition
from vm.handler.guestagent import from_guestinfo, merge_interfaces
from vm.launcher.agent_facts import REQUIRED_COMMANDS
from vm.vmi.lifecycle import interfaces, keep_handler_fields

MAC = "02:aa:bb:cc:dd:ee"
VMI: dict[str, Any] = {
    "metadata": {"uid": "u1"},
    "spec": {"networks": [{"name": "default", "pod": {}}],
             "domain": {"devices": {"interfaces": [{"name": "default", "masquerade": {}}]}}},
    "status": {"interfaces": [{"name": "default", "ipAddress": "10.244.0.7",
                               "ipAddresses": ["10.244.0.7"], "infoSource": "domain"}]},
}
ALL = [{"name": n, "enabled": True} for n in REQUIRED_COMMANDS]


def info(**over: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "connected": True, "supportedCommands": ALL,
        "os": {"id": "debian", "versionId": "12", "evil": "x", "name": ["no"]},
        "interfaces": [
            {"interfaceName": "enp1s0", "mac": MAC.upper(),
             "ipAddresses": ["10.0.2.2", "fe80::1", "fd10::2"]},
            *({"interfaceName": f"dummy{i}", "mac": f"02:00:00:00:00:{i:02x}",
               "ipAddresses": []} for i in range(15)),
        ],
        "domainInterfaces": [{"name": "default", "mac": MAC}],
    }
    body.update(over)
    return body


def test_connected_agent_sets_the_condition_os_info_and_interfaces() -> None:
    got = from_guestinfo(vmi=VMI, info=info())
    assert got.conditions == (Condition("AgentConnected", "True"),)
    assert got.guest_os_info == {"id": "debian", "versionId": "12"}
    primary, *guest_only = got.interfaces
    assert primary == {"name": "default", "mac": MAC, "infoSource": "domain, guest-agent",
                       "interfaceName": "enp1s0", "ipAddress": "10.244.0.7",
                       "ipAddresses": ["10.244.0.7"]}
    assert len(guest_only) == 10  # upstream's limit
    assert guest_only[0] == {"mac": "02:00:00:00:00:00", "infoSource": "guest-agent",
                             "interfaceName": "dummy0"}


def test_a_missing_required_command_is_upstreams_unsupported_condition() -> None:
    commands = [c if c["name"] != "guest-get-users" else {**c, "enabled": False} for c in ALL]
    got = from_guestinfo(vmi=VMI, info=info(supportedCommands=commands))
    assert got.conditions[1] == Condition(
        "AgentVersionNotSupported", "True",
        "This guest agent doesn't support required basic commands")


def test_no_agent_means_no_condition_no_os_info_and_domain_only_interfaces() -> None:
    got = from_guestinfo(vmi=VMI, info=info(connected=False))
    assert got.conditions == ()
    assert got.guest_os_info is None
    assert got.interfaces == [{"name": "default", "mac": MAC, "infoSource": "domain",
                               "ipAddress": "10.244.0.7", "ipAddresses": ["10.244.0.7"]}]


def test_off_the_pod_network_the_guest_addresses_are_reported_without_link_local() -> None:
    vmi = {"spec": {"domain": {"devices": {"interfaces": [{"name": "b", "masquerade": {}}]}}}}
    [entry] = merge_interfaces(vmi=vmi, old=[], domain=[{"name": "b", "mac": MAC}],
                               guest=[{"mac": MAC, "interfaceName": "eth0",
                                       "ipAddresses": ["fe80::1", "192.0.2.5", 7]}])
    assert entry["ipAddresses"] == ["192.0.2.5"] and entry["ipAddress"] == "192.0.2.5"


def test_hostile_answers_change_nothing_they_should_not() -> None:
    for bad in ({}, {"connected": "yes"}, {"connected": True, "interfaces": "x",
                                           "domainInterfaces": {"a": 1}, "os": "debian",
                                           "supportedCommands": [1, {"name": 2}]}):
        got = from_guestinfo(vmi=VMI, info=bad)
        assert got.guest_os_info is None
        assert got.interfaces == []


def test_the_vmi_controller_keeps_what_the_handler_added_and_they_agree() -> None:
    handler = from_guestinfo(vmi=VMI, info=info()).interfaces
    again = keep_handler_fields(interfaces(VMI["spec"], "10.244.0.7"), handler)
    assert again == handler  # no tug of war between the two writers
    moved = keep_handler_fields(interfaces(VMI["spec"], "10.244.0.9"), handler)
    assert moved[0]["ipAddress"] == "10.244.0.9" and moved[0]["interfaceName"] == "enp1s0"


DEFAULTED: dict[str, Any] = {"domain": {"devices": {}}}  # upstream defaults the pod network
NO_AGENT = {"connected": False, "domainInterfaces": [{"name": "default", "mac": MAC}]}


@pytest.mark.parametrize("spec", [VMI["spec"], DEFAULTED], ids=["declared", "defaulted"])
@pytest.mark.parametrize("answer", [info(), NO_AGENT], ids=["agent", "no-agent"])
def test_the_two_writers_of_status_interfaces_reach_a_fixed_point(
        spec: dict[str, Any], answer: dict[str, Any]) -> None:
    """The VMI controller (the pod's address) and the node handler (the domain's and the
    agent's view) write ``status.interfaces`` in turn, as each reacts to the other's write:
    after one round neither changes it, and the pod network's interface keeps the pod's
    address. A VMI that declares no network once flipped the address away and back
    several times a second for as long as it ran (the handler did not know upstream's
    defaulted pod network)."""
    status: dict[str, Any] = {}
    writes = []
    for _ in range(3):
        status["interfaces"] = keep_handler_fields(interfaces(spec, "10.244.0.7"),
                                                   status.get("interfaces") or [])
        writes.append(status["interfaces"])
        vmi = {"metadata": {"uid": "u1"}, "spec": spec, "status": status}
        status["interfaces"] = from_guestinfo(vmi=vmi, info=answer).interfaces
        writes.append(status["interfaces"])
    assert all(w == writes[1] for w in writes[1:]), writes
    [pod] = [i for i in writes[-1] if i.get("name") == "default"]
    assert (pod["ipAddress"], pod["ipAddresses"]) == ("10.244.0.7", ["10.244.0.7"])
    assert pod["mac"] == MAC


@pytest.mark.parametrize(("spec", "networks", "masquerade"), [
    ({}, ["default"], {"default"}),
    (DEFAULTED, ["default"], {"default"}),
    ({"domain": {"devices": {"autoattachPodInterface": False}}}, [], set()),
    (VMI["spec"], ["default"], {"default"}),
    ({"networks": [{"name": "p", "pod": {}}, {"name": "m", "multus": {}},
                   {"name": "x", "pod": None}],
      "domain": {"devices": {"interfaces": [{"name": "p", "masquerade": {}},
                                            {"name": "m", "bridge": {}}]}}},
     ["p"], {"p"}),
    ({"networks": [], "domain": {"devices": {"interfaces": [{"name": "a", "bridge": {}}]}}},
     [], set()),
])
def test_the_pod_network_as_upstream_defaults_it(
        spec: dict[str, Any], networks: list[str], masquerade: set[str]) -> None:
    assert podnetwork.pod_networks(spec) == networks
    assert podnetwork.masquerade_interfaces(spec) == masquerade
