"""The handler's console endpoint for virt-api: a WebSocket carrying the serial console
of a VMI on this node, read from its launcher's control socket.

Only virt-api gets in: the TLS context requires a client certificate signed by a CA of
the VM side's bundle (``vm.api.certs``) with CN ``virt-api``. The VMI must be on this
node with the uid asked for, so a stale or forged request cannot reach another VMI's
console.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import logging
import ssl
from collections.abc import Callable
from typing import Any

from aiohttp import WSMsgType, web

from apiservice.frontproxy import common_name_of
from kubeclient import Client
from kubeclient.resources import VMIS
from pki import serving
from vm.api.certs import API_CLIENT_CN
from vm.handler.kube import socket_of
from vm.launcher import client as launcher
from vocab import kubevirt

logger = logging.getLogger(__name__)
PROTOCOL = kubevirt.PLAIN_PROTOCOL
CHUNK = 64 * 1024
ANSWER_LIMIT = 4096
HANDSHAKE_SECONDS = 10.0
"""Bound of the handshake with a launcher: connecting, asking for the console, its answer."""


def server_context(ca_pem: bytes) -> ssl.SSLContext:
    """Client certificates required, checked against ``ca_pem`` (the bundle) only; the
    serving certificate is loaded by :class:`ConsoleSite`'s renewal."""
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cadata=ca_pem.decode())
    ctx.verify_mode = ssl.CERT_REQUIRED
    return ctx


