"""The handler's console endpoint for virt-api: a WebSocket carrying the serial console
of a VMI on this node, read from its launcher's control socket.

Only virt-api gets in: the TLS context requires a client certificate signed by the VM
side's CA with CN ``virt-api``. The VMI must be on this node with the uid asked for, so
a stale or forged request cannot reach another VMI's console.
"""

from __future__ import annotations

import asyncio
import json
import logging
import ssl
from typing import Any

from aiohttp import WSMsgType, web

from apiservice.frontproxy import common_name_of
from vm.api.certs import API_CLIENT_CN
from vm.handler.kube import socket_of
from vm.kube import VMIS, Kube

logger = logging.getLogger(__name__)
PROTOCOL = "plain.kubevirt.io"
CHUNK = 64 * 1024
ANSWER_LIMIT = 4096


def server_context(*, ca_pem: bytes, cert_file: str, key_file: str) -> ssl.SSLContext:
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.load_cert_chain(cert_file, key_file)
    ctx.verify_mode = ssl.CERT_REQUIRED
    ctx.load_verify_locations(cadata=ca_pem.decode())
    return ctx


class ConsoleServer:
    def __init__(self, kube: Kube, *, node: str, socket_dir: str) -> None:
        self.kube = kube
        self.node = node
        self.socket_dir = socket_dir

    async def console(self, request: web.Request) -> web.StreamResponse:
        transport = request.transport
        peer = transport.get_extra_info("peercert") if transport is not None else None
        if common_name_of(peer) != API_CLIENT_CN:
            return web.json_response({"message": "only virt-api may attach consoles"},
                                     status=401)
        ns, name = request.match_info["ns"], request.match_info["name"]
        uid = request.query.get("uid", "")
        vmi: dict[str, Any] | None = await asyncio.to_thread(self.kube.get, VMIS, name, ns)
        if (vmi is None or vmi["metadata"].get("uid") != uid
                or (vmi.get("status") or {}).get("nodeName") != self.node):
            return web.json_response({"message": f"VMI {ns}/{name} ({uid}) is not on "
                                      f"node {self.node}"}, status=404)
        try:
            reader, writer = await asyncio.wait_for(asyncio.open_unix_connection(
                str(socket_of(vmi, self.socket_dir)), limit=ANSWER_LIMIT), 10)
        except (OSError, TimeoutError) as err:
            return web.json_response({"message": f"launcher unreachable: {err}"}, status=503)
        try:
            writer.write(b'{"cmd":"console"}\n')
            await writer.drain()
            line = await asyncio.wait_for(reader.readline(), 10)
            try:
                ok = json.loads(line).get("ok") is True
            except (ValueError, AttributeError):
                ok = False
            if not ok:
                return web.json_response({"message": "the launcher refused the console"},
                                         status=503)
            ws = web.WebSocketResponse(protocols=(PROTOCOL,), heartbeat=30)
            await ws.prepare(request)
            await pump(ws, reader, writer)
            return ws
        finally:
            writer.close()

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/v1/namespaces/{ns}/virtualmachineinstances/{name}/console",
                           self.console)
        app.router.add_get("/healthz", healthz)
        return app


async def healthz(request: web.Request) -> web.Response:
    return web.Response(text="ok")


async def pump(ws: web.WebSocketResponse, reader: asyncio.StreamReader,
               writer: asyncio.StreamWriter) -> None:
    async def out() -> None:
        while data := await reader.read(CHUNK):
            await ws.send_bytes(data)

    async def into() -> None:
        async for msg in ws:
            if msg.type == WSMsgType.BINARY:
                writer.write(msg.data)
            elif msg.type == WSMsgType.TEXT:
                writer.write(msg.data.encode())
            else:
                break
            await writer.drain()

    tasks = [asyncio.create_task(out()), asyncio.create_task(into())]
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await ws.close()
