"""Probe timing and verdicts (table), and the probes against real sockets."""

from __future__ import annotations

import http.server
import ssl
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from localcluster.kubelet.probes import ProbeTracker, run_probe
from tests.fixtures.ports import free_port
from tests.fixtures.tls import make_tls


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


class Healthz(http.server.BaseHTTPRequestHandler):
    """200 on /healthz, 500 elsewhere."""

    def do_GET(self) -> None:
        self.send_response(200 if self.path == "/healthz" else 500)
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def http_server() -> Iterator[int]:
    server = http.server.HTTPServer(("127.0.0.1", 0), Healthz)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server.server_address[1]
    server.shutdown()
    server.server_close()


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


def test_https_probe_skips_verification_and_loads_no_ca_bundle(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """As the kubelet, an HTTPS probe does not verify the pod's certificate (here one
    from a CA nobody trusts); and no probe loads a CA bundle: building a default
    context per probe (the system's whole bundle each time) was most of an idle
    cluster's CPU."""
    tls = make_tls(tmp_path)
    server = http.server.HTTPServer(("127.0.0.1", 0), Healthz)
    server.socket = tls.server_context().wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    loads: list[str] = []
    for name in ("load_default_certs", "load_verify_locations", "set_default_verify_paths"):
        real = getattr(ssl.SSLContext, name)
        monkeypatch.setattr(ssl.SSLContext, name,
                            lambda self, *a, _n=name, _r=real, **k: (loads.append(_n),
                                                                     _r(self, *a, **k))[1])
    try:
        port = server.server_address[1]
        for _ in range(3):
            assert run_probe({"httpGet": {"path": "/healthz", "port": port, "scheme": "HTTPS"}},
                             pod_ip="127.0.0.1", container={}, timeout=2)
        assert not run_probe({"httpGet": {"path": "/bad", "port": port, "scheme": "HTTPS"}},
                             pod_ip="127.0.0.1", container={}, timeout=2)
    finally:
        server.shutdown()
        server.server_close()
    assert loads == []
