"""The importer pod's registry source needs no deadline of its own: a registry that
trickles the manifest (a byte well within the per-read timeout) is failed by the import's
watchdog (``Stalled``, retryable), since no disk byte arrives while the manifest is read."""

from __future__ import annotations

import time
from pathlib import Path

from importer.errors import Stalled
from tests.importer.conftest import ImportFn
from tests.ociregistry.test_bounded_reads import TRICKLED, Hostile, hostile  # noqa: F401
from vocab import sources

WINDOW = 0.5


def test_a_trickled_manifest_stalls_the_import(hostile: tuple[Hostile, int],  # noqa: F811
                                               do_import: ImportFn, tmp_path: Path) -> None:
    state, port = hostile
    started = time.monotonic()
    outcome = do_import(f"docker://127.0.0.1:{port}/golden:trickle", tmp_path / "disk.img",
                        source=sources.REGISTRY, insecure_tls=True, read_timeout=5.0,
                        stall_min_bytes=1, stall_window=WINDOW)
    assert isinstance(outcome.error, Stalled), outcome.error
    assert outcome.error.retryable
    assert time.monotonic() - started < WINDOW + 2.0
    assert state.closed["trickle"].wait(10), "the registry never saw the import hang up"
    assert 0 < state.sent["trickle"] < len(TRICKLED)
