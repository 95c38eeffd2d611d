"""An NBD export of a source's bytes, served from the importer's own process, for
qemu-img to read when nbdkit's curl plugin cannot read the source itself.

S3 objects (boto3), presigned URLs (signed for GET only), servers that refuse HEAD, and
images read as parallel ranges are read by the importer's own sources behind a
read-ahead ``BlockCache``, and served here over NBD on a unix socket in the import's
private directory: qemu-img connects to it as it would to nbdkit. Until round 25 this
was a loopback HTTP endpoint that nbdkit's curl plugin read and served on: a second copy
of every read (nbdkit's 2 MiB request buffer) and nbdkit's own 12 MiB, which put the
parallel-ranges route's process tree at 70 MiB against its goal of 64 (bench/README.md,
round 25). No second Python (an nbdkit Python plugin would load the whole client stack
again) and no credentials on any command line.

The protocol is :mod:`importer.nbdserver`'s (simple replies, one read at a time per
connection, as nbdkit's curl plugin answered them); a read the source fails is answered
EIO, and a read of more than ``MAX_READ`` is refused before anything is fetched, so no
read holds more of the source in memory than the cache's bound and that.

A source failure is kept (``failure``) so the importer reports the real reason
(NotFound, Unauthorized, …) rather than qemu-img's "Input/output error".
"""

from __future__ import annotations

import errno
import logging
import socket
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from importer import heaps
from importer.blockcache import BlockCache
from importer.errors import ImporterError
from importer.nbdserver import Server, reply_header
from sizes import MIB

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class ReadAhead:
    """How the endpoint reads ahead of qemu-img: ``ahead`` blocks of ``block`` bytes
    fetched side by side, ``keep`` more kept for reads out of order. Memory is bounded
    by ``(keep + ahead) * block``."""
    block: int
    keep: int
    ahead: int


FEW_LARGE = ReadAhead(block=8 * MIB, keep=1, ahead=1)
"""For sources that cost CPU per request (S3 through boto3: milliseconds of the
importer's own per GET, and of the server's): the block size is what counts. Measured on
2 cores against SeaweedFS, a 512 MiB qcow2 (bench/import_s3.py and a harness around it),
in round 17: 2 x 2 MiB ahead took 2.58 s, 4 x 2 MiB 2.51 s, 1 x 4 MiB 2.49 s, 2 x 4 MiB
2.00 s, 4 x 4 MiB 2.04 s (8 MiB more peak RSS), 1 x 8 MiB 2.02 s. Once read-ahead waited
for reads in sequence (:mod:`importer.blockcache`), in alternating runs of CPU seconds
(the importer's, nbdkit's, qemu-img's and the server's) and wall: 2 x 4 MiB 3.55 s, 1 x
6 MiB 3.4 s, 1 x 8 MiB 3.1 s on a loaded machine; 1 x 6 MiB 2.72 s / 2.13 s, 1 x 8 MiB
2.50 s / 2.05 s on a quieter one. 8 MiB blocks then put the process tree over 100 MiB,
with nbdkit's 12 MiB in it; since the importer serves its NBD export itself (round 26,
alternating runs, medians of 6 and 7, CPU / wall): 6 MiB 2.20 / 1.73 s and 2.35 / 1.87 s,
8 MiB 1.92 / 1.52 s and 2.16 / 1.72 s, 12 MiB 2.13 / 1.67 s, 3 x 4 MiB ahead 2.11 /
1.51 s; the tree's peak 88.7-92.9 MiB with 8 MiB (85.0 with 6). 16 MiB at most."""
MANY_SMALL = ReadAhead(block=1 * MIB, keep=2, ahead=6)
"""For parallel ranges against a server that caps each connection: many connections at
once, each holding little (a 1 MiB fetch at 31 MB/s is 34 ms). A 512 MiB qcow2 over a
1 Gbit/s link capped at a quarter of it per connection: 4.96 s, against 6.52 s with
4 x 4 MiB (whose blocks were fetched twice as qemu-img read out of order) and 7.24 s
with 512 KiB blocks. 8 MiB at most, and the speed needs them: in round 25 (tree peak,
nbdkit still in it, alternating runs) 5 ahead + 1 kept took 7.26 s (69.1 MiB) and 4 + 1
7.39 s (68.8 MiB) against 6.36 s (71.3 MiB) for this shape (bench/README.md)."""


class RangeProxy:
    def __init__(self, fetch: Callable[[int, int], bytes], *, size: int, socket_path: Path,
                 shape: ReadAhead = FEW_LARGE) -> None:
        heaps.hand_back_large_frees()  # each block a mapping, unmapped when dropped
        self.cache = BlockCache(fetch, size=size, block_size=shape.block,
                                capacity=shape.keep, prefetch=shape.ahead)
        self.failure: ImporterError | None = None
        """The source's error that failed a read (answered EIO), kept for the report."""
        self._server = Server(socket_path, size, self._answer, name="rangeproxy")

    @property
    def uri(self) -> str:
        return self._server.uri

    @property
    def socket_path(self) -> Path:
        return self._server.socket_path

    def __enter__(self) -> RangeProxy:
        self._server.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.__exit__()  # within tens of ms: it ends every import through here
        self.cache.close()

    def _answer(self, conn: socket.socket, cookie: int, offset: int, length: int) -> None:
        """A read from the cache's blocks, sent block by block: no joined copy. A source
        failure is answered EIO and kept in ``failure``."""
        try:
            parts = self.cache.read_parts(offset, length)
        except ImporterError as err:
            self.failure = err
            logger.warning("reading bytes %d-%d failed: %s", offset, offset + length - 1, err)
            conn.sendall(reply_header(cookie, errno.EIO))
            return
        conn.sendall(reply_header(cookie))
        for part in parts:
            conn.sendall(part)
