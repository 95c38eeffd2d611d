"""The client of the ``portforward`` subresource (``rootdisk port-forward``, virtctl's):
a WebSocket per forwarded TCP connection, or per UDP client address, to
``…/portforward/PORT/PROTOCOL`` through the API server; or, with ``--stdio``, one
connection on this process's stdin and stdout (what ``rootdisk ssh`` uses as ssh's
ProxyCommand).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import sys
from collections.abc import Callable
from typing import Any

import aiohttp

from apiservice.refusal import keep_refusal, last_refusal
from rootdisk.vmtarget import PortSpec
from vocab import kubevirt

PROTOCOL = kubevirt.PLAIN_PROTOCOL
CHUNK = 32 * 1024
UDP_IDLE = 60.0  # a UDP client's WebSocket closes after this long without a datagram
UDP_CLIENTS = 64


class Refused(Exception):
    def __init__(self, status: int, reason: str) -> None:
        super().__init__(f"{status} {reason}")
        self.status = status
        self.reason = reason


class Forwarder:
    """Opens WebSockets to the subresource with the kubeconfig's credentials."""

    def __init__(self, url_for: Callable[[int, str], str], ssl_ctx: Any,
                 headers: dict[str, str]) -> None:
        self.url_for = url_for
        self.ssl = ssl_ctx
        self.headers = headers

    async def open(self, session: aiohttp.ClientSession, port: int,
                   protocol: str) -> aiohttp.ClientWebSocketResponse:
        try:
            async with asyncio.timeout(30):
                return await session.ws_connect(
                    self.url_for(port, protocol), ssl=self.ssl, headers=self.headers,
                    protocols=(PROTOCOL,), heartbeat=30)
        except aiohttp.WSServerHandshakeError as err:
            said = last_refusal()
            raise Refused(err.status, (said and said.reason) or err.message) from None
        except TimeoutError:
            raise Refused(504, "no answer from the API server in 30 s") from None

    def session(self) -> aiohttp.ClientSession:
        return aiohttp.ClientSession(middlewares=(keep_refusal,))


def _warn(text: str) -> None:
    print(f"rootdisk port-forward: {text}", file=sys.stderr, flush=True)


async def _pump(ws: aiohttp.ClientWebSocketResponse, reader: asyncio.StreamReader,
                write: Callable[[bytes], Any], eof: Callable[[], Any]) -> None:
    async def up() -> None:
        while chunk := await reader.read(CHUNK):
            await ws.send_bytes(chunk)

    async def down() -> None:
        async for msg in ws:
            if msg.type == aiohttp.WSMsgType.BINARY:
                await write(msg.data)
            elif msg.type == aiohttp.WSMsgType.TEXT:
                await write(msg.data.encode())
            else:
                break
        await eof()

    tasks = [asyncio.create_task(up()), asyncio.create_task(down())]
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await ws.close()


async def stdio(fwd: Forwarder, port: int) -> int:
    """One connection on stdin/stdout (bytes as they are), for ssh's ProxyCommand."""
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    out = sys.stdout.buffer

    async def write(data: bytes) -> None:
        await asyncio.to_thread(lambda: (out.write(data), out.flush()))

    async def eof() -> None:
        with contextlib.suppress(OSError):
            out.close()

    async with fwd.session() as session:
        try:
            ws = await fwd.open(session, port, "tcp")
        except Refused as err:
            _warn(f"{err.status} {err.reason}")
            return 1
        await _pump(ws, reader, write, eof)
    return 0


async def _tcp_client(fwd: Forwarder, session: aiohttp.ClientSession, spec: PortSpec,
                      reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        ws = await fwd.open(session, spec.remote, "tcp")
    except (Refused, aiohttp.ClientError, OSError) as err:
        _warn(f"port {spec.remote}: {err}")
        writer.close()
        return

    async def write(data: bytes) -> None:
        writer.write(data)
        await writer.drain()

    async def eof() -> None:
        if writer.can_write_eof():
            writer.write_eof()

    try:
        await _pump(ws, reader, write, eof)
    finally:
        writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()


class _UdpRelay(asyncio.DatagramProtocol):
    """One WebSocket per client address; datagram <-> binary frame."""

    def __init__(self, fwd: Forwarder, session: aiohttp.ClientSession, spec: PortSpec) -> None:
        self.fwd, self.session, self.spec = fwd, session, spec
        self.transport: asyncio.DatagramTransport | None = None
        self.clients: dict[Any, asyncio.Queue[bytes]] = {}
        self.tasks: set[asyncio.Task[None]] = set()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def datagram_received(self, data: bytes, addr: Any) -> None:
        queue = self.clients.get(addr)
        if queue is None:
            if len(self.clients) >= UDP_CLIENTS:
                return
            queue = self.clients[addr] = asyncio.Queue(maxsize=256)
            task = asyncio.ensure_future(self._client(addr, queue))
            self.tasks.add(task)
            task.add_done_callback(self.tasks.discard)
        with contextlib.suppress(asyncio.QueueFull):
            queue.put_nowait(data)

    async def _client(self, addr: Any, queue: asyncio.Queue[bytes]) -> None:
        try:
            ws = await self.fwd.open(self.session, self.spec.remote, "udp")
        except (Refused, aiohttp.ClientError, OSError) as err:
            _warn(f"udp port {self.spec.remote}: {err}")
            self.clients.pop(addr, None)
            return

        async def up() -> None:
            while True:
                async with asyncio.timeout(UDP_IDLE):
                    data = await queue.get()
                await ws.send_bytes(data)

        async def down() -> None:
            async for msg in ws:
                if msg.type != aiohttp.WSMsgType.BINARY or self.transport is None:
                    break
                self.transport.sendto(msg.data, addr)

        tasks = [asyncio.create_task(up()), asyncio.create_task(down())]
        try:
            await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            await ws.close()
            self.clients.pop(addr, None)


async def listen(fwd: Forwarder, address: str, specs: list[PortSpec],
                 ready: Callable[[str], None] | None = None) -> int:
    """Listen on ``address`` for every spec until interrupted."""
    async with fwd.session() as session:
        servers: list[Any] = []
        loop = asyncio.get_running_loop()
        try:
            for spec in specs:
                if spec.protocol == "tcp":
                    server = await asyncio.start_server(
                        functools.partial(_tcp_client, fwd, session, spec),
                        host=address, port=spec.local)
                    local = server.sockets[0].getsockname()[1]
                    servers.append(server)
                else:
                    transport, _ = await loop.create_datagram_endpoint(
                        functools.partial(_UdpRelay, fwd, session, spec),
                        local_addr=(address, spec.local))
                    local = transport.get_extra_info("sockname")[1]
                    servers.append(transport)
                line = f"Forwarding from {address}:{local} -> {spec.remote}" + (
                    "/udp" if spec.protocol == "udp" else "")
                print(line, file=sys.stderr, flush=True)
                if ready is not None:
                    ready(line)
        except OSError as err:
            _warn(f"cannot listen on {address}: {err.strerror or err}")
            for s in servers:
                s.close()
            return 1
        try:
            await asyncio.Event().wait()  # until interrupted
        finally:
            for s in servers:
                s.close()
    return 0

