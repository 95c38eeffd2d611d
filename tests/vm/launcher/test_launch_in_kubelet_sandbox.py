"""The launcher's libvirt driver in the kubelet's own sandbox (localcluster/kubelet/
sandbox.py), as a launcher pod gets it: uid 107 without capabilities, a user namespace
of its own, only the host /etc entries programs need (no passwd: the driver brings its
own user record), /sys's virtual block devices masked. The QEMU driver runs as a real pod
in tests/e2e/test_vm.py."""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

import pytest

from localcluster.kubelet.sandbox import Container, Mount, SandboxSpec, read_log
from localcluster.kubelet.security import Confinement
from tests.fixtures.guests import write_boot_sector_disk
from tests.vm.launcher.harness import REPO, make_vmi

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("bwrap") is None
    or shutil.which("qemu-system-x86_64") is None
    or shutil.which("libvirtd", path="/usr/sbin:/usr/bin") is None,
    reason="needs root, bubblewrap, QEMU and libvirtd")

UID = 107


def test_libvirt_driver_boots_in_the_kubelets_sandbox(tmp_path: Path) -> None:
    dirs = {}
    for name in ("priv", "pub", "sock", "libvirt", "eph"):
        d = tmp_path / name
        d.mkdir()
        os.chown(d, UID, UID)
        dirs[name] = d
    disk = dirs["priv"] / "vmi-disks" / "root"
    disk.mkdir(parents=True)
    write_boot_sector_disk(disk / "disk.img", poweroff=True)
    for p in (dirs["priv"] / "vmi-disks", disk, disk / "disk.img"):
        os.chown(p, UID, UID)
    term = tmp_path / "term"
    term.touch()
    os.chmod(term, 0o666)  # noqa: S103 - as the kubelet: any container uid writes it
    env = {"VMI": json.dumps(make_vmi(memory="256Mi")), "LAUNCHER_DRIVER": "libvirt",
           "HOME": "/", "PATH": f"{os.path.dirname(sys.executable)}:/usr/sbin:/usr/bin"}
    spec = SandboxSpec(
        argv=[sys.executable, "-m", "vm.launcher"], env=env, cwd=str(REPO),
        log_path=str(tmp_path / "c.log"), termination_host_file=str(term),
        mounts=[Mount(str(dirs["priv"]), "/var/run/kubevirt-private"),
                Mount(str(dirs["pub"]), "/var/run/kubevirt"),
                Mount(str(dirs["sock"]), "/var/run/kubevirt/sockets"),
                Mount(str(dirs["libvirt"]), "/var/run/libvirt"),
                Mount(str(dirs["eph"]), "/var/run/kubevirt-ephemeral-disks")],
        confinement=Confinement(uid=UID, gid=UID, groups=(UID,), caps=frozenset(),
                                fs_group=UID))
    c = Container(spec)
    c.start()
    try:
        assert c.wait(240) == 0, read_log(spec.log_path).decode()[-4000:]
    finally:
        c.kill()
    result = json.loads(term.read_text())
    assert result == {**result, "phase": "Succeeded", "reason": "GuestShutdown",
                      "driver": "libvirt"}
