"""Probe timing and verdicts (table), and the probes against real sockets."""

from __future__ import annotations

import http.server
import socket
import threading
from collections.abc import Iterator

import pytest

from localcluster.kubelet.probes import ProbeTracker, run_probe


def test_initial_delay_and_period() -> None:
    t = ProbeTracker({"initialDelaySeconds": 5, "periodSeconds": 2}, started=100.0)
    assert not t.due(104.9) and t.due(105.0)
    t.record(True, 105.0)
    assert not t.due(106.9) and t.due(107.0)


@pytest.mark.parametrize(("spec", "results", "verdicts"), [
    ({}, [True], [True]),
    ({}, [False, False, False], [False, False, False]),
    ({}, [True, False, False, False], [True, True, True, False]),
    ({"failureThreshold": 1}, [True, False], [True, False]),
    ({"successThreshold": 2}, [True, True], [False, True]),
    ({"successThreshold": 2}, [True, False, True, True], [False, False, False, True]),
])
def test_thresholds(spec: dict, results: list[bool], verdicts: list[bool]) -> None:
    t = ProbeTracker(spec, started=0.0)
    assert [t.record(r, float(i)) for i, r in enumerate(results)] == verdicts


@pytest.fixture
def http_server() -> Iterator[int]:
    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200 if self.path == "/healthz" else 500)
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server.server_address[1]
    server.shutdown()
    server.server_close()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_http_and_tcp_probes(http_server: int) -> None:
    c = {"ports": [{"name": "web", "containerPort": http_server}]}
    ok = {"httpGet": {"path": "/healthz", "port": "web"}}
    assert run_probe(ok, pod_ip="127.0.0.1", container=c, timeout=2)
    assert not run_probe({"httpGet": {"path": "/broken", "port": http_server}},
                         pod_ip="127.0.0.1", container=c, timeout=2)
    assert run_probe({"tcpSocket": {"port": http_server}}, pod_ip="127.0.0.1", container=c,
                     timeout=2)
    closed = free_port()
    assert not run_probe({"tcpSocket": {"port": closed}}, pod_ip="127.0.0.1", container=c,
                         timeout=2)
    assert not run_probe({"httpGet": {"port": "nope"}}, pod_ip="127.0.0.1", container=c,
                         timeout=2)
