"""importer.tlsstream: TLS between memory BIOs, moved through a real socket pair in
batches. What goes in comes out; the socket sees a handful of system calls where an
SSLSocket makes one or two per 16 KiB record; a refused handshake tells the peer why;
the ends of a stream read as the end."""

from __future__ import annotations

import datetime
import os
import socket
import ssl
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from importer import clonewire
from importer.tlsstream import TlsStream
from pki.certs import PairedTLS, paired_tls

MiB = 2**20
NOW = datetime.datetime.now(datetime.UTC)


class Counting(socket.socket):
    """A socket that counts the system calls TlsStream makes on it."""

    sends = 0
    receives = 0

    def sendall(self, data: Any, flags: int = 0) -> None:
        self.sends += 1
        super().sendall(data, flags)

    def recv_into(self, buffer: Any, nbytes: int = 0, flags: int = 0) -> int:
        self.receives += 1
        return super().recv_into(buffer, nbytes, flags)


def _dir(root: Path, name: str, party: Any) -> Path:
    d = root / name
    d.mkdir()
    for file, data in (("ca.crt", party.ca), ("tls.crt", party.cert), ("tls.key", party.key)):
        (d / file).write_bytes(data)
    return d


@pytest.fixture
def contexts(tmp_path: Path) -> tuple[ssl.SSLContext, ssl.SSLContext]:
    pair = paired_tls(server_name="clone-target", client_name="clone-source", now=NOW,
                      validity=datetime.timedelta(hours=1))
    return (clonewire.stream_context(_dir(tmp_path, "t", pair.server), server_side=True),
            clonewire.stream_context(_dir(tmp_path, "s", pair.client), server_side=False))


def pair_of_sockets() -> tuple[Counting, Counting]:
    a, b = socket.socketpair()
    sa, sb = Counting(fileno=a.detach()), Counting(fileno=b.detach())
    for s in (sa, sb):
        s.settimeout(10)
    return sa, sb


def run_server(sock: socket.socket, ctx: ssl.SSLContext,
               work: Callable[[TlsStream], Any]) -> tuple[threading.Thread, list[Any]]:
    out: list[Any] = []

    def serve() -> None:
        try:
            with TlsStream(sock, ctx, server_side=True) as tls:
                out.append(work(tls))
        except (ssl.SSLError, OSError) as err:
            out.append(err)

    thread = threading.Thread(target=serve)
    thread.start()
    return thread, out


def read_all(tls: TlsStream) -> bytes:
    buf, parts = bytearray(MiB), []
    while n := tls.recv_into(buf, MiB):
        parts.append(bytes(buf[:n]))
    return b"".join(parts)


@pytest.fixture
def sockets() -> Iterator[tuple[Counting, Counting]]:
    a, b = pair_of_sockets()
    yield a, b
    a.close()
    b.close()


def test_bytes_arrive_whole_in_few_system_calls(
        contexts: tuple[ssl.SSLContext, ssl.SSLContext],
        sockets: tuple[Counting, Counting]) -> None:
    sctx, cctx = contexts
    a, b = sockets
    data = os.urandom(16 * MiB)  # 1024 TLS records
    thread, out = run_server(a, sctx, read_all)
    with TlsStream(b, cctx, server_side=False, server_hostname="clone-target") as tls:
        before = b.sends
        for i in range(0, len(data), 4 * MiB):
            tls.sendall(data[i:i + MiB], data[i + MiB:i + 4 * MiB])  # head and payload
        sends = b.sends - before
    thread.join(30)
    assert out == [data]
    assert sends == 4  # one per sendall; an SSLSocket writes once per record (1024)
    assert a.receives < 16 * MiB // (64 * 1024)  # a record is read twice by an SSLSocket


def test_a_refused_client_learns_why_and_nothing_is_read(
        tmp_path: Path, contexts: tuple[ssl.SSLContext, ssl.SSLContext],
        sockets: tuple[Counting, Counting]) -> None:
    """A client certificate from another clone: the server's handshake fails and its
    alert reaches the client as an SSLError (not a bare reset)."""
    sctx, _ = contexts
    other: PairedTLS = paired_tls(server_name="clone-target", client_name="clone-source",
                                  now=NOW, validity=datetime.timedelta(hours=1))
    mine = paired_tls(server_name="clone-target", client_name="clone-source", now=NOW,
                      validity=datetime.timedelta(hours=1))
    # trusts the server's CA, but presents a certificate of another clone's CA
    stranger = _dir(tmp_path, "x", type(mine.client)(mine.client.ca, other.client.cert,
                                                      other.client.key))
    a, b = sockets
    thread, out = run_server(a, sctx, read_all)
    with pytest.raises(ssl.SSLError), TlsStream(
            b, clonewire.stream_context(stranger, server_side=False), server_side=False,
            server_hostname="clone-target") as tls:
        tls.recv(1)  # TLS 1.2 fails in the handshake; a later version on the read
    thread.join(30)
    assert len(out) == 1 and isinstance(out[0], ssl.SSLError)


