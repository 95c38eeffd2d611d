"""The loopback range endpoint nbdkit's curl plugin reads through."""

from __future__ import annotations

import threading
import time
import weakref
from array import array

import pytest
import requests

from importer.errors import NotFound
from importer.rangeproxy import FEW_LARGE, MANY_SMALL, RangeProxy, ReadAhead

DATA = bytes(range(256)) * 40_000  # ~10 MiB: several cache blocks


def test_head_and_ranges() -> None:
    with RangeProxy(lambda s, n: DATA[s : s + n], size=len(DATA)) as proxy:
        head = requests.head(proxy.url, timeout=5)
        assert head.status_code == 200
        assert head.headers["Content-Length"] == str(len(DATA))
        assert head.headers["Accept-Ranges"] == "bytes"
        part = requests.get(proxy.url, headers={"Range": "bytes=3000000-5000000"}, timeout=5)
        assert part.status_code == 206 and part.content == DATA[3000000:5000001]
        assert part.headers["Content-Range"] == f"bytes 3000000-5000000/{len(DATA)}"
        # A last byte past the end is clamped, as HTTP servers do.
        tail = requests.get(proxy.url, headers={"Range": f"bytes=100-{len(DATA) + 50}"},
                            timeout=5)
        assert tail.status_code == 206 and tail.content == DATA[100:]


def test_bad_requests() -> None:
    with RangeProxy(lambda s, n: DATA[s : s + n], size=len(DATA)) as proxy:
        base = proxy.url.rsplit("/", 1)[0]
        assert requests.get(base + "/guess", headers={"Range": "bytes=0-1"},
                            timeout=5).status_code == 404
        assert requests.get(proxy.url, headers={"Range": f"bytes={len(DATA)}-"},
                            timeout=5).status_code == 416
        assert requests.get(proxy.url, timeout=5).status_code == 400


def test_source_failure_is_kept_for_the_report() -> None:
    def fail(start: int, length: int) -> bytes:
        raise NotFound("gone")

    with RangeProxy(fail, size=len(DATA)) as proxy:
        answer = requests.get(proxy.url, headers={"Range": "bytes=0-99"}, timeout=5)
        assert answer.status_code == 502
        assert isinstance(proxy.failure, NotFound)


@pytest.mark.parametrize("shape", [FEW_LARGE, MANY_SMALL], ids=["few-large", "many-small"])
def test_reads_ahead_side_by_side_within_its_memory_bound(shape: ReadAhead) -> None:
    """After a block read in sequence, the shape's blocks ahead are fetched at once (S3's
    one, parallel ranges' six side by side), and no more than those plus the block read
    are ever held or fetched."""
    BLOCK_SIZE, READ_AHEAD = shape.block, shape.ahead
    size = BLOCK_SIZE * (READ_AHEAD + 4)
    lock = threading.Lock()
    running = 0
    peak = 0
    fetched: list[int] = []
    release = threading.Event()

    def fetch(start: int, length: int) -> bytes:
        nonlocal running, peak
        with lock:
            running += 1
            peak = max(peak, running)
            fetched.append(start)
        if start > 0:
            release.wait(10)  # hold the read-ahead fetches until all have started
        with lock:
            running -= 1
        return bytes(length)

    with RangeProxy(fetch, size=size, shape=shape) as proxy:
        answer = requests.get(proxy.url, headers={"Range": f"bytes=0-{BLOCK_SIZE - 1}"},
                              timeout=5)
        assert answer.status_code == 206
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            with lock:
                if peak >= READ_AHEAD + 1 or len(fetched) > READ_AHEAD:
                    break
            time.sleep(0.01)
        release.set()
        with lock:
            assert peak == READ_AHEAD  # every block ahead at once, not one after another
            assert sorted(fetched) == [i * BLOCK_SIZE for i in range(READ_AHEAD + 1)]
        assert len(proxy.cache._blocks) <= READ_AHEAD + shape.keep


def test_small_ranges_on_a_kept_alive_connection_do_not_wait_for_delayed_acks() -> None:
    """qemu-img reads a compressed qcow2 (Debian's cloud image) in many small reads, each
    an HTTP range request of nbdkit's on one kept-alive connection. With Nagle's algorithm
    on, a body shorter than a segment waited for the client's delayed ACK of the headers
    sent before it: about 40 ms a request, and the demo's 2 GiB import took six minutes
    instead of twelve seconds whenever the importer read through this endpoint. The
    median request must be far below that stall (here it takes about 2 ms)."""
    data = bytes(range(256)) * 16 * 1024  # 4 MiB
    with RangeProxy(lambda offset, n: data[offset:offset + n], size=len(data)) as proxy:
        session = requests.Session()
        took = []
        for i in range(60):
            start, end = i * 5000, i * 5000 + 3999
            began = time.monotonic()
            got = session.get(proxy.url, headers={"Range": f"bytes={start}-{end}"},
                              timeout=10)
            took.append(time.monotonic() - began)
            assert got.status_code == 206 and got.content == data[start:end + 1]
        session.close()
    took.sort()
    assert took[len(took) // 2] < 0.02, f"median request {took[len(took) // 2] * 1000:.0f} ms"


def test_no_block_outlives_the_close() -> None:
    """Closing the endpoint drops its blocks (up to ``(keep + ahead)`` of them), though
    the export that holds the proxy lives on until the import's last checks."""
    alive: list[weakref.ref[array[int]]] = []

    def fetch(start: int, length: int) -> array[int]:
        block = array("B", bytes(length))
        alive.append(weakref.ref(block))
        return block

    proxy = RangeProxy(fetch, size=MANY_SMALL.block * 4, shape=MANY_SMALL)  # type: ignore[arg-type]
    with proxy:
        answer = requests.get(proxy.url, headers={"Range": f"bytes=0-{MANY_SMALL.block * 2}"},
                              timeout=5)
        assert answer.status_code == 206
    still = sum(ref() is not None for ref in alive)
    assert alive and still == 0, f"{still} of {len(alive)} blocks alive after the close"
