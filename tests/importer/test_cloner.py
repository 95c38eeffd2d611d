"""The host-assisted clone on real files and real TLS on loopback: the source program
(importer.cloner) streams to the target program (importer.clonetarget) with a per-clone
CA. Only data crosses, holes stay holes, the target grows to its room, a source too large
is refused before a byte is written, a stranger's certificate is refused on either side,
a stream cut short leaves nothing behind, and the exit codes and termination messages
are the importer's."""

from __future__ import annotations

import datetime
import json
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from importer import cloner, clonetarget, clonewire
from importer.errors import ConfigError, NotADiskImage, NotFound, TooSmall, TransferError
from importer.progress import Update
from importer.writers import data_runs
from pki.certs import PairedTLS, paired_tls
from tests.fixtures.ports import free_port
from tests.importer.pagecache import direct_io_or_skip, resident

if TYPE_CHECKING:
    from importer.metrics import ProgressMetric

MiB = 2**20
NOW = datetime.datetime.now(datetime.UTC)


def make_source(path: Path, size: int, runs: list[tuple[int, int]], *,
                compressible: bool = False) -> bytes:
    with open(path, "wb") as f:
        f.truncate(size)
        for offset, length in runs:
            f.seek(offset)
            f.write(b"rootdisk " * (length // 9) + b"r" * (length % 9) if compressible
                    else os.urandom(length))
    return path.read_bytes()


def tls_dir(root: Path, name: str, party: Any) -> Path:
    d = root / name
    d.mkdir()
    (d / "ca.crt").write_bytes(party.ca)
    (d / "tls.crt").write_bytes(party.cert)
    (d / "tls.key").write_bytes(party.key)
    return d


@pytest.fixture
def pair() -> PairedTLS:
    return paired_tls(server_name="clone-target", client_name="clone-source", now=NOW,
                      validity=datetime.timedelta(hours=1))


class Target:
    """The target program's serve() in a thread, on a free loopback port."""

    def __init__(self, config: clonetarget.Config) -> None:
        self.config = config
        self.seen: list[Update] = []
        self.result: int | None = None
        self.error: BaseException | None = None
        self._bound = threading.Event()
        self.addr: tuple[str, int] = ("", 0)
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        try:
            self.result = clonetarget.serve(self.config, listeners=[self.seen.append],
                                            bound=self._on_bound)
        except BaseException as err:  # reported to the test
            self.error = err
            self._bound.set()

    def _on_bound(self, addr: tuple[str, int]) -> None:
        self.addr = addr
        self._bound.set()

    def __enter__(self) -> Target:
        self.thread.start()
        assert self._bound.wait(30)
        return self

    def __exit__(self, *exc: object) -> None:
        self.thread.join(60)
        assert not self.thread.is_alive()


def target_config(dst: Path, tls: Path, requested: int | None, **kw: Any) -> clonetarget.Config:
    return clonetarget.Config(target=dst, requested=requested, overhead="0", tls_dir=tls,
                              port=0, wait_seconds=kw.pop("wait_seconds", 30), **kw)


def source_config(src: Path, tls: Path, addr: tuple[str, int]) -> cloner.Config:
    return cloner.Config(source=src, target=addr, tls_dir=tls, connect_seconds=10)


@pytest.fixture
def dirs(tmp_path: Path, pair: PairedTLS) -> tuple[Path, Path]:
    return tls_dir(tmp_path, "target-tls", pair.server), tls_dir(tmp_path, "source-tls",
                                                                  pair.client)


def test_copies_data_only_keeps_holes_and_grows(tmp_path: Path,
                                                dirs: tuple[Path, Path]) -> None:
    src = tmp_path / "src.img"
    content = make_source(src, 64 * MiB, [(3 * MiB, MiB), (40 * MiB + 17, 5000)])
    # zero blocks inside a data extent are not sent either
    with open(src, "r+b") as f:
        f.seek(20 * MiB)
        f.write(bytes(2 * MiB) + b"x")
    content = src.read_bytes()
    dst = tmp_path / "disk.img"
    with Target(target_config(dst, dirs[0], 80 * MiB)) as target:
        sent = cloner.clone(source_config(src, dirs[1], target.addr))
    assert target.error is None and target.result == sent.data_bytes
    # only the data runs crossed (block-rounded), not the 64 MiB nor the zero block
    assert sent.data_bytes <= MiB + 5000 + 3 * 32 * 1024
    assert dst.stat().st_size == 80 * MiB  # grown to the usable size of its request
    assert dst.read_bytes()[: 64 * MiB] == content
    assert dst.stat().st_blocks * 512 <= 2 * MiB  # as sparse as the source
    assert target.seen[-1].percent == 100.0


@pytest.mark.parametrize("data", ["random", "compressible", "partly compressible"])
def test_the_target_reuses_its_receive_buffers_without_mixing_frames(
        tmp_path: Path, dirs: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch,
        data: str) -> None:
    """Each payload (and each decompressed extent) goes into a buffer an earlier frame
    gave back once written: a handful of buffers for 24 frames, and every byte where it
    belongs. Partly compressible extents (a 3/4 MiB run of text, then random bytes) come
    as large compressed payloads, given back once decompressed."""
    buffers: dict[int, object] = {}  # kept alive, so an id is never reused
    real = clonetarget.FrameReader._buffer

    def record(self: clonetarget.FrameReader, n: int) -> memoryview:
        data = real(self, n)
        buffers[id(data.obj)] = data.obj
        return data

    monkeypatch.setattr(clonetarget.FrameReader, "_buffer", record)
    src = tmp_path / "src.img"
    content = make_source(src, 32 * MiB, [(MiB, 24 * MiB)],
                          compressible=data == "compressible")
    if data == "partly compressible":
        with open(src, "r+b") as f:
            for i in range(24):
                f.seek(MiB + i * MiB)
                f.write(b"rootdisk" * (96 * 1024) + os.urandom(MiB // 4))
        content = src.read_bytes()
    dst = tmp_path / "disk.img"
    with Target(target_config(dst, dirs[0], 32 * MiB)) as target:
        sent = cloner.clone(source_config(src, dirs[1], target.addr))
    assert target.error is None and sent.extents == 24
    if data == "partly compressible":
        assert MiB // 4 * 24 < sent.wire_bytes < MiB // 2 * 24
    assert dst.read_bytes() == content
    assert len(buffers) <= clonetarget.FrameReader.KEEP + 1



@pytest.mark.parametrize("compressible", [False, True])
def test_the_target_writes_past_the_page_cache(tmp_path: Path, dirs: tuple[Path, Path],
                                               compressible: bool) -> None:
    """The received data goes to the disk with O_DIRECT, decompressed extents too: once
    the clone is done, none of the target's pages is in the page cache (util-linux's
    fincore counts them), and its bytes are the source's, holes kept."""
    direct_io_or_skip(tmp_path)
    src = tmp_path / "src.img"
    content = make_source(src, 32 * MiB, [(MiB, 8 * MiB), (20 * MiB, 3 * MiB)],
                          compressible=compressible)
    dst = tmp_path / "disk.img"
    with Target(target_config(dst, dirs[0], 32 * MiB)) as target:
        sent = cloner.clone(source_config(src, dirs[1], target.addr))
    assert target.error is None
    assert (sent.wire_bytes < sent.data_bytes // 20) == compressible
    assert resident(dst) == 0
    assert dst.read_bytes() == content
    # the data where the source's is and holes elsewhere (the allocated blocks can count
    # one more, for the file system's extent tree)
    fd = os.open(dst, os.O_RDONLY)
    try:
        data = [(o, n) for o, n, d in cloner.extents(fd, 32 * MiB, seekable_holes=True) if d]
    finally:
        os.close(fd)
    assert data == [(MiB, 8 * MiB), (20 * MiB, 3 * MiB)]

def test_compressible_data_is_compressed_random_data_is_not(
        tmp_path: Path, dirs: tuple[Path, Path]) -> None:
    src = tmp_path / "src.img"
    content = make_source(src, 32 * MiB, [(0, 8 * MiB)], compressible=True)
    with Target(target_config(tmp_path / "a.img", dirs[0], 32 * MiB)) as target:
        sent = cloner.clone(source_config(src, dirs[1], target.addr))
    assert sent.wire_bytes < sent.data_bytes // 20
    assert (tmp_path / "a.img").read_bytes() == content
    make_source(src, 32 * MiB, [(0, 8 * MiB)])
    with Target(target_config(tmp_path / "b.img", dirs[0], 32 * MiB)) as target:
        sent = cloner.clone(source_config(src, dirs[1], target.addr))
    assert sent.data_bytes <= sent.wire_bytes <= sent.data_bytes + 4096
    assert (tmp_path / "b.img").read_bytes() == src.read_bytes()


def test_too_small_is_refused_before_writing(tmp_path: Path, dirs: tuple[Path, Path]) -> None:
    src = tmp_path / "src.img"
    make_source(src, 64 * MiB, [(50 * MiB, MiB)])
    dst = tmp_path / "disk.img"
    with Target(target_config(dst, dirs[0], 32 * MiB)) as target, \
            pytest.raises(clonewire.Refused) as refused:
        cloner.clone(source_config(src, dirs[1], target.addr))
    assert refused.value.reason == "TooSmall" and not refused.value.retryable
    assert isinstance(target.error, TooSmall)
    assert not dst.exists()


def test_permissive_clone_leaves_off_the_zero_tail(tmp_path: Path,
                                                   dirs: tuple[Path, Path]) -> None:
    src = tmp_path / "src.img"
    content = make_source(src, 64 * MiB, [(MiB, 2 * MiB)])
    dst = tmp_path / "disk.img"
    with Target(target_config(dst, dirs[0], 32 * MiB)) as target:
        cloner.clone(source_config(src, dirs[1], target.addr))
    assert dst.stat().st_size == 32 * MiB
    assert dst.read_bytes() == content[: 32 * MiB]


def test_a_stranger_certificate_is_refused_and_the_wait_goes_on(
        tmp_path: Path, dirs: tuple[Path, Path], pair: PairedTLS) -> None:
    src = tmp_path / "src.img"
    content = make_source(src, 8 * MiB, [(MiB, MiB)])
    other = paired_tls(server_name="clone-target", client_name="clone-source", now=NOW,
                       validity=datetime.timedelta(hours=1))
    # trusts the right CA, but its own certificate is another clone's
    stranger = tls_dir(tmp_path, "stranger", type(pair.client)(pair.client.ca, other.client.cert,
                                                               other.client.key))
    # the target's own serving certificate is not a client certificate
    as_server = tls_dir(tmp_path, "as-server", pair.server)
    dst = tmp_path / "disk.img"
    with Target(target_config(dst, dirs[0], 8 * MiB)) as target:
        for wrong in (stranger, as_server):
            with pytest.raises(cloner.TLSRefused):
                cloner.clone(source_config(src, wrong, target.addr))
            assert not dst.exists()
        cloner.clone(source_config(src, dirs[1], target.addr))
    assert target.error is None
    assert dst.read_bytes() == content


def test_the_source_refuses_a_target_that_is_not_this_clones(
        tmp_path: Path, dirs: tuple[Path, Path]) -> None:
    """An impostor that would take anything (no client certificate asked) but holds
    another clone's serving certificate: the source refuses it and sends it nothing."""
    import ssl

    src = tmp_path / "src.img"
    make_source(src, 8 * MiB, [(MiB, MiB)])
    other = paired_tls(server_name="clone-target", client_name="clone-source", now=NOW,
                       validity=datetime.timedelta(hours=1))
    impostor = tls_dir(tmp_path, "impostor", other.server)
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.load_cert_chain(str(impostor / "tls.crt"), str(impostor / "tls.key"))
    received: list[bytes] = []
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(1)

        def serve() -> None:
            conn, _ = server.accept()
            conn.settimeout(10)
            try:
                with ctx.wrap_socket(conn, server_side=True) as tls:
                    while data := tls.recv(65536):
                        received.append(data)
            except (OSError, ssl.SSLError):
                pass

        thread = threading.Thread(target=serve, daemon=True)
        thread.start()
        with pytest.raises(cloner.TLSRefused):
            cloner.clone(source_config(src, dirs[1], server.getsockname()))
        thread.join(30)
    assert received == []


def test_a_client_without_certificate_is_refused(tmp_path: Path,
                                                 dirs: tuple[Path, Path]) -> None:
    import ssl

    dst = tmp_path / "disk.img"
    with Target(target_config(dst, dirs[0], 8 * MiB, wait_seconds=3)) as target:
        ctx = ssl.create_default_context(cafile=str(dirs[1] / "ca.crt"))
        with socket.create_connection(target.addr, timeout=10) as raw, pytest.raises(
                (ssl.SSLError, OSError)), ctx.wrap_socket(
                raw, server_hostname="clone-target") as tls:
            tls.sendall(clonewire.hello(clonewire.Hello(size=MiB, data_end=MiB)))
            assert tls.recv(1) == b""  # refused: a closed connection is an error too
            raise OSError("closed")
    assert not dst.exists()
    assert "no clone source connected" in str(target.error)


def test_source_gone_is_not_found(tmp_path: Path, dirs: tuple[Path, Path]) -> None:
    with pytest.raises(NotFound):
        cloner.clone(source_config(tmp_path / "gone.img", dirs[1], ("127.0.0.1", 9)))


def test_a_stream_cut_short_leaves_nothing(tmp_path: Path, dirs: tuple[Path, Path]) -> None:
    """The source dies after the first extent: the target refuses and wipes."""
    src = tmp_path / "src.img"
    make_source(src, 16 * MiB, [(0, 16 * MiB)])
    dst = tmp_path / "disk.img"
    with Target(target_config(dst, dirs[0], 16 * MiB)) as target:
        config = source_config(src, dirs[1], target.addr)
        source = cloner.open_source(config.source)
        sock = cloner.connect(config, clonewire.stream_context(config.tls_dir, server_side=False))
        sock.sendall(clonewire.hello(clonewire.Hello(size=source.size,
                                                     data_end=source.data_end)))
        clonewire.read_reply(cloner._reader(sock))
        enc = clonewire.Encoder()
        head, payload = enc.extent(0, os.pread(source.fd, MiB, 0))
        sock.sendall(head)
        sock.sendall(payload[: len(payload) // 2])
        sock.shutdown(socket.SHUT_RDWR)
        sock.close()
        os.close(source.fd)
    assert isinstance(target.error, clonewire.StreamError)
    assert not dst.exists()


class FlippingRelay:
    """A TCP relay between source and target that flips one bit of the byte at ``at``
    in the stream it carries (an attacker on the path, or a corrupting network)."""

    def __init__(self, target: tuple[str, int], at: int) -> None:
        self.target, self.at = target, at
        self.server = socket.create_server(("127.0.0.1", 0))
        self.addr = self.server.getsockname()[:2]
        self.flipped = False
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        with self.server:
            conn, _ = self.server.accept()
        with conn, socket.create_connection(self.target) as up:
            back = threading.Thread(target=self._pipe, args=(up, conn, None), daemon=True)
            back.start()
            self._pipe(conn, up, self.at)
            back.join(30)

    def _pipe(self, src: socket.socket, dst: socket.socket, at: int | None) -> None:
        seen = 0
        try:
            while data := src.recv(65536):
                if at is not None and seen <= at < seen + len(data):
                    buf = bytearray(data)
                    buf[at - seen] ^= 0x01
                    data, self.flipped = bytes(buf), True
                seen += len(data)
                dst.sendall(data)
            dst.shutdown(socket.SHUT_WR)
        except OSError:
            pass


def test_a_byte_changed_on_the_way_is_refused_and_leaves_nothing(
        tmp_path: Path, dirs: tuple[Path, Path]) -> None:
    """No checksum of our own: TLS authenticates every record, so one bit changed in the
    middle of the data breaks the stream, and the target wipes what it wrote."""
    src = tmp_path / "src.img"
    make_source(src, 8 * MiB, [(0, 8 * MiB)])
    dst = tmp_path / "disk.img"
    with Target(target_config(dst, dirs[0], 8 * MiB)) as target:
        relay = FlippingRelay(target.addr, at=4 * MiB)
        with pytest.raises((TransferError, clonewire.Refused)):
            cloner.clone(source_config(src, dirs[1], relay.addr))
    relay.thread.join(30)
    assert relay.flipped
    assert isinstance(target.error, clonewire.StreamError)
    assert "DECRYPTION_FAILED_OR_BAD_RECORD_MAC" in str(target.error) \
        or "BAD_RECORD_MAC" in str(target.error)
    assert not dst.exists()


def test_extents_of_a_file(tmp_path: Path) -> None:
    src = tmp_path / "src.img"
    make_source(src, 16 * MiB, [(4 * MiB, MiB)])
    fd = os.open(src, os.O_RDONLY)
    try:
        runs = list(cloner.extents(fd, 16 * MiB, seekable_holes=True))
    finally:
        os.close(fd)
    assert runs == [(0, 4 * MiB, False), (4 * MiB, MiB, True), (5 * MiB, 11 * MiB, False)]


def test_data_runs_leave_out_zero_blocks() -> None:
    block = 32 * 1024
    data = bytes(block) + b"a" * block + bytes(2 * block) + b"b" * 10
    runs = [(o, bytes(d)) for o, d in data_runs(data)]
    assert runs == [(block, b"a" * block), (4 * block, b"b" * 10)]


# -- the programs ----------------------------------------------------------------------------


def run(module: str, env: dict[str, str]) -> subprocess.Popen[bytes]:
    base = {k: v for k, v in os.environ.items() if k != "POD_IP"}
    return subprocess.Popen([sys.executable, "-m", module], env={**base, **env},
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def test_programs_exit_codes_and_termination_messages(tmp_path: Path,
                                                      dirs: tuple[Path, Path]) -> None:
    src = tmp_path / "src.img"
    content = make_source(src, 8 * MiB, [(6 * MiB, MiB)])
    logs = {n: tmp_path / f"{n}.log" for n in ("source", "target")}
    port = free_port()
    target_env = {"CLONER_TARGET": str(tmp_path / "d.img"), "CLONE_TLS_DIR": str(dirs[0]),
                  "IMPORTER_IMAGE_SIZE": "4Mi", "FILESYSTEM_OVERHEAD": "0",
                  "CLONE_PORT": str(port), "CLONE_WAIT_SECONDS": "60",
                  "IMPORTER_TERMINATION_LOG": str(logs["target"])}
    source_env = {"CLONER_SOURCE": str(src), "CLONE_TARGET": f"127.0.0.1:{port}",
                  "CLONE_TLS_DIR": str(dirs[1]), "CLONE_CONNECT_SECONDS": "60",
                  "IMPORTER_TERMINATION_LOG": str(logs["source"])}

    def both() -> tuple[int, int]:
        t = run("importer.clonetarget", target_env)
        s = run("importer.cloner", source_env)
        return s.wait(120), t.wait(120)

    # too small: both fail for good, with the reason; nothing written
    assert both() == (2, 2)
    for n in ("source", "target"):
        assert json.loads(logs[n].read_text())["reason"] == "TooSmall"
    assert not (tmp_path / "d.img").exists()
    # a bad size is a configuration error
    target_env["IMPORTER_IMAGE_SIZE"] = "not-a-size"
    t = run("importer.clonetarget", target_env)
    assert t.wait(60) == 2 and "IMPORTER_IMAGE_SIZE" in logs["target"].read_text()
    # the source gone: NotFound, permanent
    s = run("importer.cloner", {**source_env, "CLONER_SOURCE": str(tmp_path / "nope")})
    assert s.wait(60) == 2
    assert json.loads(logs["source"].read_text())["reason"] == "NotFound"
    # nobody listening: retryable
    s = run("importer.cloner", {**source_env, "CLONE_CONNECT_SECONDS": "1"})
    assert s.wait(60) == 1
    assert json.loads(logs["source"].read_text())["retryable"] is True
    # and a good one
    target_env["IMPORTER_IMAGE_SIZE"] = "16Mi"
    assert both() == (0, 0)
    assert (tmp_path / "d.img").read_bytes()[: 8 * MiB] == content
    assert (tmp_path / "d.img").stat().st_size == 16 * MiB


# -- the wire format, byte by byte -------------------------------------------------------------


def stream(extents: list[tuple[int, bytes]]) -> bytes:
    enc = clonewire.Encoder()
    out = b""
    for offset, data in extents:
        head, payload = enc.extent(offset, data)
        out += head + bytes(payload)
    return out + enc.end()


def reader(data: bytes) -> clonewire.ReadExact:
    pos = 0

    def read(n: int) -> bytes:
        nonlocal pos
        chunk = data[pos : pos + n]
        pos += len(chunk)
        return chunk
    return read


def decode(data: bytes, *, size: int = 8 * MiB) -> tuple[list[tuple[int, bytes]], Any]:
    gen = clonewire.extents(reader(data), size=size)
    out: list[tuple[int, bytes]] = []
    try:
        while True:
            offset, got = next(gen)
            out.append((offset, bytes(got)))
    except StopIteration as stop:
        return out, stop.value


EXTENTS = [(0, os.urandom(70000)), (MiB, b"disk " * 30000), (3 * MiB, b"\x01" * 10)]


def test_wire_round_trip() -> None:
    got, totals = decode(stream(EXTENTS))
    assert got == EXTENTS
    assert totals == clonewire.Totals(extents=3, data_bytes=sum(len(d) for _, d in EXTENTS))


@pytest.mark.parametrize("cut", [0, 1, 10, 17, 70017, 70018, -33, -1])
def test_a_truncated_stream_is_refused(cut: int) -> None:
    data = stream(EXTENTS)
    with pytest.raises(clonewire.StreamError):
        decode(data[:cut])


def test_totals_that_do_not_add_up_are_refused() -> None:
    data = stream(EXTENTS)
    # drop the last extent but keep the end frame that counted it
    enc = clonewire.Encoder()
    body = b""
    for offset, d in EXTENTS[:2]:
        head, payload = enc.extent(offset, d)
        body += head + bytes(payload)
    end = data[-(1 + clonewire.END.size):]
    with pytest.raises(clonewire.StreamError, match="extents"):
        decode(body + end)


def _frame(kind: bytes, offset: int, length: int, payload: bytes) -> bytes:
    return clonewire.EXTENT.pack(kind[0], offset, length, len(payload)) + payload


@pytest.mark.parametrize("frames, match", [
    ([_frame(b"R", MiB, 4, b"abcd"), _frame(b"R", 0, 4, b"abcd")], "overlaps"),
    ([_frame(b"R", 8 * MiB - 2, 4, b"abcd")], "outside"),
    ([_frame(b"R", 0, 8, b"abcd")], "raw extent"),
    ([_frame(b"R", 0, 0, b"")], "out of bounds"),
    ([clonewire.EXTENT.pack(b"R"[0], 0, 64 * MiB, 64 * MiB)], "out of bounds"),
    ([_frame(b"Z", 0, 4, b"not zstd")], "extent at 0"),
    ([_frame(b"Q", 0, 4, b"abcd")], "unknown frame kind"),
])
def test_malformed_frames_are_refused(frames: list[bytes], match: str) -> None:
    with pytest.raises(clonewire.StreamError, match=match):
        decode(b"".join(frames))


def test_a_zstd_frame_announcing_another_size_is_refused() -> None:
    import zstandard
    bomb = zstandard.ZstdCompressor().compress(bytes(4 * MiB))
    with pytest.raises(clonewire.StreamError, match="zstd frame"):
        decode(_frame(b"Z", 0, 4096, bomb))


def test_hello_and_reply() -> None:
    h = clonewire.read_hello(reader(clonewire.hello(clonewire.Hello(size=10, data_end=4))))
    assert h == clonewire.Hello(size=10, data_end=4)
    with pytest.raises(clonewire.StreamError, match="magic"):
        clonewire.read_hello(reader(b"X" * clonewire.HELLO.size))
    with pytest.raises(clonewire.Refused) as err:
        clonewire.read_reply(reader(clonewire.reply(ok=False, reason="TooSmall",
                                                    message="m")))
    assert err.value.reason == "TooSmall"
    assert clonewire.read_reply(reader(clonewire.reply(ok=True, bytes=3)))["bytes"] == 3


def test_grow_only_grows_a_disk_img_and_never_shrinks(tmp_path: Path) -> None:
    img = tmp_path / "disk.img"
    content = make_source(img, 16 * MiB, [(MiB, MiB)])
    config = clonetarget.Config(target=img, requested=64 * MiB, overhead="0",
                                tls_dir=tmp_path, grow_only=True)
    assert clonetarget.grow(config) == 64 * MiB
    assert img.stat().st_size == 64 * MiB and img.read_bytes()[: 16 * MiB] == content
    smaller = clonetarget.Config(target=img, requested=32 * MiB, overhead="0",
                                 tls_dir=tmp_path, grow_only=True)
    assert clonetarget.grow(smaller) == 64 * MiB and img.stat().st_size == 64 * MiB
    env = {"CLONER_TARGET": str(img), "CLONE_GROW_ONLY": "true", "IMPORTER_IMAGE_SIZE": "80Mi"}
    assert clonetarget.from_env(env).grow_only


def test_ahead_keeps_order_return_value_and_errors() -> None:
    from collections.abc import Generator

    from importer.ahead import ahead

    def gen(n: int, fail: bool = False) -> Generator[int, None, str]:
        yield from range(n)
        if fail:
            raise OSError("disk gone")
        return "done"

    out: list[int] = []
    it = ahead(gen(100), depth=3)
    with pytest.raises(StopIteration) as stop:
        while True:
            out.append(next(it))
    assert out == list(range(100)) and stop.value.value == "done"
    with pytest.raises(OSError, match="disk gone"):
        list(ahead(gen(5, fail=True), depth=2))
    early = ahead(gen(10_000), depth=2)
    assert next(early) == 0
    early.close()  # stops the producer; does not hang


def scraped(metric: ProgressMetric) -> str:
    """What a Prometheus scrape of ``metric``'s endpoint reads now."""
    import urllib.request

    url = f"http://127.0.0.1:{metric.server.server_port}/metrics"
    with urllib.request.urlopen(url, timeout=10) as resp:
        return str(resp.read().decode())


def test_the_target_serves_the_clone_progress_metric(tmp_path: Path,
                                                     dirs: tuple[Path, Path]) -> None:
    from importer.metrics import ProgressMetric

    src = tmp_path / "src.img"
    make_source(src, 16 * MiB, [(0, 4 * MiB), (12 * MiB, MiB)])
    metric = ProgressMetric(owner_uid="target-uid", port=0, addr="127.0.0.1",
                            name=clonetarget.METRIC)
    try:
        config = target_config(tmp_path / "disk.img", dirs[0], 16 * MiB)
        target = Target(config)
        target.thread = threading.Thread(
            target=lambda: setattr(target, "result", clonetarget.serve(
                config, listeners=[metric, target.seen.append], bound=target._on_bound)),
            daemon=True)
        with target:
            cloner.clone(source_config(src, dirs[1], target.addr))
        text = scraped(metric)
    finally:
        metric.close()
    assert 'kubevirt_cdi_clone_progress_total{ownerUID="target-uid"} 100.0' in text
    # it rose with the data: the last update before the end was below 100
    assert any(0 < u.percent < 100 for u in target.seen)


def _handshake(server_ctx: Any, client_ctx: Any) -> tuple[str, str, int] | None:
    """The suite two contexts agree on over a socket pair, or None when refused."""
    import ssl

    a, b = socket.socketpair()
    result: list[Any] = []

    def serve() -> None:
        try:
            with server_ctx.wrap_socket(a, server_side=True) as tls:
                result.append(tls.cipher())
        except (ssl.SSLError, OSError):
            result.append(None)

    thread = threading.Thread(target=serve)
    thread.start()
    try:
        with client_ctx.wrap_socket(b, server_hostname="clone-target") as tls:
            tls.cipher()
    except (ssl.SSLError, OSError):
        pass
    finally:
        thread.join(10)
        b.close()
    return result[0] if result else None


def test_the_stream_uses_tls_1_2_with_aes_128_gcm_only(dirs: tuple[Path, Path]) -> None:
    """The one suite both sides offer (the fastest here: bench/README.md); a peer that
    only speaks TLS 1.3, or only a CBC suite, is refused in the handshake."""
    import ssl

    server = clonewire.stream_context(dirs[0], server_side=True)
    assert _handshake(server, clonewire.stream_context(dirs[1], server_side=False)) == (
        "ECDHE-ECDSA-AES128-GCM-SHA256", "TLSv1.2", 128)
    tls13 = clonewire.stream_context(dirs[1], server_side=False)
    tls13.maximum_version = ssl.TLSVersion.TLSv1_3
    tls13.minimum_version = ssl.TLSVersion.TLSv1_3
    assert _handshake(server, tls13) is None
    cbc = ssl.create_default_context(cafile=str(dirs[1] / "ca.crt"))
    cbc.load_cert_chain(str(dirs[1] / "tls.crt"), str(dirs[1] / "tls.key"))
    cbc.maximum_version = ssl.TLSVersion.TLSv1_2
    cbc.set_ciphers("ECDHE-ECDSA-AES128-SHA")
    assert _handshake(server, cbc) is None


def test_reaching_a_target_that_listens_late_and_one_that_never_does(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Refused connections are tried again, at first quickly, until the target listens;
    a target that never listens fails the clone (retryable) once connect_seconds pass."""
    port = free_port()
    attempts: list[float] = []
    real = socket.create_connection

    def counted(*args: Any, **kwargs: Any) -> socket.socket:
        attempts.append(time.monotonic())
        return real(*args, **kwargs)

    monkeypatch.setattr(cloner.socket, "create_connection", counted)
    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)

    def listen_late() -> None:
        time.sleep(0.5)
        listener.bind(("127.0.0.1", port))
        listener.listen()

    late = threading.Thread(target=listen_late)
    late.start()
    config = cloner.Config(source=Path("/nonexistent"), target=("127.0.0.1", port),
                           tls_dir=Path("/nonexistent"), connect_seconds=30)
    try:
        sock = cloner._reach(config)
        # a try waits CONNECT_TRY_SECONDS for an answer; the stream then STALL_SECONDS
        assert sock.gettimeout() == cloner.STALL_SECONDS
        sock.close()
    finally:
        late.join()
        listener.close()
    assert len(attempts) >= 3  # several tries in the first half second, not one
    assert attempts[1] - attempts[0] < 0.2

    attempts.clear()
    never = cloner.Config(source=Path("/nonexistent"), target=("127.0.0.1", free_port()),
                          tls_dir=Path("/nonexistent"), connect_seconds=1)
    with pytest.raises(TransferError, match="not reachable"):
        cloner._reach(never)
    assert attempts[-1] - attempts[0] < 5


@pytest.mark.parametrize("value", ["0", "-1", "nan", "inf", "86401", "soon"])
def test_the_connect_window_is_bounded(value: str) -> None:
    env = {"CLONER_SOURCE": "/source/disk.img", "CLONE_TARGET": "127.1.0.9:8444",
           "CLONE_TLS_DIR": "/etc/clone-tls", "CLONE_CONNECT_SECONDS": value}
    with pytest.raises(ConfigError, match="CLONE_CONNECT_SECONDS"):
        cloner.from_env(env)


def test_the_connect_window_by_default_and_set() -> None:
    env = {"CLONER_SOURCE": "/source/disk.img", "CLONE_TARGET": "[fd00::9]:8444",
           "CLONE_TLS_DIR": "/etc/clone-tls"}
    config = cloner.from_env(env)
    assert config.connect_seconds == cloner.CONNECT_SECONDS == 300
    assert config.target == ("fd00::9", 8444)
    assert cloner.from_env({**env, "CLONE_CONNECT_SECONDS": "60"}).connect_seconds == 60


# -- what a stranger, or a volume's own content, cannot do ---------------------------------


def client_hello(source_tls: Path) -> bytes:
    """The first flight of a real clone source: its ClientHello record."""
    import ssl

    ctx = clonewire.stream_context(source_tls, server_side=False)
    out = ssl.MemoryBIO()
    tls = ctx.wrap_bio(ssl.MemoryBIO(), out, server_side=False, server_hostname="clone-target")
    with pytest.raises(ssl.SSLWantReadError):
        tls.do_handshake()
    return out.read()


class Trickler:
    """A client that connects and sends a real ClientHello a byte every ``every`` seconds,
    so that no single read ever waits long; records how long until the target hung up."""

    def __init__(self, addr: tuple[str, int], hello: bytes, every: float) -> None:
        self.sock = socket.create_connection(addr, timeout=10)
        self.hello, self.every = hello, every
        self.dropped_after: float | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        import select

        start = time.monotonic()
        try:
            for i in range(len(self.hello)):
                self.sock.sendall(self.hello[i:i + 1])
                if select.select([self.sock], [], [], self.every)[0] and not self.sock.recv(1):
                    break
        except OSError:
            pass
        self.dropped_after = time.monotonic() - start

    def close(self) -> None:
        self.sock.close()
        self.thread.join(10)


def hung_up(sock: socket.socket, within: float) -> bool:
    """Whether the other end closed ``sock`` (nothing was ever sent on it)."""
    sock.settimeout(within)
    try:
        return sock.recv(1) == b""
    except TimeoutError:
        return False
    except OSError:
        return True


def test_a_client_that_sends_nothing_does_not_hold_the_wait(
        tmp_path: Path, dirs: tuple[Path, Path]) -> None:
    """A connection that never says a word: the wait still ends on time, cleanly."""
    dst = tmp_path / "disk.img"
    with Target(target_config(dst, dirs[0], 8 * MiB, wait_seconds=2)) as target, \
            socket.create_connection(target.addr) as silent:
        start = time.monotonic()
        target.thread.join(2 + 3)
        took = time.monotonic() - start
        assert not target.thread.is_alive(), "the silent client held the target"
        assert hung_up(silent, 1)
    assert isinstance(target.error, TransferError)
    assert "no clone source connected in 2 s" in str(target.error)
    assert took < 2 + 2
    assert not dst.exists()


def test_silent_and_trickling_clients_do_not_keep_the_source_out(
        tmp_path: Path, dirs: tuple[Path, Path]) -> None:
    """Connections that hold their handshakes open (one says nothing, one trickles a
    ClientHello) are there first; the real source still gets through at once, and the
    content arrives whole."""
    src = tmp_path / "src.img"
    content = make_source(src, 8 * MiB, [(0, 2 * MiB), (6 * MiB, MiB)])
    dst = tmp_path / "disk.img"
    with Target(target_config(dst, dirs[0], 8 * MiB)) as target:
        silent = [socket.create_connection(target.addr) for _ in range(3)]
        trickler = Trickler(target.addr, client_hello(dirs[1]), every=0.2)
        time.sleep(0.5)  # all of them accepted before the source comes
        start = time.monotonic()
        try:
            sent = cloner.clone(source_config(src, dirs[1], target.addr))
        finally:
            took = time.monotonic() - start
            for s in silent:
                s.close()
            trickler.close()
    assert target.error is None and target.result == sent.data_bytes
    assert dst.read_bytes() == content
    assert took < clonetarget.HANDSHAKE_SECONDS  # not after they were dropped


def test_a_trickled_handshake_is_dropped_after_its_deadline(
        tmp_path: Path, dirs: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    """A byte every 0.2 s never lets a read time out; the handshake's deadline is for
    the whole of it, so the connection goes after HANDSHAKE_SECONDS (1 s here)."""
    monkeypatch.setattr(clonetarget, "HANDSHAKE_SECONDS", 1.0)
    src = tmp_path / "src.img"
    content = make_source(src, 4 * MiB, [(MiB, MiB)])
    dst = tmp_path / "disk.img"
    with Target(target_config(dst, dirs[0], 4 * MiB)) as target:
        trickler = Trickler(target.addr, client_hello(dirs[1]), every=0.2)
        trickler.thread.join(1 + 3)
        assert trickler.dropped_after is not None, "the trickling client was never dropped"
        assert trickler.dropped_after < 1 + 2
        trickler.close()
        cloner.clone(source_config(src, dirs[1], target.addr))  # and the wait went on
    assert target.error is None and dst.read_bytes() == content


def test_many_silent_clients_push_out_the_oldest_not_the_source(
        tmp_path: Path, dirs: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    """At most MAX_HANDSHAKES (4 here) are under way; a newer connection pushes the
    oldest out, so a flood neither piles up nor keeps the source out."""
    monkeypatch.setattr(clonetarget, "MAX_HANDSHAKES", 4)
    src = tmp_path / "src.img"
    content = make_source(src, 4 * MiB, [(0, MiB)])
    dst = tmp_path / "disk.img"
    with Target(target_config(dst, dirs[0], 4 * MiB)) as target:
        silent = [socket.create_connection(target.addr) for _ in range(10)]
        try:
            assert [hung_up(s, 2) for s in silent[:6]] == [True] * 6
            assert [hung_up(s, 0.2) for s in silent[6:]] == [False] * 4
            cloner.clone(source_config(src, dirs[1], target.addr))
        finally:
            for s in silent:
                s.close()
    assert target.error is None and dst.read_bytes() == content


class DroppingRelay:
    """A TCP relay to ``target`` that hangs up on its first ``drop`` connections at once
    (as the target does with a handshake it pushed out) and carries the rest."""

    def __init__(self, target: tuple[str, int], drop: int) -> None:
        self.target, self.drop = target, drop
        self.server = socket.create_server(("127.0.0.1", 0))
        self.addr = self.server.getsockname()[:2]
        self.connections = 0
        threading.Thread(target=self._run, daemon=True).start()

    def _run(self) -> None:
        while True:
            try:
                conn, _ = self.server.accept()
            except OSError:
                return
            self.connections += 1
            if self.connections <= self.drop:
                conn.close()
                continue
            threading.Thread(target=self._carry, args=(conn,), daemon=True).start()

    def _carry(self, conn: socket.socket) -> None:
        with conn, socket.create_connection(self.target) as up:
            back = threading.Thread(target=self._pipe, args=(up, conn), daemon=True)
            back.start()
            self._pipe(conn, up)
            back.join(30)

    @staticmethod
    def _pipe(src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
            dst.shutdown(socket.SHUT_WR)
        except OSError:
            pass

    def close(self) -> None:
        self.server.close()


def test_the_source_tries_a_handshake_cut_off_again(tmp_path: Path,
                                                    dirs: tuple[Path, Path]) -> None:
    src = tmp_path / "src.img"
    content = make_source(src, 4 * MiB, [(0, MiB)])
    dst = tmp_path / "disk.img"
    with Target(target_config(dst, dirs[0], 4 * MiB)) as target:
        relay = DroppingRelay(target.addr, drop=2)
        try:
            cloner.clone(source_config(src, dirs[1], relay.addr))
        finally:
            relay.close()
    assert relay.connections == 3
    assert target.error is None and dst.read_bytes() == content


@pytest.fixture
def small_fs(tmp_path: Path) -> Iterator[Path]:
    """A 64 MiB file system of its own (a tmpfs), so that free space is the limit."""
    d = tmp_path / "pvc"
    d.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64m", "tmpfs", str(d)],
                          capture_output=True, text=True)
    if done.returncode:
        pytest.skip(f"cannot mount a tmpfs here (needs root): {done.stderr.strip()}")
    try:
        yield d
    finally:
        subprocess.run(["umount", str(d)], check=True)


def test_a_leftover_disk_img_counts_as_room(small_fs: Path, tmp_path: Path,
                                            dirs: tuple[Path, Path]) -> None:
    """A run killed mid-copy left 44 MiB of disk.img on a 64 MiB volume: a 40 MiB source
    fits a fresh target of that volume, so it fits this one (the old file is truncated
    before a byte is written), rather than failing for good with TooSmall."""
    dst = small_fs / "disk.img"
    with open(dst, "wb") as f:
        f.write(os.urandom(44 * MiB))
    fs = os.statvfs(small_fs)
    assert fs.f_bavail * fs.f_frsize < 24 * MiB
    src = tmp_path / "src.img"
    content = make_source(src, 40 * MiB, [(0, 40 * MiB)])
    with Target(target_config(dst, dirs[0], 48 * MiB)) as target:
        cloner.clone(source_config(src, dirs[1], target.addr))
    assert target.error is None
    assert dst.stat().st_size == 48 * MiB
    assert dst.read_bytes()[: 40 * MiB] == content


def test_only_a_leftover_that_truncation_frees_counts(tmp_path: Path) -> None:
    img = tmp_path / "disk.img"
    assert clonetarget.leftover(img) == 0
    make_source(img, 4 * MiB, [(0, MiB)])
    assert clonetarget.leftover(img) == img.stat().st_blocks * 512 >= MiB
    os.link(img, tmp_path / "other-name")  # its blocks stay with the other name
    assert clonetarget.leftover(img) == 0


def special(path: Path, kind: str, outside: Path) -> None:
    """``path`` made a symlink (to ``outside``), a dangling one, a FIFO or a directory."""
    if kind == "symlink":
        path.symlink_to(outside)
    elif kind == "dangling symlink":
        path.symlink_to(outside.parent / "nowhere")
    elif kind == "FIFO":
        os.mkfifo(path)
    else:
        path.mkdir()


KINDS = {"symlink": "a symbolic link", "dangling symlink": "a symbolic link",
         "FIFO": "a FIFO", "directory": "a directory"}


def refused_at_once(open_it: Callable[[], object], src: Path, kind: str,
                    ) -> tuple[list[BaseException], float]:
    """Run ``open_it`` (which opens the special file ``src`` as a clone source) in a
    thread, at most 5 s: what it raised, and how long it took. A FIFO it waits on is
    let go (opened for writing) so that the thread ends; the test fails then."""
    errors: list[BaseException] = []

    def run() -> None:
        try:
            open_it()
        except BaseException as err:  # reported to the test
            errors.append(err)

    thread = threading.Thread(target=run, daemon=True)
    start = time.monotonic()
    thread.start()
    thread.join(5)
    took = time.monotonic() - start
    if thread.is_alive() and kind == "FIFO":  # let it go
        os.close(os.open(src, os.O_WRONLY | os.O_NONBLOCK))
        thread.join(5)
    assert not thread.is_alive(), f"opening a {kind} as the source never returned"
    return errors, took


@pytest.mark.parametrize("kind", list(KINDS))
def test_a_source_disk_img_that_is_not_a_disk_is_refused_at_once(
        tmp_path: Path, dirs: tuple[Path, Path], kind: str) -> None:
    """The source volume's disk.img is whatever its user put there: a symlink is not
    followed (to a file of the source pod's), a FIFO is not waited on forever."""
    outside = tmp_path / "outside"
    make_source(outside, MiB, [(0, MiB)])
    src = tmp_path / "disk.img"
    special(src, kind, outside)
    errors, took = refused_at_once(
        lambda: cloner.clone(source_config(src, dirs[1], ("127.0.0.1", free_port()))),
        src, kind)
    assert len(errors) == 1 and isinstance(errors[0], NotADiskImage), errors
    assert errors[0].message == (f"clone source {src} is {KINDS[kind]}, not a regular file"
                                 " or a block device")
    assert not errors[0].retryable
    assert took < 2


@pytest.mark.parametrize("kind", list(KINDS))
def test_grow_only_refuses_a_disk_img_that_is_not_a_file(tmp_path: Path, kind: str) -> None:
    """A CSI clone copied the source volume as it is: a disk.img that is a symlink is not
    followed (the file it names is not grown), a FIFO is not waited on."""
    outside = tmp_path / "outside"
    make_source(outside, MiB, [(0, MiB)])
    img = tmp_path / "disk.img"
    special(img, kind, outside)
    config = clonetarget.Config(target=img, requested=64 * MiB, overhead="0",
                                tls_dir=tmp_path, grow_only=True)
    start = time.monotonic()
    with pytest.raises(NotADiskImage) as refused:
        clonetarget.grow(config)
    assert time.monotonic() - start < 2
    assert refused.value.message == f"CLONER_TARGET {img} is {KINDS[kind]}, not a regular file"
    assert outside.stat().st_size == MiB


def test_a_target_disk_img_that_is_a_symlink_is_refused_unwritten(
        tmp_path: Path, dirs: tuple[Path, Path]) -> None:
    """The writer would follow a symlink where disk.img should be: refused before a byte,
    the file it names untouched, the source told why."""
    outside = tmp_path / "outside"
    before = make_source(outside, MiB, [(0, MiB)])
    dst = tmp_path / "disk.img"
    dst.symlink_to(outside)
    src = tmp_path / "src.img"
    make_source(src, MiB, [(0, MiB)])
    with Target(target_config(dst, dirs[0], 8 * MiB)) as target, \
            pytest.raises(clonewire.Refused) as refused:
        cloner.clone(source_config(src, dirs[1], target.addr))
    assert refused.value.reason == "NotADiskImage" and not refused.value.retryable
    assert isinstance(target.error, NotADiskImage)
    assert outside.read_bytes() == before


def test_a_flood_of_refused_connections_is_counted_not_logged_line_by_line(
        tmp_path: Path, dirs: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    """Any pod may connect to the target's port: 40 connections that hang up before
    their handshake give LOGGED_REFUSALS (3 here) lines, one saying the rest are
    counted, and their total when the wait ends; the source still gets through."""
    import logging

    monkeypatch.setattr(clonetarget, "LOGGED_REFUSALS", 3)
    src = tmp_path / "src.img"
    content = make_source(src, 4 * MiB, [(0, MiB)])
    dst = tmp_path / "disk.img"
    with caplog.at_level(logging.WARNING, logger="importer.clonetarget"), \
            Target(target_config(dst, dirs[0], 4 * MiB)) as target:
        for _ in range(40):
            with socket.create_connection(target.addr) as s:
                s.sendall(b"GET / HTTP/1.0\r\n\r\n")  # not TLS: refused at once
                assert hung_up(s, 5)
        cloner.clone(source_config(src, dirs[1], target.addr))
    assert target.error is None and dst.read_bytes() == content
    lines = [r.getMessage() for r in caplog.records if r.name == "importer.clonetarget"]
    assert sum(line.startswith("refused a connection from") for line in lines) == 3, lines
    assert "more refused connections are counted, not logged" in lines
    assert lines[-1] == "refused 40 connections in all", lines
