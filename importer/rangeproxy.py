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

The protocol is NBD's fixed newstyle handshake (``NBD_OPT_GO``, ``NBD_OPT_INFO`` or
``NBD_OPT_EXPORT_NAME``; every other option is answered ``NBD_REP_ERR_UNSUP``), then
simple replies to reads, one at a time per connection, as nbdkit's curl plugin answered
them (https://github.com/NetworkBlockDevice/nbd/blob/master/doc/proto.md). The export is
read-only, with no other command offered: anything but a read ends the connection (a
read past the end or of more than :data:`MAX_READ` is refused with EINVAL, a failed
one with EIO).

A source failure is kept (``failure``) so the importer reports the real reason
(NotFound, Unauthorized, …) rather than qemu-img's "Input/output error".
"""

from __future__ import annotations

import errno
import logging
import socket
import struct
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from socketserver import BaseRequestHandler, ThreadingUnixStreamServer

from importer import heaps
from importer.blockcache import BlockCache
from importer.errors import ImporterError
from importer.serving import ServingThread
from sizes import MIB

logger = logging.getLogger(__name__)

NBDMAGIC = 0x4E42444D41474943
IHAVEOPT = 0x49484156454F5054
REPLY_MAGIC = 0x0003E889045565A9
REQUEST_MAGIC = 0x25609513
SIMPLE_REPLY_MAGIC = 0x67446698
FLAG_FIXED_NEWSTYLE, FLAG_NO_ZEROES = 1 << 0, 1 << 1
FLAG_HAS_FLAGS, FLAG_READ_ONLY = 1 << 0, 1 << 1
OPT_EXPORT_NAME, OPT_ABORT, OPT_INFO, OPT_GO = 1, 2, 6, 7
REP_ACK, REP_INFO, REP_ERR_UNSUP = 1, 3, (1 << 31) + 1
INFO_EXPORT = 0
CMD_READ = 0
MAX_OPTION = 64 * 1024
"""Bytes an option's data may have (an export name and its info requests)."""
MAX_READ = 32 * MIB
"""Bytes one read may ask for: qemu's NBD client asks for at most this much, and larger
reads are refused (EINVAL) before anything is fetched, so no read holds more of the
source in memory than the cache's bound and this."""
_TRANSMISSION = FLAG_HAS_FLAGS | FLAG_READ_ONLY


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
        self.size = size
        self.cache = BlockCache(fetch, size=size, block_size=shape.block,
                                capacity=shape.keep, prefetch=shape.ahead)
        self.failure: ImporterError | None = None
        self.socket_path = socket_path
        self._server = ThreadingUnixStreamServer(str(socket_path), _handler(self))
        self._server.daemon_threads = True
        self._serving = ServingThread(self._server, "rangeproxy")

    @property
    def uri(self) -> str:
        return f"nbd+unix:///?socket={self.socket_path}"

    def __enter__(self) -> RangeProxy:
        self._serving.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._serving.stop()  # within tens of ms: it ends every import through here
        self.socket_path.unlink(missing_ok=True)
        self.cache.close()

    def read_parts(self, start: int, length: int) -> list[memoryview] | None:
        """The bytes at ``[start, start+length)`` as views into the cache's blocks, or
        None once the source failed (its error kept in ``failure``)."""
        try:
            return self.cache.read_parts(start, length)
        except ImporterError as err:
            self.failure = err
            logger.warning("reading bytes %d-%d failed: %s", start, start + length - 1, err)
            return None


def _handler(proxy: RangeProxy) -> type[BaseRequestHandler]:
    class Handler(BaseRequestHandler):
        def handle(self) -> None:
            conn: socket.socket = self.request
            try:
                if _negotiate(conn, proxy.size):
                    _transmit(conn, proxy)
            except (EOFError, OSError) as err:  # the client went away: nothing to answer
                logger.debug("rangeproxy: connection ended: %s", err)

    return Handler


def _negotiate(conn: socket.socket, size: int) -> bool:
    """The fixed newstyle handshake; True once the client chose the export."""
    conn.sendall(struct.pack(">QQH", NBDMAGIC, IHAVEOPT,
                             FLAG_FIXED_NEWSTYLE | FLAG_NO_ZEROES))
    (client_flags,) = struct.unpack(">I", _receive(conn, 4))
    while True:
        magic, option, length = struct.unpack(">QII", _receive(conn, 16))
        if magic != IHAVEOPT or length > MAX_OPTION:
            return False
        _receive(conn, length)  # the export's name (any: there is one) and info requests
        if option == OPT_EXPORT_NAME:
            zeroes = b"" if client_flags & FLAG_NO_ZEROES else bytes(124)
            conn.sendall(struct.pack(">QH", size, _TRANSMISSION) + zeroes)
            return True
        if option in (OPT_INFO, OPT_GO):
            info = struct.pack(">HQH", INFO_EXPORT, size, _TRANSMISSION)
            conn.sendall(struct.pack(">QIII", REPLY_MAGIC, option, REP_INFO, len(info)) + info
                         + struct.pack(">QIII", REPLY_MAGIC, option, REP_ACK, 0))
            if option == OPT_GO:
                return True
        elif option == OPT_ABORT:
            conn.sendall(struct.pack(">QIII", REPLY_MAGIC, option, REP_ACK, 0))
            return False
        else:
            conn.sendall(struct.pack(">QIII", REPLY_MAGIC, option, REP_ERR_UNSUP, 0))


def _transmit(conn: socket.socket, proxy: RangeProxy) -> None:
    """Reads answered in order, each from the cache's blocks without a joined copy."""
    while True:
        magic, _flags, command, cookie, offset, length = struct.unpack(
            ">IHHQQI", _receive(conn, 28))
        if magic != REQUEST_MAGIC or command != CMD_READ:
            return  # a disconnect; or a command this read-only export never offered
        if length > MAX_READ or offset + length > proxy.size:
            conn.sendall(struct.pack(">IIQ", SIMPLE_REPLY_MAGIC, errno.EINVAL, cookie))
            continue
        parts = proxy.read_parts(offset, length)
        if parts is None:
            conn.sendall(struct.pack(">IIQ", SIMPLE_REPLY_MAGIC, errno.EIO, cookie))
            continue
        conn.sendall(struct.pack(">IIQ", SIMPLE_REPLY_MAGIC, 0, cookie))
        for part in parts:  # block by block: no joined copy
            conn.sendall(part)


def _receive(conn: socket.socket, count: int) -> bytes:
    data = bytearray(count)
    view = memoryview(data)
    got = 0
    while got < count:
        read = conn.recv_into(view[got:])
        if not read:
            raise EOFError("the client closed the connection")
        got += read
    return bytes(data)
