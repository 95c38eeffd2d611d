"""Whole rendered domains compared with reviewed expectations (golden/), for each
combination in cases.py; and the escaping rules of both renderers."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from tests.vm.domain.cases import CASES, MINIMAL, options
from vm.domain import render_libvirt, render_qemu
from vm.domain.builder import build
from vm.domain.errors import DomainError

GOLDEN = Path(__file__).parent / "golden"
QMP = "/var/run/kubevirt-private/qmp.sock"


@pytest.mark.parametrize("case", sorted(CASES))
def test_libvirt_xml_is_the_whole_expected_domain(case: str) -> None:
    vmi, opts = CASES[case]
    domain = build(vmi=vmi, options=options(**opts))
    assert render_libvirt.to_xml(domain) + "\n" == (GOLDEN / f"{case}.xml").read_text()


@pytest.mark.parametrize("case", sorted(CASES))
def test_qemu_argv_is_the_whole_expected_command(case: str) -> None:
    vmi, opts = CASES[case]
    domain = build(vmi=vmi, options=options(**opts))
    expected = json.loads((GOLDEN / f"{case}.argv.json").read_text())
    assert render_qemu.render(domain, qmp_socket=QMP) == expected


def test_values_cannot_escape_their_xml_node_or_qemu_option() -> None:
    hostile = '/tmp/a,file=/etc/shadow"/><evil/>'
    domain = build(vmi=MINIMAL, options=options(private_dir=hostile))
    root = ET.fromstring(render_libvirt.to_xml(domain))  # noqa: S314 - our own render
    assert root.find(".//evil") is None
    assert root.find(".//disk/source").get("file") == hostile + "/vmi-disks/root/disk.img"
    argv = render_qemu.render(domain, qmp_socket=QMP)
    drive = argv[argv.index("-drive") + 1]
    assert "file.filename=/tmp/a,,file=/etc/shadow" in drive
    assert ",file=/etc/shadow" not in drive.replace(",,", "")


def test_memory_rounds_up_to_a_mib_for_qemu_and_stays_bytes_for_libvirt() -> None:
    vmi = json.loads(json.dumps(MINIMAL))
    vmi["spec"]["domain"]["resources"]["requests"]["memory"] = "100000000"
    domain = build(vmi=vmi, options=options())
    assert ET.fromstring(render_libvirt.to_xml(domain)).findtext("memory") == "100000000"  # noqa: S314 - our own render
    argv = render_qemu.render(domain, qmp_socket=QMP)
    assert argv[argv.index("-m") + 1] == "size=98304k"  # 95.37 MiB -> 96 MiB


def test_start_strategy_paused_holds_the_cpus() -> None:
    """``startStrategy: Paused`` → QEMU's ``-S`` (libvirt: VIR_DOMAIN_START_PAUSED, in the
    driver); unset → the CPUs run; anything else names the field."""
    vmi = json.loads(json.dumps(MINIMAL))
    assert "-S" not in render_qemu.render(build(vmi=vmi, options=options()), qmp_socket=QMP)
    vmi["spec"]["startStrategy"] = "Paused"
    domain = build(vmi=vmi, options=options())
    assert domain.start_paused
    assert "-S" in render_qemu.render(domain, qmp_socket=QMP)
    vmi["spec"]["startStrategy"] = "Later"
    with pytest.raises(DomainError, match=r"spec\.startStrategy"):
        build(vmi=vmi, options=options())


def test_a_memory_limit_alone_is_the_guests_memory() -> None:
    """The webhook accepts a VMI with only ``limits.memory`` (as upstream); the guest gets
    the limit rather than the launcher failing on "no memory requested"."""
    vmi = json.loads(json.dumps(MINIMAL))
    vmi["spec"]["domain"]["resources"] = {"limits": {"memory": "100000000"}}
    domain = build(vmi=vmi, options=options())
    assert domain.memory_bytes == 100000000
