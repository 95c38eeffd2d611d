"""The control socket client against hostile launchers (real unix sockets): one deadline
for the whole call however the answer trickles in, a bounded answer, and no symlink
followed to another socket."""

from __future__ import annotations

import contextlib
import socket
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from vm.launcher import client
from vm.launcher.protocol import MAX_LINE

DRIP = 0.3


class Launcher:
    """A unix server whose answer to any request is ``answer`` sent in ``chunk``-byte
    pieces every ``every`` seconds (never a newline unless ``answer`` has one)."""

    def __init__(self, path: Path, *, answer: bytes, chunk: int = 1, every: float = DRIP,
                 read_request: bool = True) -> None:
        self.path, self.answer, self.chunk, self.every = path, answer, chunk, every
        self.read_request = read_request
        self.stop = threading.Event()
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.bind(str(path))
        self.sock.listen(8)
        self.sock.settimeout(0.1)
        self.threads = [threading.Thread(target=self._accept, daemon=True)]
        self.threads[0].start()

    def _accept(self) -> None:
        while not self.stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except TimeoutError:
                continue
            t = threading.Thread(target=self._serve, args=(conn,), daemon=True)
            self.threads.append(t)
            t.start()

    def _serve(self, conn: socket.socket) -> None:
        with conn, contextlib.suppress(OSError):
            if self.read_request:
                conn.recv(MAX_LINE)
            for i in range(0, len(self.answer), self.chunk):
                if self.stop.wait(self.every):
                    return
                conn.sendall(self.answer[i:i + self.chunk])
            self.stop.wait()

    def close(self) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(5)
        self.sock.close()


@pytest.fixture
def tmp() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="lc-", dir="/tmp") as d:  # short: sun_path
        yield Path(d)


@contextlib.contextmanager
def launcher(path: Path, **kw: object) -> Iterator[Launcher]:
    server = Launcher(path, **kw)  # type: ignore[arg-type]
    try:
        yield server
    finally:
        server.close()


def _timed(call: Callable[[], object]) -> tuple[Exception | None, float]:
    start = time.monotonic()
    try:
        call()
    except Exception as err:
        return err, time.monotonic() - start
    return None, time.monotonic() - start


# one byte every 0.3 s (9 s in all), then silence: each read alone is quick, and a
# timeout on each read rather than on the call would wait out the whole drip
SLOW = b'{"state":"running","reason":"'


@pytest.mark.parametrize("call", ["status", "shutdown", "console"])
def test_a_dripping_launcher_costs_one_deadline(tmp: Path, call: str) -> None:
    path = tmp / "drip.sock"
    with launcher(path, answer=SLOW):
        err, took = _timed({
            "status": lambda: client.status(path, timeout=0.5),
            "shutdown": lambda: client.shutdown(path, grace_period_seconds=0, timeout=0.5),
            "console": lambda: client.attach_console(path, timeout=0.5),
        }[call])
    assert isinstance(err, client.ControlError), err
    assert "in time" in str(err) or "timed out" in str(err)
    assert took < 1.0


def test_a_launcher_that_never_reads_costs_one_deadline(tmp: Path) -> None:
    """Nothing answered, nothing read: the same deadline."""
    path = tmp / "mute.sock"
    with launcher(path, answer=b"", read_request=False):
        err, took = _timed(lambda: client.status(path, timeout=0.5))
    assert isinstance(err, client.ControlError)
    assert took < 1.0


def test_the_answer_is_bounded(tmp: Path) -> None:
    path = tmp / "long.sock"
    with launcher(path, answer=b"x" * (3 * MAX_LINE), chunk=MAX_LINE, every=0):
        err, took = _timed(lambda: client.status(path, timeout=5))
    assert isinstance(err, client.ControlError)
    assert "line limit" in str(err)
    assert took < 2


def test_a_quick_answer_in_pieces_is_read_whole(tmp: Path) -> None:
    path = tmp / "ok.sock"
    answer = b'{"state":"running","reason":"", "driver":"qemu"}\n'
    with launcher(path, answer=answer, chunk=7, every=0.01):
        assert client.status(path, timeout=5)["state"] == "running"


def test_a_symlink_is_not_followed(tmp: Path) -> None:
    """A launcher writes its own socket directory: a symlink there to another launcher's
    socket (or anything but a socket) is refused, not connected to."""
    other = tmp / "other.sock"
    with launcher(other, answer=b'{"state":"running"}\n', every=0):
        assert client.status(other, timeout=5) == {"state": "running"}
        (tmp / "link.sock").symlink_to(other)
        (tmp / "file.sock").write_text("")
        for name in ("link.sock", "file.sock"):
            with pytest.raises(client.ControlError, match="not a socket"):
                client.status(tmp / name, timeout=5)
            with pytest.raises(client.ControlError, match="not a socket"):
                client.attach_console(tmp / name, timeout=5)
        with pytest.raises(client.ControlError, match="cannot reach"):
            client.status(tmp / "missing.sock", timeout=5)
