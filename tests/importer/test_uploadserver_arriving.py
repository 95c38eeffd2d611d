"""A qcow2 upload is converted while its body arrives (``importer/arrivingexport.py``:
qemu-img reads the growing scratch file through the upload server's own NBD export of
it), with the real upload server and qemu-img on loopback, and a slow client of the
test's own.

Claims: the disk is being written before the client has sent its last byte; a client
that goes away mid-body makes the waiting reads give up at once (not after the read
timeout), and leaves no scratch file and no child process behind; a large body is
converted as it arrives whether it comes as fast as loopback goes or paced; no nbdkit
is needed. Where ``qemu-img info`` fails on the arriving file, the upload is converted
from the whole file once it arrived: the same disk, the reason in the log and the
termination message, nothing of the attempt left running or on disk.
"""

from __future__ import annotations

import itertools
import os
import shlex
import shutil
import ssl
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from importer import qemu_img
from importer.formats import ImageFormat
from sizes import MIB
from tests.fixtures.images import (
    ImageFactory,
    allocated_bytes,
    build_patterned_raw,
    compare,
    convert,
)
from tests.fixtures.podmemory import process_tree
from tests.importer.loopdev import loop_device
from tests.importer.test_uploadserver import Server, serving

READ_TIMEOUT = 60
"""The server's read timeout: far above what any wait here may take, so that only the
upload's end, not a timeout, can end the waiting reads."""
TAIL = 65536
"""Bytes the slow client holds back: the qcow2's last cluster."""


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Server]:
    yield from serving(tmp_path, read_timeout=READ_TIMEOUT)


def _start_upload(tls: ssl.SSLSocket, data: bytes, sent: int) -> None:
    tls.sendall(b"POST /v1beta1/upload HTTP/1.1\r\nHost: x\r\n"
                + f"Content-Length: {len(data)}\r\n\r\n".encode())
    tls.sendall(data[:sent])


def _converting(server: Server) -> bool:
    """Whether a ``qemu-img convert`` of the server's is running."""
    for pid in _children(server):
        try:
            if Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[1:2] == [b"convert"]:
                return True
        except OSError:  # ended meanwhile
            continue
    return False


def _children(server: Server) -> dict[int, str]:
    """The server's descendants: pid → command name."""
    names = {}
    for pid in process_tree([server.proc.pid]) - {server.proc.pid}:
        try:
            names[pid] = Path(f"/proc/{pid}/comm").read_text().strip()
        except OSError:  # ended meanwhile
            continue
    return names


def test_the_disk_is_written_before_the_last_byte_is_sent(server: Server,
                                                          images: ImageFactory) -> None:
    image = images.get("qcow2")
    data = image.path.read_bytes()
    assert len(data) > 4 * TAIL
    first = image.expected.read_bytes()[:TAIL]  # data (each block of the pattern opens
    assert first.count(0) < len(first) // 2    # with it)
    with server.raw_tls() as tls:
        _start_upload(tls, data, len(data) - TAIL)
        # the client holds its last cluster back until the disk has its first guest
        # bytes (bounded): bytes, not allocation (qemu-img zeroes a new file's first
        # block at once)
        deadline = time.monotonic() + 20
        written_at = None
        while time.monotonic() < deadline:
            if _head(server.dest, len(first)) == first:
                written_at = time.monotonic()
                break
            time.sleep(0.05)
        last_byte_at = time.monotonic()
        tls.sendall(data[len(data) - TAIL:])
        answer = tls.recv(4096)
    assert written_at is not None and written_at < last_byte_at, \
        "nothing was written to the disk before the last byte was sent"
    assert answer.startswith(b"HTTP/1.1 200"), answer
    assert server.wait() == 0
    assert compare(image.expected, server.dest)
    assert server.termination_message()["reason"] == "Completed"
    assert list(server.scratch.iterdir()) == []


