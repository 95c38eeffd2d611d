"""The importer's servers (its range endpoint's NBD server, its metrics) stop within
tens of milliseconds: the stdlib's accept loop checks for shutdown every 0.5 s by default, and
each stop is at the end of an import, which the user waits for."""

from __future__ import annotations

import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from importer.metrics import ProgressMetric
from importer.rangeproxy import RangeProxy
from importer.serving import ServingThread
from tests.fixtures.ports import assert_unbound

STOPS = 10
ALL_STOPS_WITHIN = 1.0
"""Seconds for ten stops in all. With the default 0.5 s poll each stop waits a uniform
0–0.5 s (1.25 s expected; ten of them under 1 s: about 3 in 10 000); at 20 ms they
take a few ms each."""


def total_stop_time(start_and_stop: Callable[[], Callable[[], None]]) -> float:
    total = 0.0
    for _ in range(STOPS):
        stop = start_and_stop()
        began = time.monotonic()
        stop()
        total += time.monotonic() - began
    return total


def test_a_serving_thread_stops_promptly_and_frees_its_port() -> None:
    ports = []

    def start() -> Callable[[], None]:
        server = ThreadingHTTPServer(("127.0.0.1", 0), BaseHTTPRequestHandler)
        serving = ServingThread(server, "test")
        serving.start()
        ports.append(server.server_address[1])

        def stop() -> None:
            serving.stop()
            assert not serving.thread.is_alive()
        return stop

    assert total_stop_time(start) < ALL_STOPS_WITHIN
    assert_unbound(ports[-1])  # no listener left behind


def test_the_range_endpoint_ends_its_import_promptly(tmp_path: Path) -> None:
    data = b"x" * 4096
    path = tmp_path / "nbd.sock"

    def start() -> Callable[[], None]:
        proxy = RangeProxy(lambda offset, n: data[offset:offset + n], size=len(data),
                           socket_path=path)
        proxy.__enter__()
        return lambda: proxy.__exit__(None, None, None)

    assert total_stop_time(start) < ALL_STOPS_WITHIN
    assert not path.exists()  # its socket goes with it


def test_the_metrics_server_lets_the_pod_exit_promptly() -> None:
    def start() -> Callable[[], None]:
        return ProgressMetric(owner_uid="u-1", port=0, addr="127.0.0.1").close

    assert total_stop_time(start) < ALL_STOPS_WITHIN
