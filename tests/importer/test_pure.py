"""Pure pieces: the termination message bound, the block cache, route decisions."""

from __future__ import annotations

import json
import threading
import time

import pytest

from importer import plan
from importer.blockcache import BlockCache
from importer.config import ContentType
from importer.errors import InvalidImage, TooSmall, TransferError
from importer.formats import Compression, Image, ImageFormat
from importer.plan import (
    ARRIVAL_PIECES,
    Route,
    arrival_piece,
    check_fits,
    choose_route,
    usable_bytes,
)
from importer.qemu_img import ImageInfo
from importer.termination import LIMIT, message
from sizes import MIB

KIB = 1024


def test_termination_message_fits_4096_bytes() -> None:
    data = message(reason="InvalidImage", text="x" * 10_000, retryable=False)
    assert len(data) <= LIMIT
    body = json.loads(data)
    assert body["reason"] == "InvalidImage" and body["message"].endswith("…")


def test_termination_message_keeps_short_text() -> None:
    body = json.loads(message(reason="NotFound", text="gone", retryable=False))
    assert body == {"reason": "NotFound", "message": "gone", "retryable": False}


QCOW2 = Image(ImageFormat.QCOW2, 1 << 30)
RAW = Image(ImageFormat.RAW, None)
TAR = Image(ImageFormat.RAW, None, tar=True)


@pytest.mark.parametrize(("image", "compressions", "ranged", "checksum", "route"), [
    (RAW, (), True, False, Route.STREAM),
    (RAW, (Compression.XZ,), False, True, Route.STREAM),
    (QCOW2, (), True, False, Route.NBD_CONVERT),
    (QCOW2, (), False, False, Route.SCRATCH_CONVERT),
    (QCOW2, (), True, True, Route.SCRATCH_CONVERT),
    (QCOW2, (Compression.GZIP,), True, False, Route.SCRATCH_CONVERT),
])
def test_routes(image: Image, compressions: tuple[Compression, ...], ranged: bool,
                checksum: bool, route: Route) -> None:
    decision = choose_route(content_type=ContentType.KUBEVIRT, compressions=compressions,
                            image=image, ranged=ranged, checksum=checksum)
    assert decision.route is route and decision.why


@pytest.mark.parametrize(("image", "route"), [(QCOW2, Route.SCRATCH_CONVERT),
                                              (RAW, Route.STREAM)])
def test_a_spooled_upload_converts_from_its_scratch_file(image: Image, route: Route) -> None:
    """An upload kept whole in scratch (ranged, so NBD would otherwise be chosen)."""
    decision = choose_route(content_type=ContentType.KUBEVIRT, compressions=(), image=image,
                            ranged=True, checksum=False, spooled=True)
    assert decision.route is route


def test_archive_route_needs_a_tar() -> None:
    assert choose_route(content_type=ContentType.ARCHIVE, compressions=(), image=TAR,
                        ranged=True, checksum=False).route is Route.ARCHIVE
    with pytest.raises(InvalidImage):
        choose_route(content_type=ContentType.ARCHIVE, compressions=(), image=QCOW2,
                     ranged=True, checksum=False)


def test_usable_bytes() -> None:
    from fractions import Fraction
    mib = 1 << 20
    assert usable_bytes(block_device_size=5 * mib, requested=None, available=0,
                        overhead=Fraction(6, 100)) == 5 * mib
    assert usable_bytes(block_device_size=None, requested=100 * mib, available=1 << 40,
                        overhead=Fraction(6, 100)) == 94 * mib
    assert usable_bytes(block_device_size=None, requested=100 * mib, available=10 * mib,
                        overhead=Fraction(6, 100)) == 10 * mib
    with pytest.raises(TooSmall, match="virtual size 11 bytes > usable 10 bytes"):
        check_fits(virtual_size=11, usable=10)
    check_fits(virtual_size=None, usable=10)


def read(cache: BlockCache, offset: int, length: int) -> bytes:
    return b"".join(cache.read_parts(offset, length))


