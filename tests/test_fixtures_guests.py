"""The guest fixtures are what they claim: a valid MBR boot sector with the marker, and a
partitioned, bootable Linux disk in raw and qcow2 with the same content."""

from __future__ import annotations

import json
import subprocess

from tests.fixtures.guests import MARKER, GuestBuilder, LinuxGuest, boot_sector


def test_boot_sector_shape() -> None:
    for poweroff in (False, True):
        sector = boot_sector(poweroff=poweroff)
        assert len(sector) == 512 and sector[510:] == b"\x55\xaa"
        assert MARKER.encode() + b"\r\n\x00" in sector
    assert b"\xef" in boot_sector(poweroff=True)[:40]  # the out dx, ax to PM1a_CNT


def test_linux_guest_disks(tmp_path: object) -> None:
    guest: LinuxGuest = GuestBuilder().linux()
    table = json.loads(
        subprocess.run(
            ["sfdisk", "--json", str(guest.raw)], check=True, capture_output=True, text=True
        ).stdout
    )
    [part] = table["partitiontable"]["partitions"]
    assert part["start"] == 2048 and part.get("bootable") is True
    info = json.loads(
        subprocess.run(
            ["qemu-img", "info", "--output=json", str(guest.qcow2)],
            check=True,
            capture_output=True,
            text=True,
        ).stdout
    )
    assert info["format"] == "qcow2"
    subprocess.run(
        ["qemu-img", "compare", "-f", "raw", "-F", "qcow2", str(guest.raw), str(guest.qcow2)],
        check=True,
        capture_output=True,
    )
    assert guest.kernel.stat().st_size > 1_000_000 and guest.initrd.stat().st_size > 100_000
