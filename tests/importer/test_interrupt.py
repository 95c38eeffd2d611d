"""An import stopped by SIGTERM (kubelet stop, ``timeout``, Ctrl-C) or SIGKILL: children
stopped, the temporary directory gone, and nothing under the destination's name."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from importer import nbd
from tests.fixtures.httpserver import Faults, HttpServer
from tests.fixtures.images import ImageFactory
from tests.importer.test_entrypoints import ROOTDISK

MiB = 1024 * 1024


def _children(pid: int) -> dict[int, str]:
    """The live children of ``pid``: {pid: command line}."""
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if int(stat.rsplit(")", 1)[1].split()[1]) == pid and " Z" not in stat[:60]:
            found[int(entry.name)] = cmdline
    return found


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def _wait_until(condition: object, what: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if callable(condition) and condition():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.fixture
def slow_qcow2(images: ImageFactory, http_server: HttpServer) -> Iterator[str]:
    url = http_server.publish(images.get("qcow2").path, "slow.qcow2")
    http_server.set_faults("slow.qcow2", Faults(rate=1 * MiB))
    yield url


def _start(url: str, dest: Path, tmpdir: Path) -> subprocess.Popen[str]:
    env = {**os.environ, "TMPDIR": str(tmpdir)}
    return subprocess.Popen([str(ROOTDISK), "import", url, str(dest), "--json"], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _reap(proc: subprocess.Popen[str]) -> None:
    if proc.poll() is None:
        proc.kill()
    with proc:  # closes the pipes
        proc.wait()


def _converting(proc: subprocess.Popen[str], partial: Path) -> dict[int, str]:
    """Wait until nbdkit and qemu-img convert run (exec'd, not still setpriv) and the
    partial disk has data; their pids and command lines."""
    seen: dict[int, str] = {}

    def ready() -> bool:
        if proc.poll() is not None:  # ended before converting: say why, at once
            out, err = proc.communicate()
            raise AssertionError(f"the import ended ({proc.returncode}) before converting: "
                                 f"{out} {err}")
        seen.update(_children(proc.pid))
        return any(c.startswith("qemu-img convert") for c in seen.values()) and \
            any(c.startswith("nbdkit") for c in seen.values()) and \
            partial.exists() and partial.stat().st_blocks > 0

    _wait_until(ready, "nbdkit and qemu-img convert to run")
    return seen


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_stopped_import_cleans_up(slow_qcow2: str, tmp_path: Path,
                                  sig: signal.Signals) -> None:
    tmpdir = tmp_path / "tmp"
    tmpdir.mkdir()
    volume = tmp_path / "out"
    volume.mkdir()
    dest = volume / "disk.img"
    proc = _start(slow_qcow2, dest, tmpdir)
    try:
        kids = _converting(proc, volume / ".disk.img.partial")
        proc.send_signal(sig)
        out, err = proc.communicate(timeout=60)
    finally:
        _reap(proc)
    assert proc.returncode == 1, err
    message = json.loads(out)
    assert message["reason"] == "Interrupted" and message["retryable"] is True
    assert signal.Signals(sig).name in message["message"]
    assert not [pid for pid in kids if _alive(pid)], kids
    assert list(tmpdir.iterdir()) == []  # the header file's directory included
    assert list(volume.iterdir()) == []  # no disk, not even a partial one


def test_killed_import_takes_its_children_and_names_its_leftover(slow_qcow2: str,
                                                                 tmp_path: Path) -> None:
    tmpdir = tmp_path / "tmp"
    tmpdir.mkdir()
    volume = tmp_path / "out"
    volume.mkdir()
    proc = _start(slow_qcow2, volume / "disk.img", tmpdir)
    try:
        kids = _converting(proc, volume / ".disk.img.partial")
        proc.kill()
        proc.communicate(timeout=30)
    finally:
        _reap(proc)
    # The parent-death signal: the kernel stops nbdkit and qemu-img with the importer.
    _wait_until(lambda: not [pid for pid in kids if _alive(pid)], "children to die", 30)
    assert not (volume / "disk.img").exists()
    assert [p.name for p in volume.iterdir()] == [".disk.img.partial"]


def test_a_long_tmpdir_still_imports_and_leaves_nothing(images: ImageFactory,
                                                        http_server: HttpServer,
                                                        tmp_path: Path) -> None:
    """nbdkit's socket goes in the import's private work directory: under a $TMPDIR so
    long that the socket's path would pass sun_path (107 bytes), that directory is made
    in /tmp instead (pytest-xdist's base directories are that long; so are some users')."""
    url = http_server.publish(images.get("qcow2").path, "long.qcow2")
    tmpdir = tmp_path / ("t" * 90)
    tmpdir.mkdir()
    dest = tmp_path / "disk.img"
    proc = _start(url, dest, tmpdir)
    try:
        out, err = proc.communicate(timeout=120)
    finally:
        _reap(proc)
    assert proc.returncode == 0, out + err
    assert dest.stat().st_size > 0
    assert list(tmpdir.iterdir()) == []


@pytest.mark.parametrize(("tmpdir", "parent"), [
    ("/tmp", None), ("/var/tmp/" + "x" * 40, None),
    ("/var/tmp/" + "x" * 60, "/tmp"), ("/" + "y" * 120, "/tmp"),
])
def test_the_work_directory_moves_to_tmp_only_when_tmpdir_is_too_long(
        tmpdir: str, parent: str | None) -> None:
    assert nbd.workdir_parent(tmpdir) == parent
    if parent is None:  # the socket's path fits: base, private directory, socket name
        longest = f"{tmpdir}/rootdisk-nbd-abcdefgh/nbd-direct.sock"
        assert len(longest) <= nbd.SUN_PATH_MAX
