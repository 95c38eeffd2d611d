"""The Debian cloud guest boots under QEMU (TCG) and takes cloud-init from a NoCloud seed
ISO like a user's cloud image: the user-data's user logs in over SSH with its key only,
``cloud-init status --wait`` ends ``status: done``, runcmd ran, the guest agent answers;
root and passwords are locked; a wrong key is refused. The root disk boots on virtio-blk
and on SATA, and the seed is found on a SATA CD-ROM and on a virtio disk."""

from __future__ import annotations

import re
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from rootdisk.cloudguest import build_cloud_guest, read_manifest
from tests.fixtures.cloudvm import CloudVM, agent_exec, keypair, seed_iso, user_data

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]
USER = "tester"
RUNCMD_FILE = "/var/tmp/rootdisk-runcmd"
RUNCMD_TEXT = "user-data-ran"
SSH_WAIT = 420.0  # TCG on a shared, loaded 2-core machine; typically well under 2 min


@dataclass
class Booted:
    vm: CloudVM
    key: Path
    workdir: Path


@pytest.fixture(scope="module")
def image() -> Path:
    for tool in ("qemu-system-x86_64", "xorrisofs", "ssh", "ssh-keygen", "mmdebstrap"):
        if not shutil.which(tool):
            pytest.fail(f"{tool} is missing: make setup installs it")
    return build_cloud_guest()


def boot(image: Path, workdir: Path, bus: str, seed_bus: str) -> Iterator[Booted]:
    key, public = keypair(workdir)
    seed = seed_iso(
        workdir,
        user_data(USER, public, runcmd_file=RUNCMD_FILE, runcmd_text=RUNCMD_TEXT),
        instance_id=f"i-{bus}",
        hostname=f"guest-{bus}",
    )
    vm = CloudVM(image, seed, workdir, disk_bus=bus, seed_bus=seed_bus)
    vm.start()
    try:
        seconds = vm.wait_ssh(key, USER, timeout=SSH_WAIT)
        print(f"{bus}: SSH login {seconds:.1f}s after QEMU started")
        yield Booted(vm, key, workdir)
    finally:
        vm.close()


@pytest.fixture(scope="module")
def virtio_guest(image: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Booted]:
    yield from boot(image, tmp_path_factory.mktemp("virtio"), "virtio", "sata")


def test_cloud_init_finishes_and_user_data_ran(virtio_guest: Booted) -> None:
    vm, key = virtio_guest.vm, virtio_guest.key
    done = vm.ssh(key, USER, "cloud-init status --wait", timeout=300)
    assert done.returncode == 0, done.stderr
    assert "status: done" in done.stdout
    ran = vm.ssh(key, USER, f"cat {RUNCMD_FILE}; hostname", timeout=60)
    assert ran.stdout.split() == [RUNCMD_TEXT, "guest-virtio"]


def test_the_user_has_sudo_and_no_password_root_is_locked(virtio_guest: Booted) -> None:
    vm, key = virtio_guest.vm, virtio_guest.key
    out = vm.ssh(key, USER, f"sudo -n passwd -S root; sudo -n passwd -S {USER}", timeout=60)
    assert out.returncode == 0, out.stderr
    statuses = {line.split()[0]: line.split()[1] for line in out.stdout.splitlines()}
    assert statuses == {"root": "L", USER: "L"}, out.stdout
    sshd = vm.ssh(key, USER, "sudo -n sshd -T", timeout=60)
    assert "passwordauthentication no" in sshd.stdout
    assert "permitrootlogin no" in sshd.stdout


def test_the_guest_agent_answers_on_its_virtio_serial_port(virtio_guest: Booted) -> None:
    code, out = agent_exec(virtio_guest.vm.agent_socket, ["/bin/cat", RUNCMD_FILE])
    assert (code, out.strip()) == (0, RUNCMD_TEXT)


def test_a_key_cloud_init_did_not_install_is_refused(virtio_guest: Booted) -> None:
    vm = virtio_guest.vm
    other, _ = keypair(virtio_guest.workdir, "other")
    wrong = vm.ssh(other, USER, "true", timeout=60)
    assert wrong.returncode == 255
    assert "Permission denied (publickey)" in wrong.stderr
    as_root = vm.ssh(virtio_guest.key, "root", "true", timeout=60)
    assert as_root.returncode == 255
    assert "Permission denied" in as_root.stderr


def test_boot_is_measured_by_systemd(virtio_guest: Booted) -> None:
    """What dominates the boot, printed for the report (systemd-analyze over SSH)."""
    vm, key = virtio_guest.vm, virtio_guest.key
    # systemd-analyze refuses while the boot's jobs still run (SSH answers before):
    # wait for them first, so the test does not depend on running after the others.
    out = vm.ssh(key, USER, "systemctl is-system-running --wait >/dev/null;"
                 " systemd-analyze; systemd-analyze blame | head -12", timeout=120)
    assert out.returncode == 0, out.stderr
    print(out.stdout)
    assert re.search(r"Startup finished in .*\(kernel\)", out.stdout)


def test_the_root_disk_boots_on_sata_with_the_seed_on_virtio(image: Path, tmp_path: Path) -> None:
    for booted in boot(image, tmp_path, "sata", "virtio"):
        out = booted.vm.ssh(booted.key, USER, "findmnt -no SOURCE /; cloud-init status --wait")
        assert out.returncode == 0, out.stderr
        assert out.stdout.split()[0] == "/dev/sda2"
        assert "status: done" in out.stdout


def test_the_manifest_names_the_kernel_and_every_package(image: Path) -> None:
    manifest = read_manifest(image)
    packages = manifest["packages"]
    assert isinstance(packages, dict)
    for name in ("cloud-init", "openssh-server", "qemu-guest-agent", "sudo", "systemd-sysv"):
        assert name in packages
    assert str(manifest["kernel"]).endswith("-amd64")
    assert "passwd" in packages  # the Essential set too
