"""The host mounts a sandbox shares stay read-only and masked whatever capabilities the
container holds short of ``privileged``: the container runs in a user namespace of its
own, entered after bubblewrap made its mounts, so it holds no capability over its mount
namespace, and a mount namespace it makes itself copies every mount locked.

Real bubblewrap sandboxes (root and bwrap needed); the same attempts through a pod on a
running cluster are in tests/localcluster/test_cluster_hostmounts.py."""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Iterator

import pytest

from localcluster.kubelet.sandbox import Container, SandboxSpec, read_log
from localcluster.kubelet.security import DEFAULT_CAPS, Confinement

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("bwrap") is None, reason="needs root and bubblewrap")

TESTBOX = os.path.join(os.path.dirname(os.path.dirname(__file__)), "testbox.py")

ATTACK = ("try-mount", "none", "/usr", "none", "remount,bind",
          "try-mount", "none", "/etc", "none", "remount,bind",
          "try-mount", "none", "/sys", "none", "remount,bind",
          "try-umount", "/etc/shadow",
          "try-unshare-mount",
          "try-mount", "none", "/usr", "none", "remount,bind",
          "try-umount", "/etc/shadow",
          "try-write", "/usr/rootdisk-host-mounts-escape", "x")  # MARKER
"""Remount /usr, /etc and /sys read-write and unmount the mask over /etc/shadow; then
the same from a mount namespace of the container's own."""


def attempts(out: str) -> list[str]:
    return [line for line in out.splitlines()
            if line.split(":")[0] in ("mount", "umount", "unshare", "write")]


def run_box(tmp_path, conf: Confinement) -> list[str]:
    env = {"PATH": os.path.dirname(sys.executable) + ":/usr/bin:/bin"}
    spec = SandboxSpec(argv=["python", TESTBOX, *ATTACK], env=env,
                       log_path=str(tmp_path / "c.log"), confinement=conf)
    c = Container(spec)
    c.start()
    assert c.wait(60) is not None, "the sandbox did not finish"
    assert c.exit_code() == 0
    return attempts(read_log(spec.log_path).decode())


MARKER = "/usr/rootdisk-host-mounts-escape"


@pytest.fixture(autouse=True)
def no_marker() -> Iterator[None]:
    """The escape's file must not be there before; removed if broken code wrote it."""
    assert not os.path.exists(MARKER)
    yield
    if os.path.exists(MARKER):
        os.remove(MARKER)
        pytest.fail(f"the sandbox wrote {MARKER} on the host")


def test_sys_admin_cannot_remount_host_mounts_or_unmount_a_mask(tmp_path) -> None:
    assert os.path.exists("/etc/shadow")
    got = run_box(tmp_path, Confinement(caps=DEFAULT_CAPS | {"SYS_ADMIN"}, seccomp=True))
    assert got == ["mount: EPERM", "mount: EPERM", "mount: EPERM", "umount: EPERM",
                   "unshare: OK",  # SYS_ADMIN in its own user namespace ...
                   "mount: EPERM", "umount: EINVAL",  # ... over locked copies only
                   "write: EROFS"]


def test_unconfined_sys_admin_cannot_either(tmp_path) -> None:
    got = run_box(tmp_path, Confinement(caps=DEFAULT_CAPS | {"SYS_ADMIN"}, seccomp=False))
    assert got[:4] == ["mount: EPERM"] * 3 + ["umount: EPERM"]
    assert got[5:] == ["mount: EPERM", "umount: EINVAL", "write: EROFS"]


def test_privileged_keeps_full_power_over_its_mounts(tmp_path) -> None:
    """privileged: true is the node's own power, as on a real node; the remount only
    changes the sandbox's bind of /usr (the write is not tried)."""
    conf = Confinement(caps=DEFAULT_CAPS, privileged=True, seccomp=False)
    env = {"PATH": os.path.dirname(sys.executable) + ":/usr/bin:/bin"}
    spec = SandboxSpec(argv=["python", TESTBOX, *ATTACK[:17]], env=env,
                       log_path=str(tmp_path / "c.log"), confinement=conf)
    c = Container(spec)
    c.start()
    assert c.wait(60) is not None
    got = attempts(read_log(spec.log_path).decode())
    assert got[:4] == ["mount: OK"] * 3 + ["umount: OK"]