def _last_l2_table(qcow2: bytes) -> int:
    """The file offset of a qcow2's last L2 table (from its header and L1 table)."""
    l1_size = int.from_bytes(qcow2[36:40], "big")
    l1_offset = int.from_bytes(qcow2[40:48], "big")
    entries = (int.from_bytes(qcow2[l1_offset + 8 * i:l1_offset + 8 * i + 8], "big")
               & 0x00FFFFFFFFFFFE00 for i in range(l1_size))
    return max(entries)


def _head(path: Path, length: int) -> bytes:
    """The first ``length`` bytes of ``path``; none if it is not there yet."""
    try:
        with path.open("rb") as f:
            return f.read(length)
    except OSError:  # not there yet
        return b""


@pytest.fixture(scope="module")
def small_cluster_qcow2(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A 16 MiB qcow2 of 4 KiB clusters (one L2 table maps 2 MiB: eight of them, each
    written where its first data is, the last near the file's end) and its raw."""
    d = tmp_path_factory.mktemp("small-clusters")
    raw, qcow2 = d / "disk.raw", d / "disk.qcow2"
    build_patterned_raw(raw, size=16 * 1024 * 1024, data_ratio=0.5, block=256 * 1024)
    convert(raw, "raw", qcow2, ["-O", "qcow2", "-o", "cluster_size=4096"])
    return qcow2, raw


def test_a_qcow2_is_written_before_its_last_l2_table_arrives(
        server: Server, small_cluster_qcow2: tuple[Path, Path]) -> None:
    """qemu-img convert walks the block status of the whole image before it writes: one
    run over a qcow2 still arriving would write nothing until its last L2 table came.
    Converted in guest ranges, each waits only for its own."""
    qcow2, raw = small_cluster_qcow2
    data = qcow2.read_bytes()
    held = _last_l2_table(data)  # everything from the last L2 table on is held back
    assert held < len(data) - 4 * TAIL and held > len(data) // 2
    first = raw.read_bytes()[:65536]  # data (the pattern starts each block with it)
    assert first.count(0) < len(first) // 2
    with server.raw_tls() as tls:
        _start_upload(tls, data, held)
        # its first guest bytes on the disk (qemu-img zeroes a new file's first block
        # at once: bytes, not allocation, tell), a bounded look
        deadline = time.monotonic() + 20
        written = False
        while time.monotonic() < deadline:
            if server.dest.exists() and _head(server.dest, len(first)) == first:
                written = True
                break
            time.sleep(0.05)
        tls.sendall(data[held:])
        answer = tls.recv(4096)
    assert written, "nothing was written before the qcow2's last L2 table was sent"
    assert answer.startswith(b"HTTP/1.1 200"), answer
    assert server.wait() == 0
    assert compare(raw, server.dest)
    assert allocated_bytes(server.dest) <= allocated_bytes(raw) + 1024 * 1024  # sparse
    assert server.termination_message()["reason"] == "Completed"


def test_a_qcow2_converted_in_ranges_is_the_same_disk(
        tmp_path: Path, small_cluster_qcow2: tuple[Path, Path]) -> None:
    qcow2, raw = small_cluster_qcow2
    for preallocate in (False, True):
        seen: list[float] = []
        dest = tmp_path / f"disk-{preallocate}.img"
        dest.write_bytes(b"old bytes, all replaced")
        qemu_img.convert(str(qcow2), ImageFormat.QCOW2, dest, virtual_size=16 * 1024 * 1024,
                         dest_is_block=False, dest_is_zero=False, preallocate=preallocate,
                         direct_io=False, progress=seen.append, piece=3 * 1024 * 1024)
        assert dest.stat().st_size == 16 * 1024 * 1024
        assert compare(raw, dest)
        if preallocate:
            assert allocated_bytes(dest) >= 16 * 1024 * 1024
        else:
            assert allocated_bytes(dest) <= allocated_bytes(raw) + 1024 * 1024
        # progress over the whole disk, not each range's: rising to 100
        assert all(b >= a - 1e-9 for a, b in itertools.pairwise(seen)), seen
        assert seen[-1] == pytest.approx(100.0)


def test_a_qcow2_converted_in_ranges_onto_a_block_device_is_the_same_disk(
        tmp_path: Path, small_cluster_qcow2: tuple[Path, Path]) -> None:
    qcow2, raw = small_cluster_qcow2
    backing = tmp_path / "device"
    backing.write_bytes(b"\xff" * (20 * 1024 * 1024))  # old bytes, past the image too
    with loop_device(backing) as device:
        qemu_img.convert(str(qcow2), ImageFormat.QCOW2, device, virtual_size=16 * 1024 * 1024,
                         dest_is_block=True, dest_is_zero=False, preallocate=False,
                         direct_io=True, piece=3 * 1024 * 1024)
    # the disk where the image has data, zeros over the old bytes where it has none
    assert _head(backing, 16 * 1024 * 1024) == raw.read_bytes()


@pytest.mark.parametrize("name", ["qcow2c", "vmdk", "vmdk-stream", "vdi", "vhd", "vhdx"])
def test_every_spooled_format_converts_as_it_arrives(server: Server, images: ImageFactory,
                                                   name: str) -> None:
    image = images.get(name)
    resp = server.post("/v1beta1/upload", image.path.read_bytes())
    assert resp.status_code == 200, resp.text
    assert server.wait() == 0
    assert compare(image.expected, server.dest)
    assert server.termination_message()["route"] == "scratch-convert"
    assert list(server.scratch.iterdir()) == []


def test_a_body_cut_off_ends_the_waiting_reads_at_once_and_leaves_nothing(
        server: Server, images: ImageFactory) -> None:
    image = images.get("qcow2")
    data = image.path.read_bytes()
    with server.raw_tls() as tls:
        _start_upload(tls, data, len(data) // 2)
        # qemu-img converts through the export, waiting for the half not sent (bounded)
        deadline = time.monotonic() + 20
        while not _converting(server):
            assert time.monotonic() < deadline, f"no waiting reader: {_children(server)}"
            time.sleep(0.05)
    cut_at = time.monotonic()  # the connection is closed: the body will never be whole
    deadline = cut_at + 20
    while _children(server) or list(server.scratch.iterdir()) or \
            (server.dest.exists() and allocated_bytes(server.dest) > 0):
        assert time.monotonic() < deadline, (
            f"left behind: {_children(server)}, {list(server.scratch.iterdir())}")
        time.sleep(0.05)
    took = time.monotonic() - cut_at
    assert took < 5, f"the waiting reads took {took:.1f} s to give up"
    assert server.proc.poll() is None  # ready for another upload
    resp = server.post("/v1beta1/upload", data)
    assert resp.status_code == 200, resp.text
    assert server.wait() == 0
    assert compare(image.expected, server.dest)


def test_a_qcow2_that_fails_its_check_is_refused_with_the_checks_verdict(
        server: Server, images: ImageFactory) -> None:
    """The check runs beside the convert (it reads up to the file's end); the upload
    still ends on its verdict, the disk wiped and the server ready for another."""
    bad = images.get("truncated.qcow2").path.read_bytes()
    resp = server.post("/v1beta1/upload", bad)
    assert resp.status_code == 400
    assert resp.text.startswith("InvalidImage: corrupt qcow2 image:"), resp.text
    assert "errors found" in resp.text, resp.text  # qemu-img check's words, not convert's
    assert not (server.dest.exists() and allocated_bytes(server.dest) > 0)
    assert list(server.scratch.iterdir()) == []
    assert _children(server) == {}
    good = images.get("qcow2")
    resp = server.post("/v1beta1/upload", good.path.read_bytes())
    assert resp.status_code == 200, resp.text
    assert server.wait() == 0
    assert compare(good.expected, server.dest)


@pytest.fixture(scope="module")
def large_qcow2(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A 160 MiB qcow2 file (80 MiB of data), and its raw disk."""
    d = tmp_path_factory.mktemp("large")
    raw, qcow2 = d / "disk.raw", d / "disk.qcow2"
    build_patterned_raw(raw, size=160 * MIB, data_ratio=0.5)
    subprocess.run(["qemu-img", "convert", "-f", "raw", "-O", "qcow2", str(raw), str(qcow2)],
                   check=True, timeout=120)
    return qcow2, raw


class _Paced:
    """A request body sent at ``rate`` bytes/s, 1 MiB at a time."""

    def __init__(self, path: Path, rate: int) -> None:
        self.data, self.rate, self.sent, self.start = path.read_bytes(), rate, 0, 0.0

    def __len__(self) -> int:
        return len(self.data)

    def read(self, _n: int = -1) -> bytes:
        if not self.start:
            self.start = time.monotonic()
        if (wait := self.start + self.sent / self.rate - time.monotonic()) > 0:
            time.sleep(wait)
        chunk = self.data[self.sent:self.sent + (1 << 20)]
        self.sent += len(chunk)
        return chunk


@pytest.mark.parametrize("paced", [False, True])
def test_a_large_upload_converts_on_arrival_whether_or_not_the_receiver_waits_for_it(
        tmp_path: Path, large_qcow2: tuple[Path, Path], paced: bool) -> None:
    """As fast as loopback goes (the receiver busy all along) or paced: converted as it
    arrives either way (no gate on the receiver's CPU since round 26: bench/README.md)."""
    qcow2, raw = large_qcow2
    server = Server(tmp_path, size="256Mi")
    try:
        body: object = _Paced(qcow2, 24 * 1024 * 1024) if paced else qcow2.read_bytes()
        resp = server.post("/v1beta1/upload", body)
        assert resp.status_code == 200, resp.text
        assert server.wait() == 0
        assert compare(raw, server.dest)
        why = str(server.termination_message()["why"])
        assert why.endswith("converted from that file as it grows"), why
    finally:
        server.stop()


def _fake(bin_dir: Path, name: str, body: str) -> None:
    """``bin_dir/name``, a fake ``name`` (a shell script) first on the server's PATH: it
    records its arguments (a line a run) in ``name.argv``, runs ``body``, then execs the
    real ``name`` with the arguments as ``body`` left them."""
    real = shutil.which(name)
    assert real is not None
    fake = bin_dir / name
    fake.write_text(f'#!/bin/sh\nprintf "%s\\n" "$*" >> {shlex.quote(str(fake))}.argv\n'
                    f'{body}\nexec {shlex.quote(real)} "$@"\n')
    fake.chmod(0o755)


BESIDE_CONVERT = "beside-convert"
"""What the fake qemu-img finds running beside a convert: the server's other children."""


def _recording_qemu_img(bin_dir: Path, *, info_fails_on_nbd: bool) -> None:
    """A fake qemu-img: the real one, which notes the server's other children (command
    names) when it converts, and, with ``info_fails_on_nbd``, fails ``info`` of an NBD
    export (the arriving file) as qemu-img does on an image it cannot open."""
    # prlimit and setpriv exec: the fake's parent is the server
    beside = shlex.quote(str(bin_dir / BESIDE_CONVERT))
    body = (f'if [ "$1" = convert ]; then : > {beside}; for p in'
            f' $(cat /proc/$PPID/task/*/children); do [ "$p" = $$ ] ||'
            f' cat /proc/$p/comm >> {beside}; done; fi\n')
    if info_fails_on_nbd:
        body += ('case "$1 $*" in "info "*\'"driver": "nbd"\'*) echo "qemu-img: Could not'
                 ' open the export: fake: info fails on NBD exports" >&2; exit 1;; esac')
    _fake(bin_dir, "qemu-img", body)


@pytest.fixture
def fakes(tmp_path: Path) -> Path:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    return bin_dir


def _assert_converted_whole_because(server: Server, reason: str) -> None:
    """The termination message says the upload was converted once whole, and why."""
    why = str(server.termination_message()["why"])
    assert why == ("qcow2 kept whole in scratch as it arrives, then converted from that"
                   f" file ({reason})"), why


def _upload_converted_whole(tmp_path: Path, fakes: Path, image_path: Path,
                            expected: Path, capfd: pytest.CaptureFixture[str],
                            ) -> tuple[Server, str]:
    """Upload ``image_path`` to a server with ``fakes`` first on its PATH, and see it
    converted from the whole file: the disk is ``expected``, the one convert read the
    spooled file with nothing else of the server's running beside it, no scratch file and
    no export work directory left. The server (stopped) and its log (its stderr)."""
    with tempfile.TemporaryDirectory(prefix="rd-tmp-") as tmp:  # short: the export's socket
        server = Server(tmp_path, env={"PATH": f"{fakes}:{os.environ['PATH']}",
                                       "TMPDIR": tmp})
        try:
            resp = server.post("/v1beta1/upload", image_path.read_bytes())
            assert resp.status_code == 200, resp.text
            assert server.wait() == 0
        finally:
            server.stop()
        assert list(Path(tmp).iterdir()) == []
    assert compare(expected, server.dest)
    converts = [a for a in _argv(fakes, "qemu-img") if a.startswith("convert ")]
    assert len(converts) == 1 and '"driver": "file"' in converts[0], converts
    assert str(server.scratch) in converts[0], converts
    assert (fakes / BESIDE_CONVERT).read_text() == ""
    assert list(server.scratch.iterdir()) == []
    log = capfd.readouterr().err
    assert server.termination_message()["route"] == "scratch-convert"
    return server, log


def _argv(bin_dir: Path, name: str) -> list[str]:
    """The arguments each run of the fake ``name`` was given."""
    path = bin_dir / f"{name}.argv"
    return path.read_text().splitlines() if path.exists() else []


def test_when_qemu_img_info_fails_on_the_arriving_file_the_whole_file_is_converted(
        tmp_path: Path, fakes: Path, images: ImageFactory,
        capfd: pytest.CaptureFixture[str]) -> None:
    """A fake qemu-img: the real one, but ``info`` fails on an NBD export (the arriving
    file), not on a file."""
    _recording_qemu_img(fakes, info_fails_on_nbd=True)
    image = images.get("qcow2")
    server, log = _upload_converted_whole(tmp_path, fakes, image.path, image.expected, capfd)
    on_nbd = [a for a in _argv(fakes, "qemu-img") if '"nbd"' in a]
    assert len(on_nbd) == 1 and on_nbd[0].startswith("info "), on_nbd  # tried, and only that
    assert ("qemu-img info of the qcow2 image as it arrived failed (not a valid qcow2 image:"
            " qemu-img: Could not open the export: fake: info fails on NBD exports):"
            " reading the whole file") in log, log
    _assert_converted_whole_because(server, "qemu-img info of it as it arrived failed")


def path_without(name: str, shadow: Path) -> str:
    """The test's PATH with no ``name`` on it: a directory that holds one is replaced by
    ``shadow/<n>``, links to everything else in it."""
    dirs = []
    for n, entry in enumerate(os.environ["PATH"].split(os.pathsep)):
        d = Path(entry)
        if (d / name).exists():
            copy = shadow / str(n)
            copy.mkdir(parents=True)
            for each in d.iterdir():
                if each.name != name:
                    (copy / each.name).symlink_to(each)
            d = copy
        dirs.append(str(d))
    return os.pathsep.join(dirs)


def test_without_nbdkit_an_upload_still_converts_as_it_arrives(
        tmp_path: Path, fakes: Path, images: ImageFactory) -> None:
    """No nbdkit on the server's PATH at all: the arriving file is the server's own
    export, and every qemu-img run on it reads it over NBD from the server."""
    path = path_without("nbdkit", tmp_path / "shadow")
    assert shutil.which("nbdkit", path=path) is None
    _recording_qemu_img(fakes, info_fails_on_nbd=False)
    image = images.get("qcow2")
    server = Server(tmp_path, env={"PATH": f"{fakes}:{path}"})
    try:
        resp = server.post("/v1beta1/upload", image.path.read_bytes())
        assert resp.status_code == 200, resp.text
        assert server.wait() == 0
    finally:
        server.stop()
    assert compare(image.expected, server.dest)
    why = str(server.termination_message()["why"])
    assert why.endswith("converted from that file as it grows"), why
    converts = [a for a in _argv(fakes, "qemu-img") if a.startswith("convert ")]
    assert converts and all('"driver": "nbd"' in a for a in converts), converts
    assert list(server.scratch.iterdir()) == []
