"""spec.domain.machine.type becomes the type of QEMU's -machine option (and libvirt's
``<type machine=…>``): parse_vmi lets only q35's exact names through, so nothing can add
options (kernel=, initrd=, smm=…) to it, and the rendered -machine carries exactly the
keys the domain sets."""

from __future__ import annotations

import copy
import xml.etree.ElementTree as ET

import pytest

from tests.vm.domain.cases import MINIMAL, options
from vm.domain import render_libvirt, render_qemu
from vm.domain.builder import build
from vm.domain.errors import DomainError, UnsupportedError
from vm.domain.vmi import parse_vmi

QMP = "/var/run/kubevirt-private/qmp.sock"


def _vmi(machine: object) -> dict:
    vmi = copy.deepcopy(MINIMAL)
    vmi["spec"]["domain"]["machine"] = {"type": machine}
    return vmi


@pytest.mark.parametrize(("machine", "error"), [
    ("pc-q35-7.2,kernel=/x", DomainError),
    ("pc-q35-7.2,initrd=/proc/self/environ", DomainError),
    ("q35,smm=off", DomainError),
    ("pc-q35-7.2 ", DomainError),
    ("pc-q35-7.2\n", DomainError),
    ("pc-q35-rhel9", DomainError),
    ("pc-q35-٧.٢", DomainError),  # digits, but not ASCII ones
    (7, DomainError),
    ("pc", UnsupportedError),
    ("pc-i440fx-7.2", UnsupportedError),
    ("microvm", UnsupportedError),
])
def test_other_machine_types_are_refused_naming_the_field(machine: object,
                                                          error: type[DomainError]) -> None:
    with pytest.raises(error) as err:
        parse_vmi(_vmi(machine))
    assert err.value.field == "spec.domain.machine.type"
    assert str(err.value).startswith("spec.domain.machine.type: ")


@pytest.mark.parametrize(("machine", "want"), [
    ("q35", "q35"), ("pc-q35-7.2", "pc-q35-7.2"), ("pc-q35-rhel9.2.0", "pc-q35-rhel9.2.0"),
    ("", "q35"), (None, "q35"),  # unset: upstream's default
])
def test_q35_names_are_rendered_with_exactly_the_domains_keys(machine: object,
                                                               want: str) -> None:
    assert parse_vmi(_vmi(machine)).machine == want
    domain = build(vmi=_vmi(machine), options=options())
    argv = render_qemu.render(domain, qmp_socket=QMP)
    assert argv.count("-machine") == 1
    kind, *rest = argv[argv.index("-machine") + 1].split(",")
    assert kind == want
    assert dict(kv.split("=", 1) for kv in rest) == {"accel": domain.accelerator}
    xml = ET.fromstring(render_libvirt.to_xml(domain))  # noqa: S314 - our own render
    assert xml.find("os/type").get("machine") == want


def test_smm_and_acpi_are_the_only_other_keys() -> None:
    vmi = _vmi("pc-q35-7.2")
    vmi["spec"]["domain"]["features"] = {"acpi": {"enabled": False}, "smm": {}}
    domain = build(vmi=vmi, options=options())
    argv = render_qemu.render(domain, qmp_socket=QMP)
    kind, *rest = argv[argv.index("-machine") + 1].split(",")
    assert kind == "pc-q35-7.2"
    assert dict(kv.split("=", 1) for kv in rest) == {
        "accel": domain.accelerator, "smm": "on", "acpi": "off"}


@pytest.mark.parametrize("machine", ["pc-q35-7.2,kernel=/x", "q35,smm=off,accel=kvm",
                                     "pc-q35-7.2,initrd=/proc/self/environ", "q35 ,x=y"])
def test_no_value_reaches_the_command_line_with_options_of_its_own(machine: str) -> None:
    """Whatever parse_vmi were to let through, -machine carries no key but the domain's."""
    try:
        domain = build(vmi=_vmi(machine), options=options())
    except DomainError:
        return
    argv = render_qemu.render(domain, qmp_socket=QMP)
    _kind, *rest = argv[argv.index("-machine") + 1].split(",")
    assert [kv.split("=", 1)[0] for kv in rest] == ["accel"]
