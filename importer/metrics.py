"""The progress metric upstream's controllers scrape:
``kubevirt_cdi_import_progress_total{ownerUID="…"}``, a counter in percent, on :8443.

Served over plain HTTP (upstream uses a self-signed HTTPS endpoint that its scraper does
not verify; rootdisk's controller scrapes plain HTTP).

The server is prometheus_client's request handler on a threading HTTP server of our own
rather than ``start_http_server``: that one's accept loop polls for shutdown every
0.5 s, and stopping it cost every importer pod up to half a second at exit (a blank
DataVolume's whole import takes less). Here it is an :class:`importer.serving.ServingThread`.
"""

from __future__ import annotations

import socket
import threading
from http.server import ThreadingHTTPServer

from prometheus_client import CollectorRegistry, Counter, MetricsHandler

from importer.progress import Update
from importer.serving import ServingThread


def _server(addr: str, port: int, handler: type[MetricsHandler]) -> ThreadingHTTPServer:
    """A server on ``addr`` in its own address family (an IPv6 pod IP needs AF_INET6)."""
    family, _, _, _, sockaddr = socket.getaddrinfo(
        addr, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)[0]

    class Server(ThreadingHTTPServer):
        address_family = family
        daemon_threads = True

    return Server((str(sockaddr[0]), port), handler)


class ProgressMetric:
    def __init__(self, *, owner_uid: str, port: int, addr: str = "0.0.0.0",
                 name: str = "kubevirt_cdi_import_progress") -> None:
        self.registry = CollectorRegistry()
        self._counter = Counter(
            name,
            "Progress in percent",
            ["ownerUID"],
            registry=self.registry,
        ).labels(ownerUID=owner_uid)
        self._reported = 0.0
        self._lock = threading.Lock()
        self.server = _server(addr, port, MetricsHandler.factory(self.registry))
        self._serving = ServingThread(self.server, "metrics")
        self._serving.start()

    def __call__(self, update: Update) -> None:
        with self._lock:
            delta = update.percent - self._reported
            if delta > 0:
                self._counter.inc(delta)
                self._reported = update.percent

    def close(self) -> None:
        self._serving.stop()