def test_a_server_of_another_clone_is_refused_by_the_client(
        tmp_path: Path, contexts: tuple[ssl.SSLContext, ssl.SSLContext],
        sockets: tuple[Counting, Counting]) -> None:
    _, cctx = contexts
    other = paired_tls(server_name="clone-target", client_name="clone-source", now=NOW,
                       validity=datetime.timedelta(hours=1))
    impostor = clonewire.stream_context(_dir(tmp_path, "i", other.server), server_side=True)
    a, b = sockets
    thread, out = run_server(a, impostor, read_all)
    with pytest.raises(ssl.SSLCertVerificationError):
        TlsStream(b, cctx, server_side=False, server_hostname="clone-target")
    thread.join(30)
    assert b.fileno() == -1  # closed on failure
    assert len(out) == 1 and isinstance(out[0], (ssl.SSLError, OSError))


@pytest.mark.parametrize("polite", [True, False])
def test_the_end_of_the_stream_reads_as_zero(
        polite: bool, contexts: tuple[ssl.SSLContext, ssl.SSLContext],
        sockets: tuple[Counting, Counting]) -> None:
    """close_notify, or a socket simply closed (a ragged end, as SSLSocket's default):
    the reader sees what was sent, then 0; callers frame their data to tell a cut."""
    sctx, cctx = contexts
    a, b = sockets
    thread, out = run_server(a, sctx, read_all)
    tls = TlsStream(b, cctx, server_side=False, server_hostname="clone-target")
    tls.sendall(b"hello")
    if polite:
        tls.close()
    else:
        tls.shutdown(socket.SHUT_RDWR)
        b.close()
    thread.join(30)
    assert out == [b"hello"]


def test_a_peer_gone_during_the_handshake_and_a_stall_are_errors(
        contexts: tuple[ssl.SSLContext, ssl.SSLContext],
        sockets: tuple[Counting, Counting]) -> None:
    sctx, cctx = contexts
    a, b = sockets
    a.close()
    with pytest.raises(OSError):
        TlsStream(b, cctx, server_side=False, server_hostname="clone-target")
    c, d = pair_of_sockets()
    try:
        d.settimeout(0.5)  # the server never answers the hello: the socket's timeout
        with pytest.raises(TimeoutError):
            TlsStream(d, cctx, server_side=False, server_hostname="clone-target")
    finally:
        c.close()
        d.close()
    assert sctx is not None


def test_the_whole_handshake_has_a_deadline_however_the_peer_paces_it(
        contexts: tuple[ssl.SSLContext, ssl.SSLContext]) -> None:
    """A peer that answers a byte every 0.1 s never lets a read time out (10 s here);
    ``handshake_seconds`` bounds the handshake as a whole."""
    _, cctx = contexts
    a, b = pair_of_sockets()
    stop = threading.Event()

    def trickle() -> None:
        # a handshake record announcing 16 KiB, then its body a byte at a time
        try:
            a.sendall(b"\x16\x03\x03\x40\x00")
            while not stop.wait(0.1):
                a.sendall(b"\x00")
        except OSError:
            pass

    thread = threading.Thread(target=trickle)
    thread.start()
    start = time.monotonic()
    try:
        with pytest.raises(TimeoutError, match="the TLS handshake took more than 1 s"):
            TlsStream(b, cctx, server_side=False, server_hostname="clone-target",
                      handshake_seconds=1)
        took = time.monotonic() - start
    finally:
        stop.set()
        thread.join(10)
        a.close()
        b.close()
    assert 1 <= took < 3


def test_a_handshake_driven_by_an_event_loop_gives_a_stream(
        contexts: tuple[ssl.SSLContext, ssl.SSLContext],
        sockets: tuple[Counting, Counting]) -> None:
    """Handshake on a non-blocking socket, stepped whenever it is ready, then the same
    stream as the blocking constructor gives."""
    import selectors

    from importer.tlsstream import Handshake

    sctx, cctx = contexts
    a, b = sockets
    out: list[Any] = []

    def client() -> None:
        with TlsStream(b, cctx, server_side=False, server_hostname="clone-target") as tls:
            tls.sendall(b"hello")
            out.append(tls.recv(5))

    thread = threading.Thread(target=client)
    thread.start()
    handshake = Handshake(a, sctx, server_side=True)
    with selectors.DefaultSelector() as sel:
        sel.register(a, selectors.EVENT_READ)
        deadline = time.monotonic() + 10
        while not handshake.step():
            assert time.monotonic() < deadline
            sel.modify(a, selectors.EVENT_READ | (
                selectors.EVENT_WRITE if handshake.wants_write else 0))
            sel.select(1)
    with handshake.stream(10) as tls:
        assert tls.recv(5) == b"hello"
        tls.sendall(b"world")
    thread.join(10)
    assert out == [b"world"]
