"""The control socket server (``<socket-dir>/<vmi uid>.sock``), see :mod:`vm.launcher`.

Why it exists: the node handler asks a launcher for its state and tells it to shut down,
pause or hand over the console. Requests are bounded (one line, :data:`MAX_LINE` bytes,
read within :data:`REQUEST_TIMEOUT`), parsed by :mod:`vm.launcher.protocol`, and any
failure becomes an error answer, never an exception that ends the launcher.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from typing import Protocol

from vm.launcher import protocol
from vm.launcher.console import ConsoleHub
from vm.launcher.errors import LauncherError

logger = logging.getLogger(__name__)

REQUEST_TIMEOUT = 10.0


class Controls(Protocol):
    def status(self) -> protocol.Status: ...
    async def shutdown(self, grace_period_seconds: int | None) -> None: ...
    async def kill(self) -> None: ...
    async def pause(self) -> None: ...
    async def unpause(self) -> None: ...
    def guestinfo(self) -> dict[str, object]: ...
    async def softreboot(self) -> None: ...
    async def probe(self, request: protocol.ProbeRequest) -> None: ...
    async def forward(self, request: protocol.ForwardRequest) -> dict[str, object]: ...


class ControlServer:
    def __init__(self, *, path: str, controls: Controls, console: ConsoleHub) -> None:
        self.path = path
        self.controls = controls
        self.console = console
        self._server: asyncio.AbstractServer | None = None

    async def start(self) -> None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path)
        old = os.umask(0o117)  # the socket is born 0660, never wider
        try:
            self._server = await asyncio.start_unix_server(
                self._serve, path=self.path, limit=protocol.MAX_LINE + 1
            )
        finally:
            os.umask(old)
        os.chmod(self.path, 0o660)

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 2)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            try:
                line = await asyncio.wait_for(reader.readline(), REQUEST_TIMEOUT)
            except (ValueError, asyncio.LimitOverrunError):
                line = b"x" * (protocol.MAX_LINE + 1)
            except TimeoutError:
                writer.write(protocol.encode(protocol.error("no request within the timeout")))
                return
            request = protocol.parse_request(line=line)
            if isinstance(request, protocol.BadRequest):
                writer.write(protocol.encode(protocol.error(request.error)))
                return
            if request.cmd == "console":
                writer.write(protocol.encode(protocol.ok()))
                await writer.drain()
                await self.console.attach(reader, writer)
                return
            writer.write(protocol.encode(await self._act(request)))
        except (ConnectionError, OSError) as err:
            logger.debug("control connection ended: %s", err)
        finally:
            with contextlib.suppress(Exception):
                await writer.drain()
            writer.close()

    async def _act(self, request: protocol.Request) -> dict[str, object]:
        try:
            if request.cmd == "status":
                return self.controls.status().to_json()
            if request.cmd == "guestinfo":
                return self.controls.guestinfo()
            if request.cmd == "softreboot":
                await self.controls.softreboot()
            elif request.cmd == "probe" and request.probe is not None:
                await self.controls.probe(request.probe)
            elif request.cmd == "forward" and request.forward is not None:
                return {"ok": True, **await self.controls.forward(request.forward)}
            elif request.cmd == "shutdown":
                await self.controls.shutdown(request.grace_period_seconds)
            elif request.cmd == "kill":
                await self.controls.kill()
            elif request.cmd == "pause":
                await self.controls.pause()
            elif request.cmd == "unpause":
                await self.controls.unpause()
        except LauncherError as err:
            return protocol.error(err.message)
        return protocol.ok()
