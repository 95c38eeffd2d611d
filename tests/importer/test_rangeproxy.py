"""The range endpoint: the importer's own NBD export of a source, read by the real
qemu-img, qemu-io and nbdcopy over its unix socket."""

from __future__ import annotations

import errno
import socket
import struct
import subprocess
import threading
import time
import weakref
from array import array
from pathlib import Path

import pytest

from importer.errors import NotFound
from importer.nbdserver import IHAVEOPT, MAX_READ, NBDMAGIC, OPT_GO, REQUEST_MAGIC
from importer.rangeproxy import FEW_LARGE, MANY_SMALL, RangeProxy, ReadAhead

DATA = bytes(range(256)) * 40_000  # ~10 MiB: several cache blocks


def qemu_io_read(uri: str, offset: int, length: int) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["qemu-io", "-r", "-f", "raw", "-c", f"read {offset} {length}",
                           uri], capture_output=True, text=True, timeout=30)


def test_serves_the_source_to_nbd_clients(tmp_path: Path) -> None:
    with RangeProxy(lambda s, n: DATA[s : s + n], size=len(DATA),
                    socket_path=tmp_path / "nbd.sock") as proxy:
        size = subprocess.run(["nbdinfo", "--size", proxy.uri], capture_output=True,
                              text=True, check=True, timeout=30)
        assert int(size.stdout) == len(DATA)
        copy = tmp_path / "copy"
        subprocess.run(["nbdcopy", proxy.uri, str(copy)], check=True, timeout=60)
        assert copy.read_bytes() == DATA
        # qemu-img's client (a different handshake: structured replies asked first)
        converted = tmp_path / "converted"
        subprocess.run(["qemu-img", "convert", "-f", "raw", "-O", "raw", proxy.uri,
                        str(converted)], check=True, timeout=60)
        assert converted.read_bytes() == DATA


def _exact(conn: socket.socket, count: int) -> bytes:
    data = b""
    while len(data) < count:
        more = conn.recv(count - len(data))
        assert more, "the server closed the connection"
        data += more
    return data


def _negotiated(conn: socket.socket, path: Path, size: int) -> None:
    """A client's side of the handshake by hand (fixed newstyle, NBD_OPT_GO)."""
    conn.settimeout(10)
    conn.connect(str(path))
    assert struct.unpack(">QQH", _exact(conn, 18))[:2] == (NBDMAGIC, IHAVEOPT)
    conn.sendall(struct.pack(">I", 2))  # NO_ZEROES
    conn.sendall(struct.pack(">QII", IHAVEOPT, OPT_GO, 6) + struct.pack(">IH", 0, 0))
    info = _exact(conn, 20 + 12)  # NBD_REP_INFO with NBD_INFO_EXPORT
    assert struct.unpack(">HQH", info[20:])[1] == size
    _exact(conn, 20)  # NBD_REP_ACK


def _read(conn: socket.socket, cookie: int, offset: int, length: int) -> tuple[int, int]:
    """(error, cookie) of the simple reply to one NBD_CMD_READ."""
    conn.sendall(struct.pack(">IHHQQI", REQUEST_MAGIC, 0, 0, cookie, offset, length))
    error, answered = struct.unpack(">IIQ", _exact(conn, 16))[1:]
    return error, answered


def test_a_read_past_the_end_is_refused_and_the_connection_goes_on(tmp_path: Path) -> None:
    """What qemu's client never sends (it checks the size itself), by hand: a read past
    the end is answered EINVAL with no data, and the next read is served."""
    with RangeProxy(lambda s, n: DATA[s : s + n], size=len(DATA),
                    socket_path=tmp_path / "nbd.sock") as proxy, \
            socket.socket(socket.AF_UNIX) as conn:
        _negotiated(conn, proxy.socket_path, len(DATA))
        assert _read(conn, 7, len(DATA) - 10, 20) == (errno.EINVAL, 7)
        assert _read(conn, 8, 1000, 20) == (0, 8)
        assert _exact(conn, 20) == DATA[1000:1020]


