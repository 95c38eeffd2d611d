"""What the README promises about transfers, each proved by what the server saw: retries
back off, a stalled read times out and resumes, the size of xz and zstd images is known
before their transfer."""

from __future__ import annotations

import itertools
import lzma
import os
from pathlib import Path

import zstandard

from importer.errors import TooSmall, TransferError
from tests.fixtures.httpserver import Faults, HttpServer
from tests.fixtures.images import ImageFactory
from tests.importer.conftest import ImportFn

KiB, MiB = 1024, 1024 * 1024


def test_retries_back_off_exponentially(images: ImageFactory, http_server: HttpServer,
                                        do_import: ImportFn, tmp_path: Path) -> None:
    url = http_server.publish(images.get("raw").path, "busy.img")
    http_server.set_faults("busy.img", Faults(status=503))
    outcome = do_import(url, tmp_path / "d.img", retry_attempts=4, retry_delay=0.1)
    assert isinstance(outcome.error, TransferError)
    times = [r.at for r in http_server.requests_for("busy.img")]
    assert len(times) == 4
    gaps = [b - a for a, b in itertools.pairwise(times)]
    # Sleeping never ends early: each gap is at least its backoff (0.1, 0.2, 0.4 s).
    for gap, least in zip(gaps, (0.1, 0.2, 0.4), strict=True):
        assert gap >= least * 0.95, gaps


def test_stalled_read_times_out_and_resumes(images: ImageFactory, http_server: HttpServer,
                                            do_import: ImportFn, tmp_path: Path) -> None:
    image = images.get("raw")
    url = http_server.publish(image.path, "stall.img")
    http_server.set_faults("stall.img", Faults(stall_after=MiB, stall_times=2,
                                               stall_seconds=60))
    # Without a read timeout the import would sit in the stall until the deadline.
    outcome = do_import(url, tmp_path / "d.img", read_timeout=0.5, deadline=30.0)
    assert outcome.exit_code == 0, outcome.error
    ranges = [r.range for r in http_server.requests_for("stall.img", "GET")]
    assert any(r and r.startswith(f"bytes={MiB}-") for r in ranges), ranges
    assert (tmp_path / "d.img").read_bytes() == image.path.read_bytes()


def _xz_of_noise(path: Path, size: int) -> None:
    """Incompressible data, so the stream is far larger than what the check may read."""
    compressor = lzma.LZMACompressor(format=lzma.FORMAT_XZ, preset=0)
    with path.open("wb") as f:
        for _ in range(size // MiB):
            f.write(compressor.compress(os.urandom(MiB)))
        f.write(compressor.flush())


def _zstd_of_noise(path: Path, size: int) -> None:
    with path.open("wb") as f, \
            zstandard.ZstdCompressor(level=1).stream_writer(f, size=size, closefd=False) as w:
        for _ in range(size // MiB):
            w.write(os.urandom(MiB))


def test_xz_and_zstd_too_small_before_the_transfer(http_server: HttpServer,
                                                   do_import: ImportFn, tmp_path: Path) -> None:
    for name, make in (("big.raw.xz", _xz_of_noise), ("big.raw.zst", _zstd_of_noise)):
        path = tmp_path / "www" / name
        make(path, 16 * MiB)
        http_server.clear_requests()
        outcome = do_import(http_server.url_for(name), tmp_path / "d.img", image_size=8 * MiB)
        assert isinstance(outcome.error, TooSmall), (name, outcome.error)
        sent = sum(r.sent or 0 for r in http_server.requests)
        # The head and (xz) the tail: never the stream itself.
        assert sent <= 2 * 64 * KiB < path.stat().st_size, (name, sent)
        assert not (tmp_path / "d.img").exists()
