"""The minimum-throughput rule and the overall deadline: a trickling or stalling server
cannot keep an import alive for ever (the per-read timeout and the retry budget, which
starts again on any progress, never end it)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from importer.errors import DeadlineExceeded, Stalled
from importer.watchdog import Rule
from tests.fixtures.httpserver import Faults, HttpServer
from tests.fixtures.images import ImageFactory
from tests.importer.conftest import ImportFn
from tests.importer.test_hostile import _fetched_by_curl

KiB, MiB = 1024, 1024 * 1024


@pytest.mark.parametrize(("name", "faults"), [
    ("raw", Faults(rate=8 * KiB)),  # trickles: each read is well inside the 60 s timeout
    ("raw", Faults(stall_after=MiB, stall_times=None, stall_seconds=30)),  # stalls
    ("qcow2", Faults(rate=8 * KiB)),  # nbd route: nbdkit's curl plugin fetches
], ids=["trickle-stream", "stall-stream", "trickle-nbd"])
def test_slow_source_is_stalled(images: ImageFactory, http_server: HttpServer,
                                do_import: ImportFn, tmp_path: Path, name: str,
                                faults: Faults) -> None:
    url = http_server.publish(images.get(name).path, "slow-" + name)
    http_server.set_faults("slow-" + name, faults)
    dest = tmp_path / "d.img"
    outcome = do_import(url, dest, stall_min_bytes=256 * KiB, stall_window=1.0)
    assert isinstance(outcome.error, Stalled), outcome.error
    assert outcome.exit_code == 1 and outcome.error.retryable
    message = json.loads(outcome.termination)
    assert message["reason"] == "Stalled"
    assert "fewer than 262144 bytes arrived in 1 s" in message["message"]
    assert not dest.exists()


def test_deadline(images: ImageFactory, http_server: HttpServer, do_import: ImportFn,
                  tmp_path: Path) -> None:
    url = http_server.publish(images.get("raw").path, "steady.img")
    http_server.set_faults("steady.img", Faults(rate=2 * MiB))  # ~8 s, never stalled
    outcome = do_import(url, tmp_path / "d.img", deadline=1.0)
    assert isinstance(outcome.error, DeadlineExceeded), outcome.error
    assert outcome.exit_code == 2
    assert json.loads(outcome.termination)["reason"] == "DeadlineExceeded"
    assert not (tmp_path / "d.img").exists()


def test_fast_enough_source_completes(images: ImageFactory, http_server: HttpServer,
                                      do_import: ImportFn, tmp_path: Path) -> None:
    url = http_server.publish(images.get("qcow2.gz").path, "ok.qcow2.gz")
    outcome = do_import(url, tmp_path / "d.img", stall_min_bytes=1, stall_window=0.5,
                        deadline=120.0)
    assert outcome.exit_code == 0, outcome.error  # the scratch convert is paused, not stalled


@pytest.mark.parametrize("query", ["", "?X-Amz-Signature=abc"], ids=["direct", "proxy"])
def test_nbd_route_reports_the_bytes_it_fetched(images: ImageFactory, http_server: HttpServer,
                                                do_import: ImportFn, tmp_path: Path,
                                                query: str) -> None:
    image = images.get("qcow2")
    url = http_server.publish(image.path) + query
    outcome = do_import(url, tmp_path / "d.img")
    assert outcome.result is not None and outcome.result.route == "nbd-convert"
    assert _fetched_by_curl(http_server) == (query == "")
    sent = sum(r.sent or 0 for r in http_server.requests)
    fetched = outcome.result.fetched_bytes
    assert json.loads(outcome.termination)["fetchedBytes"] == fetched
    # What the server sent, less the probe's head (read by the importer, not counted),
    # plus at most the HTTP headers and NBD requests nbdkit reads on the way.
    assert sent - 128 * KiB <= fetched <= sent + 256 * KiB, (fetched, sent)
    assert fetched >= image.size // 2


def test_rule_is_pure() -> None:
    rule = Rule(min_bytes=100, window=10.0, deadline=None, started=0.0)
    rule.check(now=0.0, total=0)
    rule.check(now=5.0, total=50)
    with pytest.raises(Stalled):
        rule.check(now=10.0, total=99)
    rule = Rule(min_bytes=100, window=10.0, deadline=None, started=0.0)
    for second in range(60):
        rule.check(now=float(second), total=second * 20)  # 200 bytes per window: fine
    rule.pause(now=60.0)
    rule.check(now=500.0, total=1200)  # paused: no fetching expected
    rule.resume(now=500.0)
    rule.check(now=505.0, total=1200)
    rule.check(now=509.0, total=1200)  # the window starts afresh at the resume
    with pytest.raises(Stalled):
        rule.check(now=516.0, total=1200)
    with pytest.raises(DeadlineExceeded):
        Rule(min_bytes=0, window=1.0, deadline=3.0, started=0.0).check(now=3.5, total=9)
