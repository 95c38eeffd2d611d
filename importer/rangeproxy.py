"""A loopback HTTP endpoint that serves a source's bytes by range, for nbdkit's curl
plugin to read when it cannot read the source itself.

nbdkit's curl plugin (C, fast, small) needs a URL that answers HEAD with the size and
GET with byte ranges. S3 objects (boto3), presigned URLs (signed for GET only) and
servers that refuse HEAD don't; this endpoint does, in the importer's own process, with
the importer's own sources behind a read-ahead ``BlockCache``. No second Python (an
nbdkit Python plugin would load the whole client stack again) and no credentials on any
command line: the URL holds only a random token that names this one import.

A source failure is kept (``failure``) so the importer reports the real reason
(NotFound, Unauthorized, …) rather than qemu-img's "Input/output error".
"""

from __future__ import annotations

import logging
import re
import secrets
from collections.abc import Callable
from dataclasses import dataclass
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from importer import heaps
from importer.blockcache import BlockCache
from importer.errors import ImporterError
from importer.serving import ServingThread
from sizes import MIB

logger = logging.getLogger(__name__)
_RANGE = re.compile(r"^bytes=(\d+)-(\d+)$")


@dataclass(frozen=True)
class ReadAhead:
    """How the endpoint reads ahead of qemu-img: ``ahead`` blocks of ``block`` bytes
    fetched side by side, ``keep`` more kept for reads out of order. Memory is bounded
    by ``(keep + ahead) * block``."""
    block: int
    keep: int
    ahead: int


FEW_LARGE = ReadAhead(block=6 * MIB, keep=1, ahead=1)
"""For sources that cost CPU per request (S3 through boto3: milliseconds of the
importer's own per GET, and of the server's): the block size is what counts. Measured on
2 cores against SeaweedFS, a 512 MiB qcow2 (bench/import_s3.py and a harness around it),
in round 17: 2 x 2 MiB ahead took 2.58 s, 4 x 2 MiB 2.51 s, 1 x 4 MiB 2.49 s, 2 x 4 MiB
2.00 s, 4 x 4 MiB 2.04 s (8 MiB more peak RSS), 1 x 8 MiB 2.02 s. Once read-ahead waited
for reads in sequence (:mod:`importer.blockcache`), in alternating runs of CPU seconds
(the importer's, nbdkit's, qemu-img's and the server's) and wall: 2 x 4 MiB 3.55 s, 1 x
6 MiB 3.4 s, 1 x 8 MiB 3.1 s on a loaded machine; 1 x 6 MiB 2.72 s / 2.13 s, 1 x 8 MiB
2.50 s / 2.05 s on a quieter one. 8 MiB blocks put the importer's peak RSS 4 MiB up and
its process tree over 100 MiB; 6 MiB keeps the bound of 2 x 4 MiB: 12 MiB at most."""
MANY_SMALL = ReadAhead(block=1 * MIB, keep=2, ahead=6)
"""For parallel ranges against a server that caps each connection: many connections at
once, each holding little (a 1 MiB fetch at 31 MB/s is 34 ms). A 512 MiB qcow2 over a
1 Gbit/s link capped at a quarter of it per connection: 4.96 s, against 6.52 s with
4 x 4 MiB (whose blocks were fetched twice as qemu-img read out of order) and 7.24 s
with 512 KiB blocks. 8 MiB at most, and the speed needs them: in round 25 (tree peak,
alternating runs) 5 ahead + 1 kept took 7.26 s (69.1 MiB) and 4 + 1 7.39 s (68.8 MiB)
against 6.36 s (71.3 MiB) for this shape (bench/README.md)."""


class RangeProxy:
    def __init__(self, fetch: Callable[[int, int], bytes], *, size: int,
                 shape: ReadAhead = FEW_LARGE) -> None:
        heaps.hand_back_large_frees()  # each block a mapping, unmapped when dropped
        self.size = size
        self.cache = BlockCache(fetch, size=size, block_size=shape.block,
                                capacity=shape.keep, prefetch=shape.ahead)
        self.failure: ImporterError | None = None
        self._path = "/" + secrets.token_urlsafe(16)
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self._server.daemon_threads = True
        self._serving = ServingThread(self._server, "rangeproxy")

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}{self._path}"

    def __enter__(self) -> RangeProxy:
        self._serving.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._serving.stop()  # within tens of ms: it ends every import through here
        self.cache.close()

    def read(self, path: str, header: str | None) -> tuple[int, list[memoryview],
                                                            dict[str, str]]:
        """(status, body, headers) for a GET (``header`` is its Range) or a HEAD (None)."""
        if path != self._path:
            return HTTPStatus.NOT_FOUND, [], {}
        if header is None:
            return HTTPStatus.OK, [], {"Content-Length": str(self.size)}
        match = _RANGE.match(header.strip())
        if not match or int(match.group(1)) > int(match.group(2)) \
                or int(match.group(1)) >= self.size:
            return HTTPStatus.REQUESTED_RANGE_NOT_SATISFIABLE, [], {
                "Content-Range": f"bytes */{self.size}"}
        # A last byte past the end is clamped to it (RFC 9110; nbdkit's curl plugin asks
        # for one byte more than it reads).
        start, end = int(match.group(1)), min(int(match.group(2)), self.size - 1)
        try:
            body = self.cache.read_parts(start, end - start + 1)
        except ImporterError as err:
            self.failure = err
            logger.warning("reading bytes %d-%d failed: %s", start, end, err)
            return HTTPStatus.BAD_GATEWAY, [], {}
        return HTTPStatus.PARTIAL_CONTENT, body, {
            "Content-Range": f"bytes {start}-{end}/{self.size}"}


def _handler(proxy: RangeProxy) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive: nbdkit reuses its connection
        # The headers go out in one send and the body in others: with Nagle's algorithm
        # a body shorter than a segment waited for the ACK of the headers, which nbdkit's
        # curl delays (up to 40 ms) on a kept-alive connection. qemu-img reads a
        # compressed qcow2 (Debian's cloud image) in many such small reads: 359 s for
        # its 2 GiB through this endpoint, against 12.5 s straight from the server.
        disable_nagle_algorithm = True

        def do_HEAD(self) -> None:
            self._answer(*proxy.read(self.path, None), send_body=False)

        def do_GET(self) -> None:
            header = self.headers.get("Range")
            if header is None:
                self._answer(HTTPStatus.BAD_REQUEST, [], {}, send_body=True)
                return
            self._answer(*proxy.read(self.path, header), send_body=True)

        def _answer(self, status: int, body: list[memoryview], headers: dict[str, str], *,
                    send_body: bool) -> None:
            self.send_response(status)
            self.send_header("Accept-Ranges", "bytes")
            headers.setdefault("Content-Length", str(sum(len(part) for part in body)))
            for name, value in headers.items():
                self.send_header(name, value)
            self.end_headers()
            if send_body:
                for part in body:  # block by block: no joined copy
                    self.wfile.write(part)

        def log_message(self, format: str, *args: Any) -> None:
            logger.debug("rangeproxy: " + format, *args)

    return Handler