def test_block_cache_reads_across_blocks_and_fetches_each_once() -> None:
    data = bytes(range(256)) * 1000
    fetched: list[tuple[int, int]] = []
    lock = threading.Lock()

    def fetch(start: int, length: int) -> bytes:
        with lock:
            fetched.append((start, length))
        return data[start : start + length]

    cache = BlockCache(fetch, size=len(data), block_size=4096, capacity=4, prefetch=2)
    try:
        assert read(cache, 4000, 200) == data[4000:4200]
        assert read(cache, 0, len(data) // 2) == data[: len(data) // 2]
        assert read(cache, len(data) - 10, 10) == data[-10:]
        starts = [s for s, _ in fetched]
        assert len(starts) == len(set(starts))  # no block fetched twice
        with pytest.raises(ValueError, match="outside"):
            read(cache, len(data) - 5, 10)
    finally:
        cache.close()


def test_block_cache_reads_ahead_only_once_reads_run_in_sequence() -> None:
    """qemu-img info and check read a qcow2's metadata here and there (64 KiB at a
    time), then the convert reads it in order. Read-ahead on the scattered reads fetched
    blocks nobody read, and evicted the ones read again: only a run of reads in sequence
    over a block or more is read ahead of, each read continuing one of the last few:
    from inside it, from its end, or a little past it (a compressed qcow2's L2 table
    between its clusters)."""
    block = MIB
    data = bytes(range(256)) * (16 * MIB // 256)  # 16 blocks
    fetched: list[int] = []
    lock = threading.Lock()

    def fetch(start: int, length: int) -> bytes:
        with lock:
            fetched.append(start // block)
        return data[start : start + length]

    cache = BlockCache(fetch, size=len(data), block_size=block, capacity=4, prefetch=2)
    try:
        for offset, length in [(300, 17), (64 * KIB, 64 * KIB + 1), (128 * KIB, 64 * KIB + 1),
                               (10 * block, 100), (300, 17), (10 * block, 100)]:
            assert read(cache, offset, length) == data[offset : offset + length]
        assert fetched == [0, 10]  # each block touched, once; nothing ahead
        run, quarter = 4 * block, block // 4
        for offset, length in [(0, quarter), (quarter, quarter),  # end to end
                               (2 * quarter + 4 * KIB, quarter + 1),  # 4 KiB past the end
                               (3 * quarter + 4 * KIB, quarter + 1)]:  # a byte over
            read(cache, run + offset, length)
        deadline = time.monotonic() + 10  # the fetches ahead run in the cache's threads
        while len(fetched) < 6 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert sorted(fetched) == [0, 4, 5, 6, 7, 10]  # 6 and 7 ahead of the run's end
    finally:
        cache.close()


def test_block_cache_does_not_keep_failures() -> None:
    calls = {"n": 0}

    def flaky(start: int, length: int) -> bytes:
        calls["n"] += 1
        if calls["n"] == 1:
            raise TransferError("dropped")
        return bytes(length)

    cache = BlockCache(flaky, size=100, block_size=64, prefetch=0)
    with pytest.raises(TransferError):
        read(cache, 0, 10)
    assert read(cache, 0, 10) == bytes(10)
    cache.close()


@pytest.mark.parametrize(("text", "algorithm", "digest"), [
    ("sha256:" + "A" * 64, "sha256", "a" * 64),
    (" SHA256 : " + "ab" * 32 + " ", "sha256", "ab" * 32),   # each part trimmed, as the
    ("md5:" + "0" * 32, "md5", "0" * 32),                     # webhook (upstream) accepts
])
def test_checksum_parsing_accepts_what_the_webhook_does(text: str, algorithm: str,
                                                        digest: str) -> None:
    from importer.checksum import parse_checksum
    parsed = parse_checksum(text)
    assert (parsed.algorithm, parsed.hexdigest) == (algorithm, digest)


@pytest.mark.parametrize("text", ["sha256", "crc32:abcd", "sha256:abc", "md5:" + "g" * 32])
def test_checksum_parsing_refuses(text: str) -> None:
    from importer.checksum import parse_checksum
    with pytest.raises(ValueError, match="IMPORTER_CHECKSUM"):
        parse_checksum(text, field="IMPORTER_CHECKSUM")


MiBps = 1024 * 1024


@pytest.mark.parametrize(("one", "two", "parallel"), [
    (16 * MiBps, 32 * MiBps, True),  # each connection capped: two add up
    (16 * MiBps, 24 * MiBps, True),  # 1.5 x one: enough to gain
    (16 * MiBps, 20 * MiBps, False),  # a full link: two share it
    (16 * MiBps, None, False),  # not measured
    (200 * MiBps, None, False),  # fast enough that one C stream is best
    (64 * MiBps, 128 * MiBps, False),  # at the bound: one stream
])
def test_parallel_ranges_only_where_connections_add_up(one: float, two: float | None,
                                                       parallel: bool) -> None:
    assert plan.parallel_ranges(one=one, two=two) is parallel


@pytest.mark.parametrize(("cluster", "virtual", "piece"), [
    (65536, 4 * 1024**3, 512 * 1024**2),  # one L2 table's 512 MiB a run
    (65536, 100 * 1024**3, 7 * 512 * 1024**2),  # 200 tables: 7 a run, 29 runs
    (4096, 16 * 1024**2, 2 * 1024**2),
])
def test_the_range_converted_at_a_time_is_whole_l2_tables(cluster: int, virtual: int,
                                                          piece: int) -> None:
    info = ImageInfo("qcow2", virtual, None, None, {"cluster-size": cluster})
    assert arrival_piece(info) == piece
    assert -(-virtual // piece) <= ARRIVAL_PIECES


def test_other_formats_are_converted_in_one_run() -> None:
    assert arrival_piece(ImageInfo("vmdk", 1 << 30, None, None, {"cluster-size": 65536})) is None
    assert arrival_piece(ImageInfo("qcow2", 1 << 30, None, None, {})) is None
