"""A stopped server holds no socket: a peer that opened a TLS connection and never sent
its ClientHello must not outlive the server's loop (asyncio 3.11 forgets such
connections; the garbage collector then finds an open socket, a ResourceWarning)."""

from __future__ import annotations

import asyncio
import gc
import socket
import ssl
import time
import warnings
from collections.abc import Callable
from pathlib import Path

from aiohttp import web

from localcluster.apiserver.threaded import ServerThread
from localcluster.looptransports import abort_open_transports
from tests.fixtures.appthread import AppThread
from tests.fixtures.httpserver import HttpServer
from tests.fixtures.tls import make_tls


def _silent_peer(port: int) -> socket.socket:
    """Connect and say nothing: the server's side stays in its TLS handshake."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=5)
    time.sleep(0.2)  # the server has accepted it
    return sock


def _leaked_sockets_after(stop: Callable[[], object]) -> list[warnings.WarningMessage]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        stop()
        gc.collect()
    return [w for w in caught if issubclass(w.category, ResourceWarning)]


def _stops_with_a_silent_peer(port: int, stop: Callable[[], object]) -> None:
    """A peer connected to ``port`` and silent (its TLS handshake pending) while the
    server stops: no socket is left to the garbage collector and the peer sees EOF."""
    peer = _silent_peer(port)
    try:
        assert _leaked_sockets_after(stop) == []
        peer.settimeout(5)
        assert peer.recv(1) == b""  # the server closed its end
    finally:
        peer.close()


def test_app_thread_closes_a_connection_stuck_in_its_handshake(tmp_path: Path) -> None:
    """AppThread runs its loop with asyncio.run, whose cancellation of the pending accept
    task closes the connection; this guards that it stays so."""
    material = make_tls(tmp_path)

    async def build() -> tuple[web.Application, ssl.SSLContext]:
        return web.Application(), material.server_context()

    server = AppThread(build, name="tls test server")
    server.start()
    _stops_with_a_silent_peer(server.port, server.stop)


def test_api_server_thread_closes_a_connection_stuck_in_its_handshake(tmp_path: Path) -> None:
    """ServerThread runs its own loop to completion: without abort_open_transports the
    accepted socket stayed open (the CI failure of 1 Dec 2026 in tests/vm)."""
    thread = ServerThread(tmp_path / "api")
    server = thread.start()
    _stops_with_a_silent_peer(int(server.url.rsplit(":", 1)[1]), thread.stop)


def test_https_test_server_closes_a_connection_stuck_in_its_handshake(tmp_path: Path) -> None:
    """The tests' HTTPS image server stops its loop itself: a client still in its TLS
    handshake when it stops must not leave the accepted socket to the garbage collector
    (a leaked socket fails the next test to collect it, whichever that is)."""
    material = make_tls(tmp_path)
    server = HttpServer(tmp_path, ssl_context=material.server_context())
    server.start()
    _stops_with_a_silent_peer(server.port, server.stop)


def test_a_transport_that_reads_nothing_is_aborted_too() -> None:
    """A connection whose reading is paused (flow control) and that has nothing to write
    is in no selector set, yet open: abort_open_transports finds it by the loop's own
    registry of transports, and the loop ends holding no socket."""
    async def main() -> bool:
        server = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        client, _ = await asyncio.get_running_loop().create_connection(
            asyncio.Protocol, "127.0.0.1", port)
        client.pause_reading()
        server.close()
        await abort_open_transports()
        return client.is_closing()

    closed: list[bool] = []
    assert _leaked_sockets_after(lambda: closed.append(asyncio.run(main()))) == []
    assert closed == [True]
