"""Containers as bubblewrap sandboxes: mounts, env, logs, signals, exit codes."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import pytest

from localcluster.kubelet import sandbox
from localcluster.kubelet.cgroups import CgroupManager, Limits
from localcluster.kubelet.sandbox import (
    Container,
    LogWriter,
    Mount,
    SandboxSpec,
    bwrap_argv,
    read_log,
    writable_tmpfs,
)
from localcluster.kubelet.security import Confinement

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("bwrap") is None, reason="needs root and bubblewrap")

TESTBOX = os.path.join(os.path.dirname(os.path.dirname(__file__)), "testbox.py")


def spec(tmp_path, *words: str, **kw) -> SandboxSpec:
    env = {"PATH": os.path.dirname(sys.executable) + ":/usr/bin:/bin", "POD_NAME": "box"}
    env.update(kw.pop("env", {}))
    return SandboxSpec(argv=["python", TESTBOX, *words], env=env,
                       log_path=str(tmp_path / "logs" / "c.log"), **kw)


def run(s: SandboxSpec, timeout: float = 30) -> tuple[int, str]:
    c = Container(s)
    c.start()
    code = c.wait(timeout)
    assert code is not None, "container did not finish"
    return c.exit_code(), read_log(s.log_path).decode()


def test_exit_code_env_and_logs(tmp_path) -> None:
    code, log = run(spec(tmp_path, "print", "hello", "stderr", "oops", "env", "FOO", "exit", "3",
                         env={"FOO": "bar"}))
    assert code == 3
    assert log.splitlines() == ["hello", "oops", "FOO=bar"]


def test_host_environment_does_not_leak(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("SECRET_OF_HOST", "x")
    _, log = run(spec(tmp_path, "env", "SECRET_OF_HOST"))
    assert log.strip() == "SECRET_OF_HOST=<unset>"


def test_volume_dir_and_device_at_their_paths(tmp_path) -> None:
    vol = tmp_path / "vol"
    vol.mkdir()
    (vol / "in").write_text("from host")
    img = tmp_path / "blk.img"
    img.write_bytes(b"\0" * 1024 * 1024)
    dev = subprocess.check_output(["losetup", "--find", "--show", str(img)], text=True).strip()
    try:
        s = spec(tmp_path, "read", "/data/in", "write", "/data/out", "from pod",
                 "blocksize", "/dev/xvda", "statfs", "/data",
                 mounts=[Mount(str(vol), "/data"), Mount(dev, "/dev/xvda", device=True)])
        code, log = run(s)
    finally:
        subprocess.run(["losetup", "-d", dev], check=True)
    assert code == 0, log
    lines = log.splitlines()
    assert lines[0] == "read: from host"
    assert lines[1] == f"blocksize {1024 * 1024}"
    assert json.loads(lines[2])["path"] == "/data"
    assert (vol / "out").read_text() == "from pod"


def test_readonly_mount_refuses_writes(tmp_path) -> None:
    vol = tmp_path / "cfg"
    vol.mkdir()
    code, log = run(spec(tmp_path, "write", "/cfg/x", "y",
                         mounts=[Mount(str(vol), "/cfg", read_only=True)]))
    assert code == 1 and "Read-only file system" in log


def test_termination_message_file_and_fallback(tmp_path) -> None:
    msg = tmp_path / "termination"
    msg.touch()
    s = spec(tmp_path, "message", '{"reason": "NotFound"}', "exit", "1",
             termination_host_file=str(msg))
    c = Container(s)
    c.start()
    assert c.wait(30) == 1
    assert c.termination_message(fallback_to_logs=True) == '{"reason": "NotFound"}'
    msg2 = tmp_path / "termination2"
    msg2.touch()
    s2 = spec(tmp_path, "print", "last words", "exit", "2", termination_host_file=str(msg2))
    c2 = Container(s2)
    c2.start()
    assert c2.wait(30) == 2
    assert c2.termination_message(fallback_to_logs=False) == ""
    assert c2.termination_message(fallback_to_logs=True).endswith("last words")


def wait_up(c: Container, timeout: float = 60) -> None:
    """Wait until the box printed "up": the steps before it (a SIGTERM handler) are in
    place. A readiness signal, not a guess at how long a loaded machine takes."""
    deadline = time.monotonic() + timeout
    while "up" not in read_log(c.spec.log_path).decode().splitlines():
        assert c.poll() is None, "container ended before it was up"
        assert time.monotonic() < deadline, "container never said it was up"
        time.sleep(0.02)


def test_sigterm_then_sigkill_after_grace(tmp_path) -> None:
    polite = Container(spec(tmp_path, "trap-term", "0", "print", "up", "sleep", "60"))
    polite.start()
    wait_up(polite)
    code = polite.stop(grace=10)
    log = read_log(polite.spec.log_path).decode()
    assert code == 0, log
    assert "got SIGTERM" in log

    stubborn = Container(spec(tmp_path / "s", "ignore-term", "print", "up", "sleep", "60"))
    stubborn.start()
    wait_up(stubborn)
    t0 = time.monotonic()
    stubborn.stop(grace=1)
    assert stubborn.exit_code() == 128 + signal.SIGKILL
    assert time.monotonic() - t0 >= 0.9  # it was given its grace period first
    assert "up" in read_log(stubborn.spec.log_path).decode()


def test_default_sigterm_exit_code(tmp_path) -> None:
    c = Container(spec(tmp_path, "print", "up", "sleep", "60"))
    c.start()
    wait_up(c)
    c.stop(grace=10)
    assert c.exit_code() == 128 + signal.SIGTERM


def test_missing_program_fails_like_a_crash(tmp_path) -> None:
    s = SandboxSpec(argv=["python", "-m", "no_such_module_here"],
                    env={"PATH": os.path.dirname(sys.executable) + ":/usr/bin"},
                    log_path=str(tmp_path / "l.log"))
    code, log = run(s)
    assert code == 1 and "No module named no_such_module_here" in log


def test_bwrap_argv_binds_volumes_after_system_paths(tmp_path) -> None:
    argv = bwrap_argv(spec(tmp_path, "exit", "0", mounts=[Mount("/h", "/c", read_only=True)],
                           cwd="/c"))
    assert argv[0] == "bwrap"
    assert argv.index("--ro-bind") < argv.index("/h")
    assert argv[argv.index("/h") - 1] == "--ro-bind"
    assert argv[argv.index("--chdir") + 1] == "/c"
    command = argv[argv.index("--") + 1:]
    assert command[0] == "/usr/bin/setpriv"
    assert command[command.index("--") + 1] == "python"


def test_log_rotation_bounds_the_log(tmp_path) -> None:
    r, w = os.pipe()
    path = str(tmp_path / "rot.log")
    writer = LogWriter(r, path, max_bytes=1000)
    writer.start()
    for i in range(50):
        os.write(w, f"line {i:04d} ".encode() * 10 + b"\n")
    os.close(w)
    writer.join(5)
    assert os.path.getsize(path) <= 1000 + 200
    assert os.path.exists(path + ".1")
    assert read_log(path).decode().splitlines()[-1].startswith("line 0049")


def test_memory_limit_applies_where_cgroups_are_writable(tmp_path) -> None:
    mgr = CgroupManager(prefix=f"localcluster-test-{os.getpid()}")
    probe = mgr.create("probe", Limits(memory=64 * 1024 * 1024))
    if probe is None:
        pytest.skip("memory limits cannot be enforced here (no usable cgroup hierarchy)")
    probe.remove()
    s = SandboxSpec(
        argv=["python", "-c", "x = bytearray(256 * 1024 * 1024); print('allocated')"],
        env={"PATH": os.path.dirname(sys.executable) + ":/usr/bin"},
        log_path=str(tmp_path / "m.log"), limits=Limits(memory=64 * 1024 * 1024))
    c = Container(s, cgroups=mgr, name="memhog")
    c.start()
    assert c.wait(60) is not None
    try:
        assert c.exit_code() == 137
        assert c.oom_killed()
        assert "allocated" not in read_log(s.log_path).decode()
    finally:
        c.cleanup()
        for sub in ("", "memory", "cpu"):
            d = os.path.join(mgr.root, sub, mgr.prefix)
            if os.path.isdir(d):
                os.rmdir(d)


def test_volume_inside_etc(tmp_path) -> None:
    vol = tmp_path / "certs"
    vol.mkdir()
    (vol / "tls.crt").write_text("cert")
    code, log = run(spec(tmp_path, "read", "/etc/webhook/certs/tls.crt", "read", "/etc/hosts",
                         mounts=[Mount(str(vol), "/etc/webhook/certs", read_only=True)]))
    assert code == 0, log
    with open("/etc/hosts") as fh:
        assert log == f"read: cert\nread: {fh.read()}\n"


def test_exit_is_announced_once_the_container_ended_and_leaves_the_status(tmp_path) -> None:
    """The kubelet's worker is woken by ``on_exit`` instead of finding the exit at its
    next tick: the call comes only after the process ended, and it does not reap it
    (the exit code is still there to collect)."""
    import threading

    def watched(*words: str, where) -> tuple[Container, threading.Event, list[int | None]]:
        ended, seen = threading.Event(), []
        c = Container(spec(where, *words), on_exit=lambda: (seen.append(c.poll()), ended.set()))
        return c, ended, seen

    c, ended, seen = watched("print", "up", "sleep", "60", where=tmp_path)
    c.start()
    wait_up(c)
    assert not ended.is_set()  # running: nothing announced
    c.signal(signal.SIGKILL)
    assert ended.wait(60), "the exit was never announced"
    assert seen == [128 + signal.SIGKILL]  # already over when announced (bwrap's status)
    assert c.exit_code() == 128 + signal.SIGKILL

    quick, ended, seen = watched("exit", "4", where=tmp_path / "q")
    quick.start()
    assert ended.wait(60), "the exit was never announced"
    assert seen == [4]
    assert quick.exit_code() == 4


MiB = 1 << 20


def _usage_once_at_least(c: Container, n: int, timeout: float = 30) -> int:
    deadline = time.monotonic() + timeout
    while (used := c.writable_usage()) < n and time.monotonic() < deadline:
        assert c.poll() is None, "the container ended early"
        time.sleep(0.05)
    return used


def _file_once_at_least(path, n: int, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while (not path.exists() or path.stat().st_size < n) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert path.stat().st_size >= n


def test_writable_usage_is_what_the_sandbox_wrote_into_its_own_tmpfs(tmp_path) -> None:
    """The writable layer (what counts against an ``ephemeral-storage`` limit) is the
    sandbox's own tmpfs mounts, its root and its private /tmp; a volume's bytes are not
    in it; once the container ended it holds nothing."""
    vol = tmp_path / "vol"
    vol.mkdir()
    s = spec(tmp_path, "fill", "/tmp/f", "3", "fill", "/big", "2", "fill", "/data/v", "4",
             "sleep", "60", mounts=[Mount(str(vol), "/data")])
    assert writable_tmpfs(s) == ["/", "/tmp"]
    c = Container(s)
    c.start()
    try:
        _usage_once_at_least(c, 5 * MiB)
        _file_once_at_least(vol / "v", 4 * MiB)
        used = c.writable_usage()
        assert 5 * MiB <= used < 6 * MiB, used
    finally:
        c.stop(grace=0)
    assert c.writable_usage() == 0


def test_a_read_only_root_has_no_writable_layer_unless_a_volume_makes_one(tmp_path) -> None:
    """Read-only root: no tmpfs of its own to write in, so nothing counts (its volume's
    bytes are the volume's); a volume inside /usr makes /usr a tmpfs, which counts; /etc
    is a tmpfs made read-only, which does not."""
    vol = tmp_path / "vol"
    vol.mkdir()
    ro = Confinement(read_only_root=True)
    s = spec(tmp_path, "fill", "/data/v", "4", "sleep", "60",
             mounts=[Mount(str(vol), "/data")], confinement=ro)
    assert writable_tmpfs(s) == []
    c = Container(s)
    c.start()
    try:
        _file_once_at_least(vol / "v", 4 * MiB)
        assert c.poll() is None and c.writable_usage() == 0
    finally:
        c.stop(grace=0)
    at_tmp = spec(tmp_path, "exit", "0", mounts=[Mount(str(vol), "/tmp")])
    assert writable_tmpfs(at_tmp) == ["/"]
    in_etc = spec(tmp_path, "exit", "0", mounts=[Mount(str(vol), "/etc/webhook/certs")],
                  confinement=ro)
    assert writable_tmpfs(in_etc) == []
    in_usr = spec(tmp_path, "exit", "0", mounts=[Mount(str(vol), "/usr/share/extra")],
                  confinement=ro)
    assert writable_tmpfs(in_usr) == ["/usr"]


def test_a_checkout_under_tmp_runs_in_a_sandbox_with_a_private_tmp(tmp_path, monkeypatch) -> None:
    """A clone under /tmp works: the checkout is bound over the sandbox's private /tmp, so
    its programs run there (pods once got `setpriv: failed to execute …/.venv/bin/python`
    from a checkout under /tmp), while the rest of the host's /tmp stays out of sight."""
    outside = tempfile.mkdtemp(prefix="rootdisk-checkout-", dir="/tmp")
    try:
        checkout = os.path.join(outside, "rd")
        os.mkdir(checkout)
        with open(os.path.join(checkout, "prog.py"), "w") as f:
            f.write("import os, sys\nprint('ran', sys.argv[1])\n"
                    "print('sibling', os.path.exists(sys.argv[2]))\n")
        sibling = os.path.join(outside, "sibling")
        open(sibling, "w").close()
        monkeypatch.setattr(sandbox, "project_root", lambda: checkout)
        s = SandboxSpec(argv=["python", os.path.join(checkout, "prog.py"), "from-tmp", sibling],
                        env={"PATH": os.path.dirname(sys.executable) + ":/usr/bin:/bin"},
                        log_path=str(tmp_path / "logs" / "c.log"))
        code, log = run(s)
    finally:
        shutil.rmtree(outside)
    assert code == 0, log
    assert log.splitlines() == ["ran from-tmp", "sibling False"]
