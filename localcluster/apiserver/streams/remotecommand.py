"""pods/exec and pods/attach over WebSocket, as kubectl 1.32 speaks them (channels.py).

The node registers a provider (``APIServer.set_exec_provider``): called with keyword
arguments ``namespace, pod, container, command, stdin, tty, attach`` it returns a
:class:`Session` (a process in the container's namespaces, or the container's own
streams for attach) or raises LookupError (no such running container) before anything is
upgraded, so kubectl shows that message. Authorisation is ``create`` on the subresource
for every method, GET included (the WebSocket upgrade is a GET; Kubernetes 1.32 checks
``create`` for it too).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Protocol

from aiohttp import WSMsgType, web

from ..errors import bad_request
from ..storage.store import Stored
from . import channels
from .containers import pick_container

logger = logging.getLogger(__name__)

MAX_MESSAGE = 4 * 1024 * 1024


class Session(Protocol):
    """One exec'd command (or an attach to a container's streams), as the node gives it."""

    async def read(self) -> tuple[int, bytes] | None:
        """The next output chunk as (STDOUT or STDERR, bytes); None once all output ended."""

    async def write(self, data: bytes) -> None:
        """Bytes for the process's stdin."""

    def close_stdin(self) -> None: ...

    def resize(self, width: int, height: int) -> None: ...

    async def wait(self) -> int | None:
        """The exit code (None for an attach, which ends without one)."""

    def kill(self) -> None:
        """The client went away: end what is still running."""


ExecProvider = Callable[..., Awaitable[Session]]


def _flag(value: str | None) -> bool:
    return (value or "").lower() in ("1", "true", "yes")


async def serve(request: web.Request, *, stored: Stored, namespace: str, pod: str,
                kind: str, provider: ExecProvider | None) -> web.StreamResponse:
    query = request.query
    container = pick_container(stored, pod, query.get("container"))
    command: Sequence[str] = query.getall("command", [])
    stdin, stdout, stderr = (_flag(query.get(k)) for k in ("stdin", "stdout", "stderr"))
    tty = _flag(query.get("tty"))
    if kind == "exec" and not command:
        raise bad_request("you must specify at least 1 command")
    if not (stdin or stdout or stderr):
        raise bad_request("you must specify at least one of stdin, stdout, stderr")
    if tty and stderr:
        stderr = False  # a terminal has one output stream (kubectl asks so too)
    if request.headers.get("Upgrade", "").lower() != "websocket":
        raise bad_request(f"pods/{kind} needs a WebSocket upgrade (protocols "
                          f"{', '.join(channels.PROTOCOLS)}); SPDY is not served")
    offered = request.headers.get("Sec-WebSocket-Protocol", "").split(",")
    protocol = channels.choose_protocol(offered)
    if protocol is None:
        raise bad_request(f"none of the offered WebSocket subprotocols {offered} is "
                          f"supported ({', '.join(channels.PROTOCOLS)})")
    if provider is None:
        raise bad_request(f'container "{container}" in pod "{pod}" is not running on a node')
    try:
        session = await provider(namespace=namespace, pod=pod, container=container,
                                 command=list(command), stdin=stdin, tty=tty,
                                 attach=kind == "attach")
    except LookupError as err:
        raise bad_request(str(err)) from None
    ws = web.WebSocketResponse(protocols=(protocol,), max_msg_size=MAX_MESSAGE,
                               heartbeat=None)
    try:
        await ws.prepare(request)
    except Exception:
        session.kill()
        raise
    logger.info("%s %s/%s[%s] %s (tty=%s, %s)", kind, namespace, pod, container,
                " ".join(command)[:80], tty, protocol)
    inbound = asyncio.create_task(_inbound(ws, session, protocol=protocol, stdin=stdin))
    try:
        await _outbound(ws, session, protocol=protocol, command=command,
                        wanted={channels.STDOUT: stdout, channels.STDERR: stderr})
    finally:
        inbound.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await inbound
        session.kill()
        await ws.close()
    return ws


async def _outbound(ws: web.WebSocketResponse, session: Session, *, protocol: str,
                    command: Sequence[str], wanted: dict[int, bool]) -> None:
    while True:
        chunk = await session.read()
        if chunk is None:
            break
        channel, data = chunk
        if wanted.get(channel) and not ws.closed:
            await ws.send_bytes(channels.frame(channel, data))
    code = await session.wait()
    if code is None or ws.closed:
        return
    final = channels.result_frame(protocol, exit_code=code, command=command)
    if final is not None:
        await ws.send_bytes(final)


async def _inbound(ws: web.WebSocketResponse, session: Session, *, protocol: str,
                   stdin: bool) -> None:
    async for msg in ws:
        if msg.type != WSMsgType.BINARY:
            continue
        message = channels.parse(msg.data)
        if message is None:
            continue
        if message.channel == channels.STDIN and stdin:
            await session.write(message.data)
        elif message.channel == channels.RESIZE:
            size = channels.parse_resize(message.data)
            if size is not None:
                session.resize(*size)
        elif message.channel == channels.CLOSE and protocol == channels.V5 and \
                message.data[:1] == bytes([channels.STDIN]):
            session.close_stdin()
    # The client closed the connection: stdin ends, whatever is left is ended too.
    session.close_stdin()
    session.kill()
