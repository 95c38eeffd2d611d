"""Both drivers, as the kubelet runs the launcher (sandbox, uid 107), booting a guest
from an ephemeral overlay over a golden image, with an emptyDisk and a cloud-init ISO
whose user data comes from a Secret volume."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.fixtures.guests import MARKER
from tests.vm.launcher import sandbox
from tests.vm.launcher.harness import Launch, make_vmi
from tests.vm.launcher.sandbox import UID

Factory = Callable[..., Launch]

pytestmark = pytest.mark.skipif(not sandbox.available(), reason="needs root, bwrap and setpriv")

DISKS = [
    {"name": "root", "disk": {"bus": "virtio"}, "bootOrder": 1},
    {"name": "scratch", "disk": {"bus": "scsi"}},
    {"name": "ci", "cdrom": {"bus": "sata"}},
]
VOLUMES = [
    {"name": "root", "ephemeral": {"persistentVolumeClaim": {"claimName": "golden"}}},
    {"name": "scratch", "emptyDisk": {"capacity": "16Mi"}},
    {"name": "ci", "cloudInitNoCloud": {"secretRef": {"name": "ud"}}},
]


def _secret(run: Launch, volume: str, key: str, value: str) -> None:
    d = run.private / "secret" / volume
    d.mkdir(parents=True)
    (d / key).write_text(value)
    for p in (run.private / "secret", d, d / key):
        os.chown(p, 0, UID)
    os.chmod(d / key, 0o440)


@pytest.mark.parametrize("driver", ["qemu", "libvirt"])
def test_guest_boots_from_the_overlay_with_empty_disk_and_cloud_init(
    launch: Factory, boot_sectors: dict[str, Path], driver: str
) -> None:
    run = launch(make_vmi(memory="128Mi", disks=DISKS, volumes=VOLUMES), driver=driver,
                 sandbox=True)
    golden = run.add_disk("root", boot_sectors["halt"])
    digest = hashlib.sha256(golden.read_bytes()).hexdigest()
    _secret(run, "ci", "userdata", "#cloud-config\nfrom-the-secret: 1\n")
    run.start()
    run.wait_for_console(MARKER, timeout=180)  # booted from the overlay's backing
    run.wait_for_state("running")
    [qemu] = run.qemu_pids()
    cmdline = Path(f"/proc/{qemu}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    iso = run.ephemeral / "cloud-init-data" / "default" / "vm1" / "noCloud.iso"
    overlay = run.ephemeral / "disk-data" / "root" / "disk.qcow2"
    empty = run.runtime / "empty-disks" / "scratch.qcow2"
    if driver == "qemu":  # libvirt passes them as -blockdev nodes by its own names
        for path in ("/var/run/kubevirt-ephemeral-disks/cloud-init-data/default/vm1/noCloud.iso",
                     "/var/run/kubevirt-ephemeral-disks/disk-data/root/disk.qcow2",
                     "/var/run/libvirt/empty-disks/scratch.qcow2"):
            assert path in cmdline, cmdline
    else:
        assert "noCloud.iso" in cmdline and "disk.qcow2" in cmdline, cmdline
        assert "scratch.qcow2" in cmdline and "backing" in cmdline, cmdline
    for path in (iso, overlay, empty):
        assert path.stat().st_uid == UID
    info = json.loads(subprocess.run(["qemu-img", "info", "-U", "--output=json", str(overlay)],
                                     capture_output=True, check=True, timeout=30).stdout)
    assert info["backing-filename-format"] == "raw"
    out = run.base / "iso-out"
    subprocess.run(["xorriso", "-osirrox", "on", "-indev", str(iso), "-extract", "/", str(out)],
                   capture_output=True, check=True, timeout=30)
    assert (out / "user-data").read_text() == "#cloud-config\nfrom-the-secret: 1\n"
    assert json.loads((out / "meta-data").read_text())["instance-id"] == \
        run.vmi["metadata"]["uid"]
    assert not (run.ephemeral / "cloud-init-data" / "default" / "vm1" / "data").exists()
    assert "from-the-secret" not in run.log()
    assert run.request({"cmd": "kill"}) == {"ok": True}
    assert run.wait() == 1
    assert hashlib.sha256(golden.read_bytes()).hexdigest() == digest


def test_missing_secret_fails_the_vmi_with_the_reason(
    launch: Factory, boot_sectors: dict[str, Path]
) -> None:
    run = launch(make_vmi(disks=DISKS, volumes=VOLUMES), sandbox=True)
    run.add_disk("root", boot_sectors["halt"])
    assert run.start().wait() == 1
    term = run.termination()
    assert term["phase"] == "Failed" and term["reason"] == "CloudInitError"
    assert term["message"] == "no cloud-init data-source found at volume: ci"


@pytest.mark.parametrize("driver", ["qemu", "libvirt"])
def test_guest_boots_from_an_overlay_over_a_block_claim(
    launch: Factory, loop_with_boot_sector: str, driver: str
) -> None:
    dev = loop_with_boot_sector
    os.chown(dev, UID, UID)
    before = Path(dev).read_bytes()[:4096]
    run = launch(make_vmi(memory="128Mi", disks=[DISKS[0]], volumes=[VOLUMES[0]]),
                 driver=driver, sandbox=True)
    assert run.pod is not None
    run.pod.dev_binds[dev] = "/dev/root"
    assert run.start().wait(180) == 0, run.log()  # the guest powers off
    assert MARKER in run.console_text()
    info = json.loads(subprocess.run(
        ["qemu-img", "info", "-U", "--output=json",
         str(run.ephemeral / "disk-data" / "root" / "disk.qcow2")],
        capture_output=True, check=True, timeout=30).stdout)
    assert info["backing-filename"] == "/dev/root"
    assert Path(dev).read_bytes()[:4096] == before


def _image_volume(run: Launch, index: int, disk: Path, *, name: str = "disk.img") -> Path:
    """An image volume as the kubelet mounts one: the image's files, root-owned, not
    writable by the launcher."""
    assert run.pod is not None
    root = run.pod.empty_dir(f"image-{index}", f"/var/run/kubevirt-image-volume/disk_{index}")
    os.chown(root, 0, 0)
    (root / "disk").mkdir()
    target = root / "disk" / name
    subprocess.run(["cp", "--sparse=always", str(disk), str(target)], check=True)
    os.chmod(target, 0o444)
    return target


@pytest.mark.parametrize(("driver", "fmt"), [("qemu", "qcow2"), ("libvirt", "raw"),
                                             ("qemu", "raw"), ("libvirt", "qcow2")])
def test_guest_boots_from_a_container_disk_under_a_throwaway_overlay(
    launch: Factory, boot_sectors: dict[str, Path], tmp_path: Path, driver: str, fmt: str
) -> None:
    """A containerDisk: the image's /disk file (qcow2 or raw) is the read-only backing of
    an overlay in the pod's ephemeral dir; the image's file is never written."""
    disk = boot_sectors["halt"]
    if fmt == "qcow2":
        disk = tmp_path / "halt.qcow2"
        subprocess.run(["qemu-img", "convert", "-f", "raw", "-O", "qcow2",
                        str(boot_sectors["halt"]), str(disk)], check=True)
    run = launch(make_vmi(memory="128Mi", disks=[DISKS[0]], volumes=[
        {"name": "root", "containerDisk": {"image": "registry.example/golden/halt:v1"}}]),
        driver=driver, sandbox=True)
    base = _image_volume(run, 0, disk, name=f"halt.{fmt}")
    before = hashlib.sha256(base.read_bytes()).hexdigest()
    run.start()
    run.wait_for_console(MARKER, timeout=180)
    run.wait_for_state("running")
    overlay = run.ephemeral / "disk-data" / "root" / "disk.qcow2"
    info = json.loads(subprocess.run(["qemu-img", "info", "-U", "--output=json",
                                      str(overlay)], capture_output=True, check=True).stdout)
    assert info["backing-filename"] == f"/var/run/kubevirt-image-volume/disk_0/disk/halt.{fmt}"
    assert info["backing-filename-format"] == fmt
    assert run.request({"cmd": "kill"}) == {"ok": True}
    run.wait()
    assert hashlib.sha256(base.read_bytes()).hexdigest() == before


def test_a_container_disk_naming_a_backing_file_is_refused(
    launch: Factory, boot_sectors: dict[str, Path], tmp_path: Path
) -> None:
    """The image is not trusted: a qcow2 whose header names a backing file (a host path)
    fails the VMI with InvalidDisk before QEMU opens it."""
    hostile = tmp_path / "hostile.qcow2"
    subprocess.run(["qemu-img", "create", "-f", "qcow2", "-F", "raw", "-b", "/etc/shadow",
                    "-u", str(hostile), "1M"], check=True, capture_output=True)
    run = launch(make_vmi(memory="128Mi", disks=[DISKS[0]], volumes=[
        {"name": "root", "containerDisk": {"image": "registry.example/evil:v1"}}]),
        sandbox=True)
    _image_volume(run, 0, hostile, name="evil.qcow2")
    run.start()
    assert run.wait() != 0
    term = run.termination()
    assert term["reason"] == "InvalidDisk", term
    assert "names a backing or data file of its own" in term["message"]
    assert not run.qemu_pids()


def test_a_container_disk_without_a_disk_file_is_refused(launch: Factory) -> None:
    run = launch(make_vmi(memory="128Mi", disks=[DISKS[0]], volumes=[
        {"name": "root", "containerDisk": {"image": "registry.example/empty:v1"}}]),
        sandbox=True)
    assert run.pod is not None
    root = run.pod.empty_dir("image-0", "/var/run/kubevirt-image-volume/disk_0")
    (root / "disk").mkdir()
    run.start()
    assert run.wait() != 0
    term = run.termination()
    assert term["reason"] == "InvalidDisk", term
    assert "spec.volumes[0].containerDisk: no disk file under /disk" in term["message"]
