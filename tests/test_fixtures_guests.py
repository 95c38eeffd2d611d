"""The guest fixtures are what they claim: a valid MBR boot sector with the marker, a
partitioned, bootable Linux disk in raw and qcow2 with the same content, and the agent
guest's ext4 root holding Debian's qemu-ga and os-release and an init that counts the
disk's boots on it, cached under a key that changes with any of its packages' versions."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from tests.fixtures.guests import (
    AGENT_BOOT,
    AGENT_BOOTS,
    AGENT_PACKAGES,
    GUEST_REVISION,
    MARKER,
    SHUTDOWN,
    GuestBuilder,
    GuestBuildError,
    LinuxGuest,
    _library,
    boot_sector,
    candidate_versions,
    guest_name,
)


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


def test_agent_guest_key_changes_with_any_package_version() -> None:
    kernel = "6.1.0-57-cloud-amd64"
    versions = {"qemu-guest-agent": "1:7.2+dfsg-7+deb12u18+b3", "libc6": "2.36-9+deb12u14",
                "base-files": "12.4+deb12u15"}
    name = guest_name(kernel, "agent", MARKER, versions)
    assert name == guest_name(kernel, "agent", MARKER, dict(reversed(versions.items())))
    for package, version in versions.items():
        assert guest_name(kernel, "agent", MARKER, {**versions, package: f"{version}+b1"}) != name
    # the other modes keep their names (and so their caches)
    assert guest_name(kernel, "net", MARKER) == f"linux-{GUEST_REVISION}-{kernel}-net-{MARKER}"


def _debugfs(disk: str, offset: int, request: str) -> str:
    return subprocess.run(["debugfs", "-R", request, f"{disk}?offset={offset}"], check=True,
                          capture_output=True, text=True).stdout


def test_agent_guest_root() -> None:
    guest = GuestBuilder().linux(mode="agent")
    pinned = candidate_versions((*AGENT_PACKAGES, "busybox-static"))
    assert guest.raw.parent.name == guest_name(guest.kernel_version, "agent", MARKER, pinned)
    table = json.loads(subprocess.run(["sfdisk", "--json", str(guest.raw)], check=True,
                                      capture_output=True, text=True).stdout)
    boot, root = table["partitiontable"]["partitions"]
    assert boot.get("bootable") is True and root["type"] == "83"
    at = root["start"] * 512
    os_release = _debugfs(str(guest.raw), at, "cat /etc/os-release")
    assert 'ID=debian' in os_release and 'VERSION_ID="12"' in os_release
    assert "Mode:  0755" in _debugfs(str(guest.raw), at, "stat /usr/sbin/qemu-ga")
    assert _debugfs(str(guest.raw), at, "cat /sbin/shutdown") == SHUTDOWN
    assert "libglib-2.0.so.0" in _debugfs(str(guest.raw), at, "ls -l /lib/x86_64-linux-gnu")


def test_agent_guest_counts_its_boots_on_its_root(tmp_path: Path) -> None:
    """The init on the agent guest's root appends a line to a file on that root at each
    boot and prints the count before the marker; the built root holds no count yet (a
    first boot says n=1). The init's counting lines run here under the guest's own
    busybox, against a file of this test for the root's and stdout for the console."""
    guest = GuestBuilder().linux(mode="agent")
    table = json.loads(subprocess.run(["sfdisk", "--json", str(guest.raw)], check=True,
                                      capture_output=True, text=True).stdout)
    at = table["partitiontable"]["partitions"][1]["start"] * 512
    init = _debugfs(str(guest.raw), at, "cat /sbin/init")
    counting = [line for line in init.splitlines() if AGENT_BOOTS in line]
    assert len(counting) == 2 and "sync" in counting[0] and f"{AGENT_BOOT} n=" in counting[1]
    assert init.index(counting[1]) < init.index(f"echo {MARKER} > /dev/ttyS0")
    listing = _debugfs(str(guest.raw), at, "ls -l /var/lib")
    assert AGENT_BOOTS.rsplit("/", 1)[1] not in listing and ".." in listing
    _debugfs(str(guest.raw), at, f"dump -p /bin/busybox {tmp_path / 'busybox'}")
    script = "\n".join(counting).replace(AGENT_BOOTS, str(tmp_path / "boots")).replace(
        "/dev/ttyS0", "/dev/stdout")
    said = [subprocess.run([str(tmp_path / "busybox"), "sh", "-c", script], check=True,
                           capture_output=True, text=True, timeout=30).stdout
            for _ in range(2)]
    assert said == [f"{AGENT_BOOT} n=1\n", f"{AGENT_BOOT} n=2\n"]


def test_a_library_link_leaving_the_extracted_packages_is_not_followed(tmp_path: Path) -> None:
    """The agent guest's libraries come from the packages extracted into a tree; a link
    there with ".." pointing at a file of this host is refused, not copied into the guest."""
    tree, host = tmp_path / "pkgs", tmp_path / "host"
    lib = tree / "usr" / "lib" / "x86_64-linux-gnu"
    lib.mkdir(parents=True)
    host.mkdir()
    (lib / "libz.so.1.2.13").write_bytes(b"in the package")
    (lib / "libz.so.1").symlink_to("libz.so.1.2.13")
    assert _library(tree, "libz.so.1") == lib / "libz.so.1.2.13"
    (host / "libhost.so").write_bytes(b"the host's")
    (lib / "libhost.so.1").symlink_to(os.path.relpath(host / "libhost.so", lib))
    with pytest.raises(GuestBuildError, match=r"no libhost\.so\.1 in the packages"):
        _library(tree, "libhost.so.1")