def test_a_read_larger_than_any_client_asks_fetches_nothing(tmp_path: Path) -> None:
    """A read of more than MAX_READ bytes, inside the export, is refused before anything
    is fetched (it would hold that much of the source at once); the next read is served."""
    size = 2 * MAX_READ
    fetched: list[tuple[int, int]] = []

    def fetch(start: int, length: int) -> bytes:
        fetched.append((start, length))
        return bytes(length)

    with RangeProxy(fetch, size=size, socket_path=tmp_path / "nbd.sock") as proxy, \
            socket.socket(socket.AF_UNIX) as conn:
        _negotiated(conn, proxy.socket_path, size)
        assert _read(conn, 1, 0, MAX_READ + 1) == (errno.EINVAL, 1)
        assert fetched == []
        assert _read(conn, 2, 0, 512) == (0, 2)
        assert _exact(conn, 512) == bytes(512)


def test_source_failure_is_kept_for_the_report(tmp_path: Path) -> None:
    def fail(start: int, length: int) -> bytes:
        raise NotFound("gone")

    with RangeProxy(fail, size=len(DATA), socket_path=tmp_path / "nbd.sock") as proxy:
        read = qemu_io_read(proxy.uri, 0, 100)
        assert "Input/output error" in read.stdout + read.stderr
        assert isinstance(proxy.failure, NotFound)


@pytest.mark.parametrize("shape", [FEW_LARGE, MANY_SMALL], ids=["few-large", "many-small"])
def test_reads_ahead_side_by_side_within_its_memory_bound(shape: ReadAhead,
                                                           tmp_path: Path) -> None:
    """After a block read in sequence, the shape's blocks ahead are fetched at once (S3's
    one, parallel ranges' six side by side), and no more than those plus the block read
    are ever held or fetched."""
    BLOCK_SIZE, READ_AHEAD = shape.block, shape.ahead
    size = BLOCK_SIZE * (READ_AHEAD + 4)
    lock = threading.Lock()
    running = 0
    peak = 0
    fetched: list[int] = []
    release = threading.Event()

    def fetch(start: int, length: int) -> bytes:
        nonlocal running, peak
        with lock:
            running += 1
            peak = max(peak, running)
            fetched.append(start)
        if start > 0:
            release.wait(10)  # hold the read-ahead fetches until all have started
        with lock:
            running -= 1
        return bytes(length)

    with RangeProxy(fetch, size=size, shape=shape, socket_path=tmp_path / "nbd.sock") as proxy:
        assert qemu_io_read(proxy.uri, 0, BLOCK_SIZE).returncode == 0
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            with lock:
                if peak >= READ_AHEAD + 1 or len(fetched) > READ_AHEAD:
                    break
            time.sleep(0.01)
        release.set()
        with lock:
            assert peak == READ_AHEAD  # every block ahead at once, not one after another
            assert sorted(fetched) == [i * BLOCK_SIZE for i in range(READ_AHEAD + 1)]
        assert len(proxy.cache._blocks) <= READ_AHEAD + shape.keep


def test_no_block_outlives_the_close(tmp_path: Path) -> None:
    """Closing the endpoint drops its blocks (up to ``(keep + ahead)`` of them), though
    the export that holds the proxy lives on until the import's last checks."""
    alive: list[weakref.ref[array[int]]] = []

    def fetch(start: int, length: int) -> array[int]:
        block = array("B", bytes(length))
        alive.append(weakref.ref(block))
        return block

    proxy = RangeProxy(fetch, size=MANY_SMALL.block * 4,  # type: ignore[arg-type]
                       shape=MANY_SMALL, socket_path=tmp_path / "nbd.sock")
    with proxy:
        assert qemu_io_read(proxy.uri, 0, MANY_SMALL.block * 2).returncode == 0
    still = sum(ref() is not None for ref in alive)
    assert alive and still == 0, f"{still} of {len(alive)} blocks alive after the close"
