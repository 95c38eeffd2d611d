"""The launchers' socket directories on the node (real directories and sockets): the
handler makes one per VMI, removes only those it made once their VMI is gone and they
have not changed for a while (empty, or holding the launcher's dead socket alone), follows
no symlink; and a launcher that answers a byte at a time costs the handler's sync one
deadline."""

from __future__ import annotations

import os
import socket
import stat
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.vm.launcher.test_client import SLOW, Launcher
from vm.handler import kube as handler_kube
from vm.handler.sockets import GRACE, collect, ensure, socket_of


@pytest.fixture
def tmp() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="hs-", dir="/tmp") as d:  # short: sun_path
        yield Path(d)


def _bound(path: Path, *, listen: bool) -> socket.socket:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind(str(path))
    if listen:
        s.listen(1)
    return s


def _age(path: Path) -> None:
    old = time.time() - GRACE - 5
    os.utime(path, (old, old), follow_symlinks=False)


def _dead(path: Path) -> Path:
    _bound(path, listen=False).close()  # the file stays, nobody listens
    return path


def test_ensure_makes_each_vmis_directory_and_nothing_else(tmp: Path) -> None:
    root, elsewhere = tmp / "sockets", tmp / "elsewhere"
    root.mkdir()
    elsewhere.mkdir()
    (root / "u2").symlink_to(elsewhere)  # a name taken already, even by a symlink: kept
    assert ensure(root, ["u1", "u2", "u1", "../x", ".", "a/b", ""]) == 1
    assert sorted(os.listdir(root)) == ["u1", "u2"]
    st = os.lstat(root / "u1")
    assert stat.S_ISDIR(st.st_mode) and st.st_mode & 0o7777 == 0o700
    assert (root / "u2").is_symlink() and os.listdir(elsewhere) == []
    assert ensure(root, ["u1"]) == 0
    assert socket_of(root, "u1") == root / "u1" / "u1.sock"
    with pytest.raises(ValueError):
        socket_of(root, "../u1")


def test_collect(tmp: Path) -> None:
    root, elsewhere, other = tmp / "s", tmp / "e", tmp / "o"
    for d in (root, elsewhere, other):
        d.mkdir()
    ensure(root, ["live", "empty", "dead", "alive", "crowded", "linked", "lost"])
    _dead(root / "live" / "live.sock")              # a VMI on the node: not touched
    _dead(root / "dead" / "dead.sock")              # killed without cleanup: goes
    alive = _bound(root / "alive" / "alive.sock", listen=True)  # unknown but listening
    _dead(root / "crowded" / "crowded.sock")
    (root / "crowded" / "notes").write_text("not the launcher's")
    _dead(elsewhere / "x.sock")
    (root / "linked" / "linked.sock").symlink_to(elsewhere / "x.sock")
    (root / "lost" / "lost.sock").mkdir()           # not a socket
    (root / "tolink").symlink_to(other)             # a symlink in the root: never followed
    _dead(other / "tolink.sock")
    (root / "file").write_text("")
    _dead(root / "old.sock")                        # not a VMI directory: not ours
    for name in os.listdir(root):                   # all unchanged for longer than GRACE
        _age(root / name)
    ensure(root, ["fresh", "touched"])              # too young to go, however empty:
    _age(root / "touched")                          # another handler's, or about to be
    ensure(root, ["touched"])                       # used; a handler touches its own
    try:
        assert collect(root, ["live"]) == 2         # "empty" and "dead"
        assert sorted(os.listdir(root)) == ["alive", "crowded", "file", "fresh", "linked",
                                            "live", "lost", "old.sock", "tolink", "touched"]
        assert os.listdir(root / "live") == ["live.sock"]
        assert sorted(os.listdir(root / "crowded")) == ["crowded.sock", "notes"]
        assert (root / "linked" / "linked.sock").is_symlink()
        assert os.listdir(elsewhere) == ["x.sock"]
        assert os.listdir(other) == ["tolink.sock"]
    finally:
        alive.close()
    assert collect(root, ["live"]) == 1             # now "alive" is dead too
    assert not (root / "alive").exists()


def test_a_dripping_launcher_costs_the_handler_one_status_timeout(tmp: Path) -> None:
    """A launcher that answers a byte every 0.3 s would hold a per-read timeout for as
    long as it drips; the handler's sync gives it STATUS_TIMEOUT, then moves on."""
    uid = "drip"
    ensure(tmp, [uid])
    vmi = {"metadata": {"uid": uid, "name": "v", "namespace": "ns"},
           "status": {"phase": "Running"}}
    server = Launcher(socket_of(tmp, uid), answer=SLOW)
    try:
        start = time.monotonic()
        # kube is not reached: the status never came
        handler_kube.sync(None, vmi, socket_dir=str(tmp), shut=set())  # type: ignore[arg-type]
        took = time.monotonic() - start
    finally:
        server.close()
    assert handler_kube.STATUS_TIMEOUT - 0.1 <= took < handler_kube.STATUS_TIMEOUT + 1
