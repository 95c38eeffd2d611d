"""glibc's thresholds under the importer's own large reads: what is freed goes back.
Each probe runs in a process of its own (glibc's settings are process-wide) and reads
its own anonymous memory from /proc."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.fixtures.httpserver import Faults, HttpServer
from tests.fixtures.images import MiB

ANONYMOUS = """
def anonymous():
    with open("/proc/self/smaps_rollup") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("Anonymous:"))
"""

RATES_PROBE = ANONYMOUS + """
import json, sys
from importer import nbd
from importer.config import ImporterConfig
from importer.sources.http import HTTPSource

source = HTTPSource(ImporterConfig(source="http", endpoint=sys.argv[1]))
probe = source.probe()
before = anonymous()
one, two = nbd._server_rates(source, probe.size, lambda n: None)
print(json.dumps({"kept_kib": anonymous() - before, "two": two}))
"""


def run_probe(code: str, *args: str) -> dict[str, float]:
    done = subprocess.run([sys.executable, "-c", code, *args], capture_output=True,
                          text=True, check=True, timeout=60)
    result: dict[str, float] = json.loads(done.stdout)
    return result


def test_the_rate_measurement_leaves_nothing_resident(http_server: HttpServer) -> None:
    """A capped server: one 2 MiB read, then two side by side in two threads. Their
    memory is handed back once read: the two threads' heaps kept 4 MiB of it for the
    whole import, when glibc's thresholds had been raised by the first read's free."""
    image = http_server.root / "rates.img"
    image.write_bytes(bytes(range(256)) * (64 * 1024))  # 16 MiB: large enough to measure
    url = http_server.publish(image, "rates.img")
    http_server.set_faults("rates.img", Faults(connection_rate=16 * MiB))
    result = run_probe(RATES_PROBE, url)
    assert result["two"] is not None  # the two reads side by side were taken
    assert result["kept_kib"] < 1024, f"{result['kept_kib']} KiB still resident"
