"""An upload's scratch file served over NBD while it still arrives, from the upload
server's own process, for qemu-img to convert as the body comes.

The file is appended in order and never rewritten, so a read whose bytes are in it is
answered at once, with ``os.sendfile`` from the page cache (no copy through Python); a
read of bytes not yet arrived waits on the upload itself (``GrowingFile.wait``: woken as
bytes are fed, raising once the upload was aborted, ended short or stalled for its read
timeout), which answers EIO, so qemu-img fails at once rather than waiting.

Until round 26 this was nbdkit's Python plugin polling the file's length in another
process: 0.99 CPU-s to serve a 2 GiB file to ``qemu-img convert`` against 0.15 here
(bench/README.md, Round 26), on a route that is CPU-bound on a loopback upload.
"""

from __future__ import annotations

import errno
import logging
import os
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from importer.errors import ImporterError
from importer.nbdserver import Server, reply_header
from importer.sources.base import GrowingFile

logger = logging.getLogger(__name__)


@contextmanager
def serve(growing: GrowingFile, socket_path: Path) -> Iterator[str]:
    """The file's NBD URI, at its final size, while the context lasts."""
    fd = os.open(growing.path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        def answer(conn: socket.socket, cookie: int, offset: int, length: int) -> None:
            try:
                growing.wait(offset + length)
            except ImporterError as err:
                logger.info("a read of bytes %d-%d of the arriving upload failed: %s",
                            offset, offset + length - 1, err)
                conn.sendall(reply_header(cookie, errno.EIO))
                return
            conn.sendall(reply_header(cookie))
            while length:
                sent = os.sendfile(conn.fileno(), fd, offset, length)
                if sent == 0:  # the file is shorter than what arrived: never, but bounded
                    raise EOFError(f"the upload's file ended at {offset} bytes")
                offset, length = offset + sent, length - sent

        with Server(socket_path, growing.size, answer, name="arriving-export") as server:
            yield server.uri
    finally:
        os.close(fd)
