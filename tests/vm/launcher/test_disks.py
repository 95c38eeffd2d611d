"""Disk discovery in the pod: block devices, O_DIRECT, preallocation, missing volumes."""

from __future__ import annotations

import copy
import os
import subprocess
from pathlib import Path

import pytest

from tests.vm.domain.cases import FULL, MINIMAL
from vm.domain.vmi import parse_vmi
from vm.launcher import disks
from vm.launcher.errors import DiskError


def test_o_direct_probe_on_local_file_systems(tmp_path: Path) -> None:
    """ext4, xfs, btrfs and (since Linux 6.6) tmpfs open with O_DIRECT; a file system that
    refuses it (EINVAL at open) is not available here to test."""
    (tmp_path / "f").write_bytes(b"x")
    kind = subprocess.run(
        ["stat", "-f", "-c", "%T", str(tmp_path)], capture_output=True, text=True, check=True
    ).stdout.strip()
    if kind not in ("ext2/ext3", "xfs", "btrfs", "tmpfs"):
        pytest.skip(f"unknown file system {kind}")
    assert disks.supports_direct_io(str(tmp_path / "f")) is True
    with pytest.raises(FileNotFoundError):
        disks.supports_direct_io(str(tmp_path / "missing"))


def test_filesystem_volumes(tmp_path: Path) -> None:
    root = tmp_path / "vmi-disks" / "root"
    root.mkdir(parents=True)
    with open(root / "disk.img", "wb") as f:
        f.write(b"\x01" * 8192)  # fully allocated
    facts = disks.prepare(
        spec=parse_vmi(MINIMAL),
        vmi=MINIMAL,
        private_dir=str(tmp_path),
        dev_dir=str(tmp_path / "dev"),
    )
    assert facts.block_volumes == frozenset()
    assert facts.preallocated == frozenset({"root"})
    assert facts.created == ()


def test_missing_volume_names_the_claim(tmp_path: Path) -> None:
    with pytest.raises(DiskError) as err:
        disks.prepare(
            spec=parse_vmi(MINIMAL),
            vmi=MINIMAL,
            private_dir=str(tmp_path),
            dev_dir=str(tmp_path / "dev"),
        )
    assert err.value.reason == "VolumeNotFound"
    assert "spec.volumes[0]" in err.value.message and "pvc-root" in err.value.message


def test_a_symlinked_disk_img_is_refused(tmp_path: Path) -> None:
    root = tmp_path / "vmi-disks" / "root"
    root.mkdir(parents=True)
    os.symlink("/etc/passwd", root / "disk.img")
    with pytest.raises(DiskError, match="not a regular file"):
        disks.prepare(
            spec=parse_vmi(MINIMAL),
            vmi=MINIMAL,
            private_dir=str(tmp_path),
            dev_dir=str(tmp_path / "dev"),
        )


def test_block_device_is_found_at_dev_volume(tmp_path: Path) -> None:
    backing = tmp_path / "backing"
    backing.write_bytes(b"\0" * 1024 * 1024)
    try:
        dev = subprocess.run(
            ["losetup", "--find", "--show", str(backing)],
            check=True,
            capture_output=True,
            text=True,
            timeout=30,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError) as err:
        pytest.skip(f"no loop device: {err}")
    try:
        (tmp_path / "dev").mkdir()
        os.symlink(dev, tmp_path / "dev" / "blk")
        for name in ("root", "data", "iso"):
            d = tmp_path / "vmi-disks" / name
            d.mkdir(parents=True)
            (d / "disk.img").write_bytes(b"")
        facts = disks.prepare(
            spec=parse_vmi(FULL), vmi=FULL, private_dir=str(tmp_path), dev_dir=str(tmp_path / "dev")
        )
        assert facts.block_volumes == frozenset({"blk"})
        assert "blk" in facts.direct_io  # a loop device takes O_DIRECT
    finally:
        subprocess.run(["losetup", "-d", dev], check=False, timeout=30)


def test_a_read_only_claim_gets_no_image_made(tmp_path: Path) -> None:
    vmi = copy.deepcopy(MINIMAL)
    vmi["spec"]["volumes"][0]["persistentVolumeClaim"]["readOnly"] = True
    vmi["spec"]["domain"]["devices"]["disks"][0]["disk"] = {"bus": "virtio"}
    (tmp_path / "vmi-disks" / "root").mkdir(parents=True)
    with pytest.raises(DiskError, match="the read-only claim 'pvc-root' has no disk image"):
        disks.prepare(spec=parse_vmi(vmi), vmi=vmi, private_dir=str(tmp_path),
                      dev_dir=str(tmp_path / "dev"))
    assert not (tmp_path / "vmi-disks" / "root" / "disk.img").exists()
