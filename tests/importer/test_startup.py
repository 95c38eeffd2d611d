"""What an importer pod pays before its first byte: the modules a run imports and the
exit of its metrics server. A blank volume (and any non-HTTP route) must not import the
HTTP client or the NBD machinery, and the metrics server must let the process go."""

from __future__ import annotations

import json
import socket
import subprocess
import sys

from importer.metrics import ProgressMetric
from importer.progress import Update
from tests.fixtures.ports import assert_unbound

PROBE = """
import json, sys
import importer.run, importer.sources.blank
print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in
                        ('requests', 'urllib3', 'boto3', 'importer', 'http'))))
"""


def modules_after(code: str) -> set[str]:
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, timeout=60)
    return set(json.loads(out.stdout))


def test_a_blank_import_loads_no_http_client_nor_nbd() -> None:
    loaded = modules_after(PROBE)
    assert "importer.run" in loaded and "importer.sources.blank" in loaded  # it did load
    for heavy in ("requests", "urllib3", "boto3", "importer.nbd", "importer.rangeproxy",
                  "importer.sources.http", "http.server"):
        assert heavy not in loaded, f"{heavy} imported by a blank import"


CONFIG_PROBE = """
import json, sys
from importer import config
from importer.uploadserver import config as upload
config.from_env({"IMPORTER_SOURCE": "blank", "IMPORTER_IMAGE_SIZE": "1Gi",
                 "IMPORTER_DESTINATION": "/data/disk.img"})
upload.from_env({"IMPORTER_IMAGE_SIZE": "1Gi", "IMPORTER_DESTINATION": "/data/disk.img"})
print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in
                        ('requests', 'urllib3', 'boto3', 'importer', 'http'))))
"""


def test_reading_the_config_loads_only_the_sources_reader() -> None:
    """The config checks a source through its reader module (``importer/sources/<kind>``):
    a blank volume's and the upload server's configs load no HTTP client."""
    loaded = modules_after(CONFIG_PROBE)
    assert "importer.sources.blank" in loaded  # its check_config ran
    for heavy in ("requests", "urllib3", "boto3", "importer.sources.http"):
        assert heavy not in loaded, f"{heavy} imported by reading a config"


def test_the_nbd_route_loads_the_range_proxy_only_when_it_serves_one() -> None:
    loaded = modules_after(PROBE.replace("importer.sources.blank", "importer.nbd"))
    assert "importer.nbd" in loaded and "importer.rangeproxy" not in loaded


def test_an_s3_import_loads_no_http_client_of_its_own() -> None:
    """boto3 brings urllib3; requests (and the HTTP source) only cost an S3 import's
    start time (~40 ms of imports)."""
    loaded = modules_after(PROBE.replace("importer.sources.blank",
                                         "importer.sources.s3, importer.nbd"))
    assert "importer.sources.s3" in loaded and "importer.nbd" in loaded
    assert "requests" not in loaded and "importer.sources.http" not in loaded


def test_metrics_server_serves_then_frees_its_port() -> None:
    metric = ProgressMetric(owner_uid="u-1", port=0, addr="127.0.0.1")
    port = metric.server.server_address[1]
    metric(Update(percent=42.0, done_bytes=42, total_bytes=100, elapsed=1.0))
    with socket.create_connection(("127.0.0.1", port), timeout=10) as conn:
        conn.sendall(b"GET /metrics HTTP/1.0\r\n\r\n")
        body = b"".join(iter(lambda: conn.recv(65536), b""))
    assert b'kubevirt_cdi_import_progress_total{ownerUID="u-1"} 42.0' in body
    metric.close()
    assert not metric._serving.thread.is_alive()
    assert_unbound(port)