class ConsoleServer:
    def __init__(self, kube: Client, *, node: str, socket_dir: str) -> None:
        self.kube = kube
        self.node = node
        self.socket_dir = socket_dir

    async def console(self, request: web.Request) -> web.StreamResponse:
        vmi = await self._vmi_here(request, "attach consoles")
        if isinstance(vmi, web.Response):
            return vmi
        # one deadline for the whole handshake with the launcher (connect, ask, answer)
        deadline = asyncio.get_running_loop().time() + HANDSHAKE_SECONDS
        try:
            # connected without following a symlink the launcher may have put there
            sock = await asyncio.to_thread(launcher.connect, socket_of(vmi, self.socket_dir),
                                           timeout=HANDSHAKE_SECONDS)
        except launcher.ControlError as err:
            return web.json_response({"message": f"launcher unreachable: {err}"}, status=503)
        try:
            reader, writer = await asyncio.open_unix_connection(sock=sock, limit=ANSWER_LIMIT)
        except OSError as err:
            sock.close()
            return web.json_response({"message": f"launcher unreachable: {err}"}, status=503)
        try:
            try:
                async with asyncio.timeout_at(deadline):
                    writer.write(b'{"cmd":"console"}\n')
                    await writer.drain()
                    line = await reader.readline()
            except (TimeoutError, OSError, ValueError) as err:  # ValueError: line too long
                return web.json_response({"message": "launcher unreachable: no answer to"
                                          f" the console request ({type(err).__name__})"},
                                         status=503)
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

    async def _vmi_here(self, request: web.Request,
                        what: str) -> dict[str, Any] | web.Response:
        """The VMI asked for, if virt-api asks and it is on this node with that uid."""
        transport = request.transport
        peer = transport.get_extra_info("peercert") if transport is not None else None
        if common_name_of(peer) != API_CLIENT_CN:
            return web.json_response({"message": f"only virt-api may {what}"}, status=401)
        ns, name = request.match_info["ns"], request.match_info["name"]
        uid = request.query.get("uid", "")
        vmi: dict[str, Any] | None = await asyncio.to_thread(self.kube.get_or_none, VMIS, name, ns)
        if (vmi is None or vmi["metadata"].get("uid") != uid
                or (vmi.get("status") or {}).get("nodeName") != self.node):
            return web.json_response({"message": f"VMI {ns}/{name} ({uid}) is not on "
                                      f"node {self.node}"}, status=404)
        return vmi

    async def guestinfo(self, request: web.Request) -> web.Response:
        """The launcher's guestinfo answer (the guest agent's facts) as it came."""
        vmi = await self._vmi_here(request, "read guest agent facts")
        if isinstance(vmi, web.Response):
            return vmi
        try:
            answer = await asyncio.to_thread(launcher.guestinfo, socket_of(vmi, self.socket_dir),
                                             timeout=HANDSHAKE_SECONDS)
        except launcher.ControlError as err:
            return web.json_response({"message": f"launcher unreachable: {err}"}, status=503)
        return web.json_response(answer)

    async def _act(self, vmi: dict[str, Any], call: Callable[..., dict[str, Any]],
                   **kwargs: Any) -> dict[str, Any] | web.Response:
        """One control request to the VMI's launcher: its answer when it did it, else
        the handler's answer (503 unreachable, 409 refused with the launcher's reason)."""
        try:
            answer = await asyncio.to_thread(call, socket_of(vmi, self.socket_dir),
                                             timeout=HANDSHAKE_SECONDS, **kwargs)
        except launcher.ControlError as err:
            return web.json_response({"message": f"launcher unreachable: {err}"}, status=503)
        if answer.get("ok") is not True:
            return web.json_response({"message": str(answer.get("error") or answer)[:500]},
                                     status=409)
        return answer

    async def softreboot(self, request: web.Request) -> web.Response:
        vmi = await self._vmi_here(request, "reboot guests")
        if isinstance(vmi, web.Response):
            return vmi
        answer = await self._act(vmi, launcher.softreboot)
        return answer if isinstance(answer, web.Response) else web.json_response({})

    async def forward(self, request: web.Request) -> web.Response:
        """Open a forward of a guest port through the launcher (virt-api's port-forward
        of a VMI that lists no ports); answers where it is."""
        vmi = await self._vmi_here(request, "forward guest ports")
        if isinstance(vmi, web.Response):
            return vmi
        port, proto = request.query.get("port", ""), request.query.get("protocol", "tcp")
        if not (port.isascii() and port.isdigit()) or proto not in ("tcp", "udp"):
            return web.json_response({"message": "port and protocol (tcp|udp) are required"},
                                     status=400)
        answer = await self._act(vmi, launcher.forward, port=int(port), protocol=proto)
        if isinstance(answer, web.Response):
            return answer
        return web.json_response({"address": answer.get("address"), "port": answer.get("port")})

    async def pause_unpause(self, request: web.Request) -> web.Response:
        """QMP stop / cont (libvirt suspend / resume) through the launcher."""
        action = request.match_info["action"]
        vmi = await self._vmi_here(request, f"{action} guests")
        if isinstance(vmi, web.Response):
            return vmi
        answer = await self._act(vmi, launcher.pause if action == "pause" else launcher.unpause)
        return answer if isinstance(answer, web.Response) else web.json_response({})

    def app(self) -> web.Application:
        app = web.Application()
        base = "/v1/namespaces/{ns}/virtualmachineinstances/{name}"
        app.router.add_get(base + "/console", self.console)
        app.router.add_get(base + "/guestinfo", self.guestinfo)
        app.router.add_put(base + "/softreboot", self.softreboot)
        app.router.add_put(base + "/forward", self.forward)
        app.router.add_put(base + "/{action:pause|unpause}", self.pause_unpause)
        app.router.add_get("/healthz", healthz)
        return app


class ConsoleSite:
    """The console server listening with its certificate (and trust) renewed in place at
    half its lifetime by ``issue``, which reads virt-api's CA again each time."""

    def __init__(self, server: ConsoleServer, issue: Callable[[], serving.Issued], *,
                 lifetime: dt.timedelta) -> None:
        self.server = server
        self.issue = issue
        self.lifetime = lifetime
        self.port = 0
        self._runner: web.AppRunner | None = None
        self._renewing: asyncio.Task[None] | None = None

    async def start(self, first: serving.Issued, *, address: str, port: int) -> None:
        ctx = server_context(first.bundle)
        renewal = serving.Serving(self.issue, lifetime=self.lifetime, contexts=(ctx,),
                                  trusting=(ctx,))
        renewal.load(first)
        runner = web.AppRunner(self.server.app(), access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, address, port, ssl_context=ctx)
        await site.start()
        self.port = int(runner.addresses[0][1])  # the one picked when ``port`` is 0
        self._runner = runner
        self._renewing = asyncio.create_task(renewal.run())

    async def stop(self) -> None:
        if self._renewing is not None:
            self._renewing.cancel()
        if self._runner is not None:
            await self._runner.cleanup()


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
