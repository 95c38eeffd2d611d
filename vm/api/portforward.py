"""The ``portforward`` subresource of VirtualMachineInstances and VirtualMachines:
virt-api dials the VMI's first interface address (its launcher pod's IP, where the
launcher forwards the interface's ports to the guest) and relays raw bytes over a
WebSocket (subprotocol ``plain.kubevirt.io``, binary frames; closing is the end of the
stream), as upstream's ``PortForwardRequestHandler``.

The choice of the target, with upstream's refusals (codes and words), is pure
(:func:`target_of`); the dial and the relay are below it.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from aiohttp import WSMsgType, web

from vm.domain import podnet
from vm.errors import Refused
from vocab import kubevirt

PROTOCOL = kubevirt.PLAIN_PROTOCOL
DIAL_TIMEOUT = 10.0
CHUNK = 32 * 1024
UDP_MAX = 65507


@dataclass(frozen=True)
class Target:
    host: str
    port: int
    protocol: str  # "tcp" | "udp"


def _conflict(resource: str, name: str, why: str) -> Refused:
    return Refused(409, f'Operation cannot be fulfilled on {resource}.kubevirt.io "{name}": {why}')


def vmi_for_vm(name: str, vm: Mapping[str, Any] | None,
               vmi: Mapping[str, Any] | None) -> Mapping[str, Any]:
    """Upstream's ``FetchVirtualMachineInstanceForVM``: the VM's running VMI."""
    if vm is None:
        raise Refused(404, f'virtualmachine.kubevirt.io "{name}" not found')
    if not (vm.get("status") or {}).get("created"):
        raise _conflict("virtualmachine", name, "VMI is not started")
    if vmi is None:
        raise Refused(404, f'virtualmachineinstance.kubevirt.io "{name}" not found')
    uid = (vm.get("metadata") or {}).get("uid")
    owners = (vmi.get("metadata") or {}).get("ownerReferences") or []
    if not any(isinstance(o, Mapping) and o.get("uid") == uid for o in owners):
        raise Refused(500, f"Internal error occurred: unable to retrieve vmi [{name}] for vm")
    return vmi


def target_of(name: str, vmi: Mapping[str, Any] | None, port: str,
              protocol: str | None, *, unprivileged_start: int = 0) -> Target:
    """Where to dial for ``…/portforward/{port}[/{protocol}]``, or upstream's refusal.
    A port below the node's ``unprivileged_start`` is where the launcher took it
    (``podnet.node_port``)."""
    if vmi is None:
        raise Refused(404, f'virtualmachineinstance.kubevirt.io "{name}" not found')
    status = vmi.get("status") or {}
    if any(isinstance(c, Mapping) and c.get("type") == "Paused"
           for c in status.get("conditions") or []):
        raise _conflict("virtualmachineinstance", name, "VMI is paused")
    interfaces = status.get("interfaces") or []
    if not interfaces:
        raise Refused(400, "no network interfaces are present")
    host = str((interfaces[0] or {}).get("ipAddress") or "")
    if not host:
        raise Refused(400, "the first network interface has no address")
    if not (port.isascii() and port.isdigit() and 1 <= int(port) <= 65535):
        raise Refused(400, f"port must be a number from 1 to 65535, got {port[:20]!r}")
    proto = protocol or "tcp"
    if proto not in ("tcp", "udp"):
        raise Refused(400, f"protocol must be tcp or udp, got {proto[:20]!r}")
    return Target(host=host, port=podnet.node_port(int(port), unprivileged_start),
                  protocol=proto)


def forwarded_on_request(vmi: Mapping[str, Any]) -> bool:
    """Whether the VMI's first interface lists no ``ports``: upstream then forwards every
    port, so the launcher opens the asked-for one on request (QEMU's user network has no
    wildcard forward); a VMI that lists ports is reached on those only."""
    devices = ((vmi.get("spec") or {}).get("domain") or {}).get("devices") or {}
    interfaces = devices.get("interfaces") or []
    first = interfaces[0] if interfaces and isinstance(interfaces[0], Mapping) else {}
    return not first.get("ports")


def _dial_error(target: Target, err: OSError) -> Refused:
    # Go's words for the errno ("connection refused"), not asyncio's "Connect call failed"
    what = (os.strerror(err.errno) if err.errno else err.strerror or str(err)).lower()
    return Refused(500, f"Internal error occurred: dialing VM: dial {target.protocol} "
                        f"{target.host}:{target.port}: connect: {what}")


async def serve_tcp(request: web.Request, target: Target) -> web.StreamResponse:
    """Dial first (a refusal is still an HTTP answer), then upgrade and relay."""
    try:
        async with asyncio.timeout(DIAL_TIMEOUT):
            reader, writer = await asyncio.open_connection(target.host, target.port)
    except TimeoutError:
        raise _dial_error(target, OSError(0, "i/o timeout")) from None
    except OSError as err:
        raise _dial_error(target, err) from None
    ws = web.WebSocketResponse(protocols=(PROTOCOL,), heartbeat=30)
    try:
        await ws.prepare(request)

        async def down() -> None:
            while chunk := await reader.read(CHUNK):
                await ws.send_bytes(chunk)

        async def up() -> None:
            async for msg in ws:
                if msg.type == WSMsgType.BINARY:
                    writer.write(msg.data)
                elif msg.type == WSMsgType.TEXT:
                    writer.write(msg.data.encode())
                else:
                    break
                await writer.drain()
            if writer.can_write_eof():
                writer.write_eof()

        await _both(down(), up())
    finally:
        writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()
        await ws.close()
    return ws


class _Datagrams(asyncio.DatagramProtocol):
    def __init__(self) -> None:
        self.queue: asyncio.Queue[bytes | None] = asyncio.Queue(maxsize=256)

    def datagram_received(self, data: bytes, addr: Any) -> None:
        with contextlib.suppress(asyncio.QueueFull):  # UDP: a slow reader loses datagrams
            self.queue.put_nowait(data)

    def error_received(self, exc: Exception) -> None:
        with contextlib.suppress(asyncio.QueueFull):
            self.queue.put_nowait(None)


async def serve_udp(request: web.Request, target: Target) -> web.StreamResponse:
    """Each binary frame is one datagram to the guest, each datagram back one frame."""
    loop = asyncio.get_running_loop()
    try:
        transport, proto = await loop.create_datagram_endpoint(
            _Datagrams, remote_addr=(target.host, target.port))
    except OSError as err:
        raise _dial_error(target, err) from None
    ws = web.WebSocketResponse(protocols=(PROTOCOL,), heartbeat=30)
    try:
        await ws.prepare(request)

        async def down() -> None:
            while (data := await proto.queue.get()) is not None:
                await ws.send_bytes(data)

        async def up() -> None:
            async for msg in ws:
                if msg.type not in (WSMsgType.BINARY, WSMsgType.TEXT):
                    break
                data = msg.data if msg.type == WSMsgType.BINARY else msg.data.encode()
                transport.sendto(data[:UDP_MAX])

        await _both(down(), up())
    finally:
        transport.close()
        await ws.close()
    return ws


async def _both(*coros: Any) -> None:
    """Run the two directions until either ends (the stream is over), then stop both."""
    tasks = [asyncio.ensure_future(c) for c in coros]
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
