"""Configurators one by one, each compared as the whole Domain it yields."""

from __future__ import annotations

import copy

import pytest

from tests.vm.domain.cases import FULL, MINIMAL, OVMF, options
from vm.domain.builder import build, build_spec
from vm.domain.configurators import cpu, disks, firmware, memory
from vm.domain.errors import DomainError, UnsupportedError
from vm.domain.model import Cpu, Disk, Domain, Firmware, ScsiController
from vm.domain.options import BuildOptions
from vm.domain.vmi import parse_vmi

EMPTY = Domain(name="", uuid="", accelerator="tcg")


def test_disks_configurator_whole_result() -> None:
    got = disks.configure(
        vmi=parse_vmi(FULL),
        options=options(
            block_volumes=frozenset({"blk"}),
            direct_io=frozenset({"root"}),
            preallocated=frozenset({"root"}),
        ),
        domain=EMPTY,
    )
    base = "/var/run/kubevirt-private/vmi-disks"
    assert got == Domain(
        name="",
        uuid="",
        accelerator="tcg",
        controllers=(ScsiController(),),
        disks=(
            Disk(
                alias="ua-root",
                device="disk",
                bus="virtio",
                target="vda",
                source_kind="file",
                path=f"{base}/root/disk.img",
                cache="none",
                io="native",
                boot_order=1,
                serial="ROOT01",
            ),
            Disk(
                alias="ua-data",
                device="disk",
                bus="scsi",
                target="sda",
                source_kind="file",
                path=f"{base}/data/disk.img",
                cache="writethrough",
                unit=0,
            ),
            Disk(
                alias="ua-iso",
                device="cdrom",
                bus="sata",
                target="sdb",
                source_kind="file",
                path=f"{base}/iso/disk.img",
                cache="writethrough",
                boot_order=2,
                read_only=True,
                discard=None,
            ),
            # a block device without O_DIRECT: writethrough, and so no io=native
            Disk(
                alias="ua-blk",
                device="disk",
                bus="scsi",
                target="sdc",
                source_kind="block",
                path="/dev/blk",
                cache="writethrough",
                unit=1,
            ),
        ),
    )


def test_cache_none_without_direct_io_is_refused_with_upstreams_words() -> None:
    vmi = copy.deepcopy(MINIMAL)
    vmi["spec"]["domain"]["devices"]["disks"][0]["cache"] = "none"
    with pytest.raises(DomainError) as err:
        disks.configure(vmi=parse_vmi(vmi), options=options(), domain=EMPTY)
    assert err.value.field == "spec.domain.devices.disks[0].cache"
    assert "Unable to use 'none' cache mode" in err.value.message


def test_seven_sata_disks_do_not_fit() -> None:
    names = [f"d{i}" for i in range(7)]
    vmi = copy.deepcopy(MINIMAL)
    vmi["spec"]["domain"]["devices"]["disks"] = [{"name": n} for n in names]
    vmi["spec"]["volumes"] = [{"name": n, "dataVolume": {"name": n}} for n in names]
    with pytest.raises(DomainError, match=r"disks\[6\]"):
        build(vmi=vmi, options=options())


def test_device_names_past_z() -> None:
    assert [disks.device_name("vd", i) for i in (0, 25, 26, 27, 701, 702)] == [
        "vda",
        "vdz",
        "vdaa",
        "vdab",
        "vdzz",
        "vdaaa",
    ]


def test_cpu_model_defaults_per_accelerator() -> None:
    spec = parse_vmi(MINIMAL)
    tcg = cpu.configure(vmi=spec, options=BuildOptions(accelerator="tcg"), domain=EMPTY)
    kvm = cpu.configure(vmi=spec, options=BuildOptions(accelerator="kvm"), domain=EMPTY)
    assert tcg.cpu == Cpu(model=None)
    assert kvm.cpu == Cpu(model="host-model")
    vmi = copy.deepcopy(MINIMAL)
    vmi["spec"]["domain"]["cpu"] = {"model": "host-passthrough"}
    with pytest.raises(DomainError, match="needs KVM"):
        cpu.configure(vmi=parse_vmi(vmi), options=BuildOptions(accelerator="tcg"), domain=EMPTY)


def test_efi_needs_ovmf_and_says_so() -> None:
    vmi = copy.deepcopy(MINIMAL)
    vmi["spec"]["domain"]["firmware"] = {"bootloader": {"efi": {"secureBoot": False}}}
    with pytest.raises(UnsupportedError) as err:
        firmware.configure(vmi=parse_vmi(vmi), options=BuildOptions(), domain=EMPTY)
    assert err.value.field == "spec.domain.firmware.bootloader.efi"
    got = firmware.configure(vmi=parse_vmi(vmi), options=BuildOptions(ovmf=OVMF), domain=EMPTY)
    assert got == Domain(
        name="",
        uuid="",
        accelerator="tcg",
        firmware=Firmware(
            kind="efi",
            loader=OVMF.code,
            nvram="/var/run/kubevirt-private/libvirt/qemu/nvram/vm1_VARS.fd",
            nvram_template=OVMF.vars_template,
            secure_boot=False,
        ),
    )


def test_memory_configurator() -> None:
    assert memory.configure(vmi=parse_vmi(MINIMAL), options=BuildOptions(), domain=EMPTY) == Domain(
        name="", uuid="", accelerator="tcg", memory_bytes=128 * 1024 * 1024
    )


def test_builder_runs_only_the_configurators_given() -> None:
    got = build_spec(
        spec=parse_vmi(MINIMAL), options=BuildOptions(), configurators=[memory.configure]
    )
    assert got == Domain(name="", uuid="", accelerator="tcg", memory_bytes=128 * 1024 * 1024)
