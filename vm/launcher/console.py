"""The serial console: logged to a bounded file, fanned out to attached clients.

Why it exists: the guest's COM1 is one byte stream (QEMU connects it to a socket the
launcher listens on) but has three consumers: the console log (what the
``guest-console-log`` container and ``rootdisk console --log`` read), and any number of
interactive clients attached through the control socket. Output goes to all of them;
input comes from the most recently attached client only. A client that does not keep up
(more than :data:`CLIENT_BUFFER` bytes queued) is dropped, so it cannot stall the guest.
Input is written to the guest with back-pressure: while the guest does not read (QEMU
stops reading COM1 when the guest does), the client's input is not read either, so a
client that pastes without end fills its own socket, not the launcher's memory.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os

logger = logging.getLogger(__name__)

LOG_MAX_BYTES = 1024 * 1024
CLIENT_BUFFER = 1024 * 1024
READ_SIZE = 65536


class RotatingLog:
    """Append-only log file, renamed to ``<path>.1`` once past ``max_bytes``."""

    def __init__(self, path: str, max_bytes: int = LOG_MAX_BYTES) -> None:
        self.path = path
        self.max_bytes = max_bytes
        self._fd = self._open()
        self._size = os.fstat(self._fd).st_size

    def _open(self) -> int:
        return os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o640)

    def write(self, data: bytes) -> None:
        if self._size and self._size + len(data) > self.max_bytes:
            os.close(self._fd)
            os.replace(self.path, self.path + ".1")
            self._fd = self._open()
            self._size = 0
        view = memoryview(data)
        while view:
            n = os.write(self._fd, view)
            view = view[n:]
            self._size += n

    def close(self) -> None:
        with contextlib.suppress(OSError):
            os.close(self._fd)


class ConsoleHub:
    def __init__(self, log: RotatingLog) -> None:
        self.log = log
        self._guest: asyncio.StreamWriter | None = None
        self._clients: list[asyncio.StreamWriter] = []
        self.guest_connected = asyncio.Event()

    def feed(self, data: bytes) -> None:
        try:
            self.log.write(data)
        except OSError as err:  # a full log volume must not stop the guest
            logger.warning("console log write failed: %s", err)
        for client in list(self._clients):
            if client.transport.get_write_buffer_size() > CLIENT_BUFFER:
                logger.info("dropping a console client that does not keep up")
                self._detach(client)
                continue
            client.write(data)

    async def serve_guest(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """The connection QEMU makes to the serial socket."""
        if self._guest is not None:  # only QEMU connects here; refuse anything else
            writer.close()
            return
        self._guest = writer
        self.guest_connected.set()
        try:
            while data := await reader.read(READ_SIZE):
                self.feed(data)
        finally:
            self._guest = None
            writer.close()

    async def attach(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """An interactive client: sees output, owns input until another attaches."""
        self._clients.append(writer)
        try:
            while data := await reader.read(READ_SIZE):
                guest = self._guest
                if self._clients and self._clients[-1] is writer and guest is not None:
                    guest.write(data)
                    with contextlib.suppress(ConnectionError):
                        await guest.drain()
        finally:
            self._detach(writer)

    def _detach(self, writer: asyncio.StreamWriter) -> None:
        if writer in self._clients:
            self._clients.remove(writer)
        writer.close()

    def close(self) -> None:
        for client in list(self._clients):
            self._detach(client)
        self.log.close()
