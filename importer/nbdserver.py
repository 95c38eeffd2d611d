"""The server side of NBD for the importer's own read-only exports (``rangeproxy``: a
source behind a block cache; ``arrivingexport``: an upload's file as it arrives), each
served on a unix socket in a private directory for qemu-img to read.

The protocol is NBD's fixed newstyle handshake (``NBD_OPT_GO``, ``NBD_OPT_INFO`` or
``NBD_OPT_EXPORT_NAME``; every other option is answered ``NBD_REP_ERR_UNSUP``), then
simple replies to reads, one at a time per connection
(https://github.com/NetworkBlockDevice/nbd/blob/master/doc/proto.md). The exports are
read-only, with no other command offered: anything but a read ends the connection; a
read past the end or of more than :data:`MAX_READ` is refused with EINVAL before the
export does anything for it.
"""

from __future__ import annotations

import errno
import logging
import socket
import struct
from collections.abc import Callable
from pathlib import Path
from socketserver import BaseRequestHandler, ThreadingUnixStreamServer

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
reads are refused (EINVAL) before the export does anything for them, so no read makes
it hold or wait for more than this."""
_TRANSMISSION = FLAG_HAS_FLAGS | FLAG_READ_ONLY

Answer = Callable[[socket.socket, int, int, int], None]
"""Answers one read inside the export, at most ``MAX_READ`` bytes: ``(conn, cookie,
offset, length)``; it sends the whole simple reply (:func:`reply_header`, then the data
unless the reply is an error)."""


class Server:
    """An export of ``size`` bytes on ``socket_path``, a thread per connection, each
    read answered by ``answer``. ``with`` serves; leaving stops it within tens of ms and
    removes the socket (a stalled connection's thread, a daemon, ends with its client)."""

    def __init__(self, socket_path: Path, size: int, answer: Answer, *, name: str) -> None:
        self.socket_path = socket_path
        self._server = ThreadingUnixStreamServer(str(socket_path), _handler(size, answer))
        self._server.daemon_threads = True
        self._serving = ServingThread(self._server, name)

    @property
    def uri(self) -> str:
        return f"nbd+unix:///?socket={self.socket_path}"

    def __enter__(self) -> Server:
        self._serving.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._serving.stop()
        self.socket_path.unlink(missing_ok=True)


def reply_header(cookie: int, error: int = 0) -> bytes:
    return struct.pack(">IIQ", SIMPLE_REPLY_MAGIC, error, cookie)


def _handler(size: int, answer: Answer) -> type[BaseRequestHandler]:
    class Handler(BaseRequestHandler):
        def handle(self) -> None:
            conn: socket.socket = self.request
            try:
                if _negotiate(conn, size):
                    _transmit(conn, size, answer)
            except (EOFError, OSError) as err:  # the client went away: nothing to answer
                logger.debug("NBD export: connection ended: %s", err)

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


def _transmit(conn: socket.socket, size: int, answer: Answer) -> None:
    """Reads answered in order, until a disconnect or another command."""
    while True:
        magic, _flags, command, cookie, offset, length = struct.unpack(
            ">IHHQQI", _receive(conn, 28))
        if magic != REQUEST_MAGIC or command != CMD_READ:
            return  # a disconnect; or a command this read-only export never offered
        if length > MAX_READ or offset + length > size:
            conn.sendall(reply_header(cookie, errno.EINVAL))
            continue
        answer(conn, cookie, offset, length)


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
