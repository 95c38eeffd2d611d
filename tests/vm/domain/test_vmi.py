"""The VMI view: defaults as upstream, and every bad field refused with its path."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest

from tests.vm.domain.cases import FULL, MINIMAL
from vm.domain.errors import DomainError, UnsupportedError
from vm.domain.vmi import DiskSpec, InterfaceSpec, parse_vmi


def test_defaults_follow_upstream() -> None:
    spec = parse_vmi(MINIMAL)
    assert spec.domain_name == "ns1_vm1"
    assert spec.memory_bytes == 128 * 1024 * 1024
    assert spec.disks == (
        DiskSpec(
            name="root",
            kind="disk",
            bus="sata",
            boot_order=None,
            cache=None,
            read_only=False,
            serial=None,
        ),
    )
    assert spec.interfaces == (InterfaceSpec(name="default", model="virtio", mac=None),)
    assert (spec.acpi, spec.efi, spec.smm, spec.rng, spec.serial_console) == (
        True,
        False,
        False,
        False,
        True,
    )
    assert spec.grace_period_seconds == 30
    assert spec.vcpus == 1


def test_guest_memory_wins_over_the_request() -> None:
    vmi = copy.deepcopy(MINIMAL)
    vmi["spec"]["domain"]["memory"] = {"guest": "1Gi"}
    assert parse_vmi(vmi).memory_bytes == 1024**3


def test_full_case_topology_and_kinds() -> None:
    spec = parse_vmi(FULL)
    assert spec.vcpus == 4
    assert [d.kind for d in spec.disks] == ["disk", "disk", "cdrom", "disk"]
    assert spec.disks[2].read_only is True


Mutation = Callable[[dict[str, Any]], None]


def _disk(v: dict[str, Any]) -> dict[str, Any]:
    return v["spec"]["domain"]["devices"]["disks"][0]


def _with_ports(ports: Any, cidr: str | None) -> Mutation:
    def mutate(v: dict[str, Any]) -> None:
        v["spec"].update(networks=[{"name": "n", "pod": {"vmNetworkCIDR": cidr}}])
        v["spec"]["domain"]["devices"].update(
            interfaces=[{"name": "n", "masquerade": {}, "ports": ports}])
    return mutate


BAD: list[tuple[str, Mutation, str, type[DomainError]]] = [
    (
        "no memory",
        lambda v: v["spec"]["domain"].pop("resources"),
        "spec.domain.resources.requests.memory",
        DomainError,
    ),
    (
        "tiny memory",
        lambda v: v["spec"]["domain"]["resources"]["requests"].update(memory="1k"),
        "spec.domain.resources.requests.memory",
        DomainError,
    ),
    (
        "bad quantity",
        lambda v: v["spec"]["domain"]["resources"]["requests"].update(memory="1 Gi"),
        "spec.domain.resources.requests.memory",
        DomainError,
    ),
    (
        "ide bus",
        lambda v: _disk(v).update(disk={"bus": "ide"}),
        "spec.domain.devices.disks[0].disk.bus",
        DomainError,
    ),
    (
        "virtio cdrom",
        lambda v: (_disk(v).pop("disk", None), _disk(v).update(cdrom={"bus": "virtio"})),
        "spec.domain.devices.disks[0].cdrom.bus",
        DomainError,
    ),
    (
        "two kinds",
        lambda v: _disk(v).update(disk={}, cdrom={}),
        "spec.domain.devices.disks[0]",
        DomainError,
    ),
    (
        "lun",
        lambda v: _disk(v).update(lun={}),
        "spec.domain.devices.disks[0].lun",
        UnsupportedError,
    ),
    (
        "disk without volume",
        lambda v: v["spec"]["volumes"][0].update(name="zzz"),
        "spec.domain.devices.disks[0].name",
        DomainError,
    ),
    (
        "traversal name",
        lambda v: (
            _disk(v).update(name="../../etc"),
            v["spec"]["volumes"][0].update(name="../../etc"),
        ),
        "spec.domain.devices.disks[0].name",
        DomainError,
    ),
    (
        "duplicate disk",
        lambda v: v["spec"]["domain"]["devices"]["disks"].append({"name": "root"}),
        "spec.domain.devices.disks",
        DomainError,
    ),
    (
        "duplicate bootOrder",
        lambda v: (
            _disk(v).update(bootOrder=1),
            v["spec"]["domain"]["devices"]["disks"].append({"name": "b", "bootOrder": 1}),
            v["spec"]["volumes"].append({"name": "b", "dataVolume": {"name": "dv"}}),
        ),
        "spec.domain.devices.disks",
        DomainError,
    ),
    (
        "two sources",
        lambda v: v["spec"]["volumes"][0].update(dataVolume={"name": "x"}),
        "spec.volumes[0]",
        DomainError,
    ),
    (
        "hostDisk",
        lambda v: v["spec"]["volumes"].__setitem__(
            0, {"name": "root", "hostDisk": {"path": "/x"}}
        ),
        "spec.volumes[0].hostDisk",
        UnsupportedError,
    ),
    (
        "containerDisk without image",
        lambda v: v["spec"]["volumes"].__setitem__(0, {"name": "root", "containerDisk": {}}),
        "spec.volumes[0].containerDisk.image",
        DomainError,
    ),
    (
        "bad cache",
        lambda v: _disk(v).update(cache="unsafe"),
        "spec.domain.devices.disks[0].cache",
        DomainError,
    ),
    (
        "bios and efi",
        lambda v: v["spec"]["domain"].update(firmware={"bootloader": {"bios": {}, "efi": {}}}),
        "spec.domain.firmware.bootloader",
        DomainError,
    ),
    (
        "secure boot without smm",
        lambda v: v["spec"]["domain"].update(
            firmware={"bootloader": {"efi": {"secureBoot": True}}},
            features={"smm": {"enabled": False}},
        ),
        "spec.domain.features.smm",
        DomainError,
    ),
    (
        "pc machine",
        lambda v: v["spec"]["domain"].update(machine={"type": "pc"}),
        "spec.domain.machine.type",
        UnsupportedError,
    ),
    (
        "cores not int",
        lambda v: v["spec"]["domain"].update(cpu={"cores": "2"}),
        "spec.domain.cpu.cores",
        DomainError,
    ),
    (
        "bridge binding",
        lambda v: (
            v["spec"].update(networks=[{"name": "n", "pod": {}}]),
            v["spec"]["domain"]["devices"].update(interfaces=[{"name": "n", "bridge": {}}]),
        ),
        "spec.domain.devices.interfaces[0].bridge",
        UnsupportedError,
    ),
    (
        "pxe boot",
        lambda v: (
            v["spec"].update(networks=[{"name": "n", "pod": {}}]),
            v["spec"]["domain"]["devices"].update(interfaces=[{"name": "n", "bootOrder": 1}]),
        ),
        "spec.domain.devices.interfaces[0].bootOrder",
        UnsupportedError,
    ),
    (
        "bad mac",
        lambda v: (
            v["spec"].update(networks=[{"name": "n", "pod": {}}]),
            v["spec"]["domain"]["devices"].update(interfaces=[{"name": "n", "macAddress": "zz"}]),
        ),
        "spec.domain.devices.interfaces[0].macAddress",
        DomainError,
    ),
    *(
        (
            case,
            _with_ports(ports, cidr),
            field,
            DomainError,
        )
        for case, ports, cidr, field in (
            ("port zero", [{"port": 0}], None, "spec.domain.devices.interfaces[0].ports[0].port"),
            ("port too big", [{"port": 70000}], None,
             "spec.domain.devices.interfaces[0].ports[0].port"),
            ("port missing", [{"name": "x"}], None,
             "spec.domain.devices.interfaces[0].ports[0].port"),
            ("port as string", [{"port": "22"}], None,
             "spec.domain.devices.interfaces[0].ports[0].port"),
            ("sctp port", [{"port": 22, "protocol": "SCTP"}], None,
             "spec.domain.devices.interfaces[0].ports[0].protocol"),
            ("port twice", [{"port": 8080}, {"port": 8080, "protocol": "TCP"}], None,
             "spec.domain.devices.interfaces[0].ports[1].port"),
            ("ports not a list", {"port": 22}, None, "spec.domain.devices.interfaces[0].ports"),
            ("cidr not cidr", [], "10.0.2.0/33", "spec.networks[0].pod.vmNetworkCIDR"),
            ("cidr host bits", [], "10.0.2.1/24", "spec.networks[0].pod.vmNetworkCIDR"),
            ("cidr ipv6", [], "fd10::/120", "spec.networks[0].pod.vmNetworkCIDR"),
            ("cidr too small", [], "10.0.2.0/30", "spec.networks[0].pod.vmNetworkCIDR"),
        )
    ),
    (
        "bad namespace",
        lambda v: v["metadata"].update(namespace="Bad/NS"),
        "metadata.namespace",
        DomainError,
    ),
    (
        "grace negative",
        lambda v: v["spec"].update(terminationGracePeriodSeconds=-1),
        "spec.terminationGracePeriodSeconds",
        DomainError,
    ),
    ("spec not object", lambda v: v.update(spec=[]), "spec", DomainError),
]


@pytest.mark.parametrize(("case", "mutate", "field", "kind"), BAD, ids=[b[0] for b in BAD])
def test_bad_fields_are_named(
    case: str, mutate: Mutation, field: str, kind: type[DomainError]
) -> None:
    vmi = copy.deepcopy(MINIMAL)
    mutate(vmi)
    with pytest.raises(kind) as err:
        parse_vmi(vmi)
    assert err.value.field == field, str(err.value)
    assert str(err.value).startswith(field + ": ")
