"""The Debian cloud guest boots under QEMU (TCG) and takes cloud-init from a NoCloud seed
ISO like a user's cloud image: the user-data's user logs in over SSH with its key only,
``cloud-init status --wait`` ends ``status: done``, runcmd ran, the guest agent answers;
root and passwords are locked; a wrong key is refused.

One boot serves every test here (a boot costs minutes of the suite's two cores under
TCG): the root disk on SATA (AHCI, as KubeVirt's ``bus: sata``) and the seed on a SATA
CD-ROM, the two buses no other test boots this guest from. The virtio-blk root and a
seed on a virtio disk are what every VM of tests/e2e/test_vm_cloudguest.py and
tests/e2e/test_demo.py boots with."""

from __future__ import annotations

import re
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from rootdisk.cloudguest import build_cloud_guest, read_manifest
from tests.fixtures.cloudvm import CloudVM, agent_exec, keypair, seed_iso, user_data

pytestmark = [pytest.mark.slow, pytest.mark.cloud_guest, pytest.mark.timeout(900)]
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
def guest(image: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Booted]:
    yield from boot(image, tmp_path_factory.mktemp("sata"), "sata", "sata")


def test_cloud_init_finishes_and_user_data_ran(guest: Booted) -> None:
    vm, key = guest.vm, guest.key
    done = vm.ssh(key, USER, "cloud-init status --wait", timeout=300)
    assert done.returncode == 0, done.stderr
    assert "status: done" in done.stdout
    ran = vm.ssh(key, USER, f"cat {RUNCMD_FILE}; hostname", timeout=60)
    assert ran.stdout.split() == [RUNCMD_TEXT, "guest-sata"]


def test_the_user_has_sudo_and_no_password_root_is_locked(guest: Booted) -> None:
    vm, key = guest.vm, guest.key
    out = vm.ssh(key, USER, f"sudo -n passwd -S root; sudo -n passwd -S {USER}", timeout=60)
    assert out.returncode == 0, out.stderr
    statuses = {line.split()[0]: line.split()[1] for line in out.stdout.splitlines()}
    assert statuses == {"root": "L", USER: "L"}, out.stdout
    sshd = vm.ssh(key, USER, "sudo -n sshd -T", timeout=60)
    assert "passwordauthentication no" in sshd.stdout
    assert "permitrootlogin no" in sshd.stdout


def test_the_guest_agent_answers_on_its_virtio_serial_port(guest: Booted) -> None:
    code, out = agent_exec(guest.vm.agent_socket, ["/bin/cat", RUNCMD_FILE])
    assert (code, out.strip()) == (0, RUNCMD_TEXT)


def test_a_key_cloud_init_did_not_install_is_refused(guest: Booted) -> None:
    vm = guest.vm
    other, _ = keypair(guest.workdir, "other")
    wrong = vm.ssh(other, USER, "true", timeout=60)
    assert wrong.returncode == 255
    assert "Permission denied (publickey)" in wrong.stderr
    as_root = vm.ssh(guest.key, "root", "true", timeout=60)
    assert as_root.returncode == 255
    assert "Permission denied" in as_root.stderr


def test_boot_is_measured_by_systemd(guest: Booted) -> None:
    """What dominates the boot, printed for the report (systemd-analyze over SSH)."""
    vm, key = guest.vm, guest.key
    # systemd-analyze refuses while the boot's jobs still run (SSH answers before):
    # wait for them first, so the test does not depend on running after the others.
    out = vm.ssh(key, USER, "systemctl is-system-running --wait >/dev/null;"
                 " systemd-analyze; systemd-analyze blame | head -12", timeout=120)
    assert out.returncode == 0, out.stderr
    print(out.stdout)
    assert re.search(r"Startup finished in .*\(kernel\)", out.stdout)


def test_the_root_disk_is_on_sata_and_the_seed_on_a_cdrom(guest: Booted) -> None:
    """Root mounted from the AHCI disk (no virtio-blk disk at all), the seed a CD-ROM
    labelled cidata: the only place the hostname and the user could come from."""
    vm, key = guest.vm, guest.key
    out = vm.ssh(key, USER, "findmnt -no SOURCE /; lsblk -dno NAME,TYPE,LABEL", timeout=60)
    assert out.returncode == 0, out.stderr
    [root, *devices] = out.stdout.splitlines()
    assert root == "/dev/sda2", out.stdout
    assert [d.split() for d in devices] == [["sda", "disk"], ["sr0", "rom", "cidata"]], out.stdout


def test_the_manifest_names_the_kernel_and_every_package(image: Path) -> None:
    manifest = read_manifest(image)
    packages = manifest["packages"]
    assert isinstance(packages, dict)
    for name in ("cloud-init", "openssh-server", "qemu-guest-agent", "sudo", "systemd-sysv"):
        assert name in packages
    assert str(manifest["kernel"]).endswith("-amd64")
    assert "passwd" in packages  # the Essential set too
