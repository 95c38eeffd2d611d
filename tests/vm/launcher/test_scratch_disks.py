"""emptyDisk images and ephemeral overlays made with the real qemu-img; writes through the
overlay (real qemu-io) leave the golden image as it was."""

from __future__ import annotations

import hashlib
import json
import shutil
import stat
import subprocess
from pathlib import Path
from typing import Any

import pytest

from vm.domain.model import Backing
from vm.domain.vmi import parse_vmi
from vm.launcher import scratch
from vm.launcher.errors import DiskError

pytestmark = pytest.mark.skipif(not (shutil.which("qemu-img") and shutil.which("qemu-io")),
                                reason="needs qemu-utils")
MIB = 1024 * 1024


def vmi(volumes: list[dict[str, Any]]) -> Any:
    return parse_vmi({"metadata": {"name": "vm1", "namespace": "ns1", "uid": "u-1"},
                      "spec": {"domain": {"resources": {"requests": {"memory": "64Mi"}},
                                          "devices": {"disks": []}},
                               "volumes": volumes}})


def info(path: Path) -> dict[str, Any]:
    out = subprocess.run(["qemu-img", "info", "--output=json", "-U", str(path)],
                         capture_output=True, check=True, timeout=30).stdout
    result: dict[str, Any] = json.loads(out)
    return result


def dirs(tmp_path: Path) -> dict[str, str]:
    return {"private_dir": str(tmp_path / "priv"), "dev_dir": str(tmp_path / "dev"),
            "runtime_dir": str(tmp_path / "run"), "ephemeral_dir": str(tmp_path / "eph")}


def test_empty_disk_is_a_sparse_qcow2_rounded_down_to_a_mib(tmp_path: Path) -> None:
    spec = vmi([{"name": "scratch", "emptyDisk": {"capacity": "1536Ki"}},
                {"name": "big", "emptyDisk": {"capacity": "10Gi"}}])
    prepared = scratch.prepare(spec, **dirs(tmp_path))
    by = {p.volume: p for p in prepared}
    path = tmp_path / "run" / "empty-disks" / "scratch.qcow2"
    assert by["scratch"].path == str(path) and by["scratch"].format == "qcow2"
    assert info(path)["format"] == "qcow2" and info(path)["virtual-size"] == MIB
    big = Path(by["big"].path)
    assert info(big)["virtual-size"] == 10 * 1024 * MIB
    assert big.stat().st_blocks * 512 < 4 * MIB  # thin
    # made only when missing: a second start keeps what the guest wrote
    before = path.read_bytes()
    subprocess.run(["qemu-io", "-f", "qcow2", "-c", "write -P 0x5a 0 4k", str(path)],
                   check=True, capture_output=True, timeout=30)
    assert path.read_bytes() != before
    written = path.read_bytes()
    scratch.prepare(spec, **dirs(tmp_path))
    assert path.read_bytes() == written


def write_through(overlay: Path, *, new: int, old: int) -> None:
    """Write ``new`` over the first 64 KiB through the overlay (as the guest would); the
    overlay then reads ``new`` there and the backing's ``old`` after it."""
    subprocess.run(["qemu-io", "-f", "qcow2", "-c", f"write -P {new} 0 64k", str(overlay)],
                   check=True, capture_output=True, timeout=30)
    read = subprocess.run(["qemu-io", "-f", "qcow2", "-r", "-c", f"read -P {new} 0 64k",
                           "-c", f"read -P {old} 64k 64k", str(overlay)],
                          capture_output=True, text=True, check=True, timeout=30).stdout
    assert "Pattern verification failed" not in read, read


def test_ephemeral_overlay_leaves_the_golden_image_unchanged(tmp_path: Path) -> None:
    golden = tmp_path / "priv" / "vmi-disks" / "root" / "disk.img"
    golden.parent.mkdir(parents=True)
    golden.write_bytes(b"\x11" * (4 * MIB))
    digest = hashlib.sha256(golden.read_bytes()).hexdigest()
    spec = vmi([{"name": "root", "ephemeral": {"persistentVolumeClaim": {"claimName": "g"}}}])
    [disk] = scratch.prepare(spec, **dirs(tmp_path))
    overlay = tmp_path / "eph" / "disk-data" / "root" / "disk.qcow2"
    assert disk.path == str(overlay) and disk.backing == Backing(str(golden))
    assert stat.S_IMODE(overlay.stat().st_mode) == 0o640
    meta = info(overlay)
    assert meta["backing-filename"] == str(golden)
    assert meta["backing-filename-format"] == "raw"
    assert meta["virtual-size"] == 4 * MIB
    write_through(overlay, new=0xAB, old=0x11)
    assert hashlib.sha256(golden.read_bytes()).hexdigest() == digest


def test_ephemeral_without_an_image_names_the_volume(tmp_path: Path) -> None:
    spec = vmi([{"name": "root", "ephemeral": {"persistentVolumeClaim": {"claimName": "g"}}}])
    with pytest.raises(DiskError, match=r"spec.volumes\[0\].ephemeral: claim 'g' has no disk "
                       "image") as err:
        scratch.prepare(spec, **dirs(tmp_path))
    assert err.value.reason == "VolumeNotFound"


def test_a_failing_qemu_img_is_reported(tmp_path: Path) -> None:
    spec = vmi([{"name": "scratch", "emptyDisk": {"capacity": "1Mi"}}])
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "empty-disks").write_text("not a directory")
    with pytest.raises(DiskError, match=r"\(scratch\): File exists: .*empty-disks"):
        scratch.prepare(spec, **dirs(tmp_path))
    with pytest.raises(DiskError, match=r"spec.volumes\[0\] \(scratch\): cannot run"):
        scratch.prepare(spec, **{**dirs(tmp_path), "runtime_dir": str(tmp_path / "r2")},
                        qemu_img=str(tmp_path / "no-qemu-img"))


def test_ephemeral_over_a_block_claim(tmp_path: Path) -> None:
    """A Block golden claim is /dev/<volume>: the overlay's backing is the device."""
    image = tmp_path / "golden.raw"
    image.write_bytes(b"\x22" * (4 * MIB))
    try:
        loop = subprocess.run(["losetup", "--find", "--show", "--read-only", str(image)],
                              check=True, capture_output=True, text=True,
                              timeout=30).stdout.strip()
    except (OSError, subprocess.CalledProcessError) as err:
        pytest.skip(f"no loop device: {err}")
    try:
        (tmp_path / "dev").mkdir()
        (tmp_path / "dev" / "root").symlink_to(loop)
        spec = vmi([{"name": "root",
                     "ephemeral": {"persistentVolumeClaim": {"claimName": "g"}}}])
        [disk] = scratch.prepare(spec, **dirs(tmp_path))
        assert disk.backing == Backing(str(tmp_path / "dev" / "root"), "block")
        write_through(Path(disk.path), new=0xCD, old=0x22)
        assert image.read_bytes() == b"\x22" * (4 * MIB)
    finally:
        subprocess.run(["losetup", "-d", loop], check=False, timeout=30)
