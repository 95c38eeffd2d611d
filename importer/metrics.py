"""The progress metric upstream's controllers scrape:
``kubevirt_cdi_import_progress_total{ownerUID="…"}``, a counter in percent, on :8443.

Served over plain HTTP (upstream uses a self-signed HTTPS endpoint that its scraper does
not verify; rootdisk's controller scrapes plain HTTP).
"""

from __future__ import annotations

import threading

from prometheus_client import CollectorRegistry, Counter, start_http_server

from importer.progress import Update


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
        self.server, _ = start_http_server(port, addr=addr, registry=self.registry)

    def __call__(self, update: Update) -> None:
        with self._lock:
            delta = update.percent - self._reported
            if delta > 0:
                self._counter.inc(delta)
                self._reported = update.percent

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
