"""The host mounts a sandbox shares stay read-only and masked whatever capabilities the
container holds short of ``privileged``: the container runs in a user namespace of its
own, entered after bubblewrap made its mounts, so it holds no capability over its mount
namespace, and a mount namespace it makes itself copies every mount locked.

Real bubblewrap sandboxes (root and bwrap needed); the same attempts through a pod on a
running cluster are in tests/localcluster/test_cluster_hostmounts.py."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator

import pytest

from localcluster.kubelet.sandbox import Container, Mount, SandboxSpec, read_log
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


def test_other_loop_devices_backing_files_are_hidden(tmp_path) -> None:
    """/sys shows the container its own Block volume's loop device, and no other's
    backing file (the host path of another pod's volume)."""
    devices = []
    try:
        for name in ("mine.img", "theirs.img"):
            img = tmp_path / name
            img.write_bytes(b"\0" * 1024 * 1024)
            devices.append(subprocess.check_output(
                ["losetup", "--find", "--show", str(img)], text=True).strip())
        mine, theirs = (os.path.basename(d) for d in devices)
        paths = [f"/sys/devices/virtual/block/{mine}/loop/backing_file",
                 f"/sys/devices/virtual/block/{theirs}/loop/backing_file",
                 f"/sys/block/{theirs}/loop/backing_file",
                 f"/sys/class/block/{theirs}/loop/backing_file"]
        env = {"PATH": os.path.dirname(sys.executable) + ":/usr/bin:/bin"}
        words = [w for p in paths for w in ("try-open", p)]
        spec = SandboxSpec(argv=["python", TESTBOX, *words], env=env,
                           log_path=str(tmp_path / "c.log"),
                           mounts=[Mount(devices[0], "/dev/xvda", device=True)])
        c = Container(spec)
        c.start()
        assert c.wait(60) is not None
        out = read_log(spec.log_path).decode()
    finally:
        for d in devices:
            subprocess.run(["losetup", "-d", d], check=False)
    got = [line.split()[1] for line in out.splitlines() if line.startswith("open:")]
    assert got == ["OK", "ENOENT", "ENOENT", "ENOENT"], out


ETC_PROBES = ("/etc/passwd", "/etc/group", "/etc/machine-id", "/etc/pip.conf",
              "/etc/gitconfig", "/etc/ssh", "/etc/hostname", "/etc/ld.so.cache",
              "/etc/resolv.conf", "/etc/ssl/certs", "/etc/nsswitch.conf")


def etc_listing(tmp_path, conf: Confinement) -> dict[str, bool]:
    script = ("import os, sys\nfor p in sys.argv[1:]:\n"
              "    print(p, os.path.lexists(p))\n")
    env = {"PATH": os.path.dirname(sys.executable) + ":/usr/bin:/bin"}
    spec = SandboxSpec(argv=["python", "-c", script, *ETC_PROBES], env=env,
                       log_path=str(tmp_path / f"etc-{conf.privileged}.log"), confinement=conf)
    c = Container(spec)
    c.start()
    assert c.wait(60) is not None and c.exit_code() == 0
    out = read_log(spec.log_path).decode()
    return {line.split()[0]: line.split()[1] == "True" for line in out.splitlines()}


def test_etc_holds_what_programs_need_and_not_the_nodes_accounts_or_keys(tmp_path) -> None:
    """The importer (every non-privileged container) sees no host passwd, SSH keys,
    machine-id or tools' credentials; the loader cache, resolver and CA certificates
    are there. A privileged container keeps the node's /etc (secrets still masked)."""
    seen = etc_listing(tmp_path, Confinement(uid=107, gid=107, caps=frozenset()))
    for path in ("/etc/passwd", "/etc/group", "/etc/machine-id", "/etc/pip.conf",
                 "/etc/gitconfig", "/etc/hostname"):
        assert not seen[path], path
    for path in ("/etc/ld.so.cache", "/etc/resolv.conf", "/etc/ssl/certs",
                 "/etc/nsswitch.conf"):
        assert seen[path] == os.path.lexists(path), path
    host = etc_listing(tmp_path, Confinement(privileged=True, seccomp=False))
    assert host == {p: os.path.lexists(p) for p in ETC_PROBES}


def test_no_user_namespace_no_container(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A node that cannot make the user namespace does not run the container without
    it: the start fails (RunContainerError in the pod) naming the cause."""
    from localcluster.kubelet import userns
    from localcluster.kubelet.sandbox import SandboxError

    monkeypatch.setattr(userns, "UNSHARE", str(tmp_path / "no-unshare"))
    with pytest.raises(userns.UsernsError, match=r"cannot run .*no-unshare"):
        userns.identity_userns()
    spec = SandboxSpec(argv=["true"], env={}, log_path=str(tmp_path / "c.log"),
                       confinement=Confinement())
    with pytest.raises(SandboxError, match="no-unshare"):
        Container(spec).start()
    # a privileged container needs none
    ok = SandboxSpec(argv=["true"], env={"PATH": "/usr/bin:/bin"},
                     log_path=str(tmp_path / "p.log"),
                     confinement=Confinement(privileged=True, seccomp=False))
    c = Container(ok)
    c.start()
    assert c.wait(30) == 0
