"""The Debian cloud guest's build: its manifest names the kernel and the packages.

The guest's boot is tested on `rootdisk up`, in tests/e2e/test_vm_cloudguest.py: its VM
boots the root on SATA (AHCI, ``bus: sata``) and the NoCloud seed on a SATA CD-ROM, and
its tests (cloud-init done and runcmd ran, the hostname from the seed, sudo with locked
passwords, sshd refusing passwords and root, a wrong key refused, the guest agent, the
boot measured, the root on ``/dev/sda2`` with only ``sda`` and the ``cidata`` CD-ROM)
were here, on a boot of their own on QEMU alone, which cost the suite a Debian boot
under TCG. tests/e2e/test_demo.py boots the guest with its root and seed on virtio."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from rootdisk.cloudguest import build_cloud_guest, read_manifest

pytestmark = [pytest.mark.slow, pytest.mark.cloud_guest, pytest.mark.timeout(900)]


@pytest.fixture(scope="module")
def image() -> Path:
    for tool in ("mmdebstrap", "qemu-img"):
        if not shutil.which(tool):
            pytest.fail(f"{tool} is missing: make setup installs it")
    return build_cloud_guest()


def test_the_manifest_names_the_kernel_and_every_package(image: Path) -> None:
    manifest = read_manifest(image)
    packages = manifest["packages"]
    assert isinstance(packages, dict)
    for name in ("cloud-init", "openssh-server", "qemu-guest-agent", "sudo", "systemd-sysv"):
        assert name in packages
    assert str(manifest["kernel"]).endswith("-amd64")
    assert "passwd" in packages  # the Essential set too
