"""pods/portforward as kubectl 1.32 speaks it: SPDY/3.1 tunnelled through a WebSocket.

kubectl opens one WebSocket (subprotocol ``SPDY/3.1+portforward.k8s.io``); for each local
connection it opens two SPDY streams with the headers ``streamType`` (``error`` or
``data``), ``port`` and ``requestID``. The server answers each stream, connects to the
pod's address on that port (pods share the node's network and bind their pod IP),
copies bytes both ways on the data stream, and closes the error stream, with a message
in it when the connection failed. Authorised as ``create`` on pods/portforward.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass, field

from aiohttp import WSMsgType, web

from ..errors import bad_request
from ..storage.store import Stored
from . import spdy

logger = logging.getLogger(__name__)

PROTOCOL = "SPDY/3.1+portforward.k8s.io"
CHUNK = 32 * 1024
CONNECT_TIMEOUT = 10.0
RST_CANCEL = 5


@dataclass
class _Pair:
    port: int = 0
    error: int | None = None
    data: int | None = None
    writer: asyncio.StreamWriter | None = None
    task: asyncio.Task[None] | None = None
    pending: list[bytes] = field(default_factory=list)
    client_done: bool = False


class Tunnel:
    def __init__(self, ws: web.WebSocketResponse, host: str, label: str) -> None:
        self.ws = ws
        self.host = host
        self.label = label
        self.codec = spdy.Codec()
        self.pairs: dict[str, _Pair] = {}
        self.by_stream: dict[int, str] = {}
        self._send_lock = asyncio.Lock()

    async def send(self, data: bytes) -> None:
        async with self._send_lock:
            if not self.ws.closed:
                await self.ws.send_bytes(data)

    async def run(self) -> None:
        try:
            async for msg in self.ws:
                if msg.type != WSMsgType.BINARY:
                    continue
                for frame in self.codec.feed(msg.data):
                    await self._handle(frame)
        except spdy.ProtocolError as err:
            logger.info("port-forward %s: %s", self.label, err)
            await self.send(self.codec.goaway(0, 1))
        finally:
            for pair in self.pairs.values():
                if pair.task is not None:
                    pair.task.cancel()
                if pair.writer is not None:
                    pair.writer.close()

    async def _handle(self, frame: spdy.Frame) -> None:
        if isinstance(frame, spdy.Data):
            await self._client_data(frame)
        elif frame.type == spdy.SYN_STREAM:
            await self._syn_stream(frame)
        elif frame.type == spdy.PING:
            await self.send(self.codec.ping(int.from_bytes(frame.payload[:4], "big")))
        elif frame.type == spdy.RST_STREAM:
            key = self.by_stream.get(frame.stream_id)
            pair = self.pairs.get(key) if key is not None else None
            if pair is not None and pair.task is not None:
                pair.task.cancel()
        elif frame.type == spdy.GOAWAY:
            await self.ws.close()
        # SETTINGS, WINDOW_UPDATE, HEADERS: nothing to do (no flow control is enforced)

    async def _syn_stream(self, frame: spdy.Control) -> None:
        sid = frame.stream_id
        headers = frame.headers
        await self.send(self.codec.syn_reply(sid))
        kind, request_id = headers.get("streamtype", ""), headers.get("requestid", "")
        try:
            port = int(headers.get("port", ""))
            if not 0 < port < 65536:
                raise ValueError
        except ValueError:
            await self.send(self.codec.rst_stream(sid, 1))
            return
        if kind not in ("error", "data"):
            await self.send(self.codec.rst_stream(sid, 1))
            return
        key = request_id or str(port)
        pair = self.pairs.setdefault(key, _Pair(port=port))
        setattr(pair, kind, sid)
        self.by_stream[sid] = key
        if pair.error is not None and pair.data is not None and pair.task is None:
            pair.task = asyncio.create_task(self._forward(key, pair))

    async def _client_data(self, frame: spdy.Data) -> None:
        key = self.by_stream.get(frame.stream_id)
        pair = self.pairs.get(key) if key is not None else None
        if pair is None or frame.stream_id != pair.data:
            return  # the error stream carries nothing from the client
        if pair.writer is None:
            pair.pending.append(frame.data)
            pair.client_done = pair.client_done or frame.fin
            return
        if frame.data:
            pair.writer.write(frame.data)
            await pair.writer.drain()
            await self.send(self.codec.window_update(frame.stream_id, len(frame.data)))
        if frame.fin and pair.writer.can_write_eof():
            pair.writer.write_eof()

    async def _forward(self, key: str, pair: _Pair) -> None:
        assert pair.error is not None and pair.data is not None
        try:
            reader, writer = await asyncio.wait_for(
                asyncio.open_connection(self.host, pair.port), CONNECT_TIMEOUT)
        except (TimeoutError, OSError) as err:
            message = (f"error forwarding port {pair.port} to pod {self.label}: "
                       f"{err.strerror if isinstance(err, OSError) else 'timed out'}")
            logger.info("port-forward: %s", message)
            await self.send(self.codec.data(pair.error, message.encode(), fin=True))
            await self.send(self.codec.data(pair.data, b"", fin=True))
            return
        pair.writer = writer
        try:
            for chunk in pair.pending:
                writer.write(chunk)
            pair.pending.clear()
            if pair.client_done and writer.can_write_eof():
                writer.write_eof()
            await writer.drain()
            while True:
                data = await reader.read(CHUNK)
                if not data:
                    break
                await self.send(self.codec.data(pair.data, data))
            await self.send(self.codec.data(pair.data, b"", fin=True))
            await self.send(self.codec.data(pair.error, b"", fin=True))
        except (OSError, ConnectionError) as err:
            logger.debug("port-forward %s: %s", self.label, err)
        finally:
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()
            self.pairs.pop(key, None)


async def serve(request: web.Request, *, stored: Stored, namespace: str,
                pod: str) -> web.StreamResponse:
    status = stored.obj.get("status") or {}
    pod_ip = status.get("podIP")
    if status.get("phase") != "Running" or not pod_ip:
        raise bad_request(f"unable to forward ports to pod {pod}: it is not running")
    if request.headers.get("Upgrade", "").lower() != "websocket":
        raise bad_request(f"pods/portforward needs a WebSocket upgrade (protocol {PROTOCOL})")
    offered = [p.strip() for p in request.headers.get("Sec-WebSocket-Protocol", "").split(",")]
    if PROTOCOL not in offered:
        raise bad_request(f"none of the offered WebSocket subprotocols {offered} is "
                          f"supported ({PROTOCOL})")
    ws = web.WebSocketResponse(protocols=(PROTOCOL,), heartbeat=None,
                               max_msg_size=spdy.MAX_FRAME + 8)
    await ws.prepare(request)
    label = f"{namespace}/{pod}"
    logger.info("port-forward to %s (%s)", label, pod_ip)
    await Tunnel(ws, str(pod_ip), label).run()
    await ws.close()
    return ws
