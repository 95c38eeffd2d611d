"""What a server answered when it refused a WebSocket upgrade.

aiohttp's ``ws_connect`` raises :class:`aiohttp.WSServerHandshakeError` with the status
only ("Invalid response status"): the body, where the server says why (a node handler's
``{"message": "launcher unreachable: ..."}``, virt-api's or the API server's Kubernetes
Status), is dropped. :func:`keep_refusal` is a client middleware that keeps it, bounded,
for the code that called ``ws_connect`` to read with :func:`last_refusal` once it got
that error. It keeps it in a context variable, so one session may serve concurrent
upgrades (each task sees its own). Users: the API server's aggregation proxy passes a
backend's refusal on as it came (as kube-apiserver's upgrade-aware proxy does), virt-api
relays a node handler's reason, ``rootdisk console`` prints the reason it got.
"""

from __future__ import annotations

import asyncio
import contextvars
import json
from dataclasses import dataclass

import aiohttp

BODY_LIMIT = 4096
"""Bytes kept of an answer refusing an upgrade (its reason is in it)."""
REASON_LIMIT = 300
"""Characters of that reason shown."""
READ_TIMEOUT = 10
"""Seconds to read that body in."""


@dataclass(frozen=True)
class Refused:
    status: int
    content_type: str
    body: bytes
    """At most :data:`BODY_LIMIT` bytes of it."""

    @property
    def reason(self) -> str:
        return reason_in(self.body, self.content_type)


_last: contextvars.ContextVar[Refused | None] = contextvars.ContextVar(
    "apiservice_refused", default=None)


async def keep_refusal(request: aiohttp.ClientRequest,
                       handler: aiohttp.ClientHandlerType) -> aiohttp.ClientResponse:
    """A client middleware (``ClientSession(middlewares=(keep_refusal,))``): for an upgrade
    request, what a refusing answer (any status but 101) said; None after an accepted one."""
    resp = await handler(request)
    if request.headers.get("Upgrade", "").lower() != "websocket":
        return resp
    refused = None
    if resp.status != 101:
        body = b""
        try:
            async with asyncio.timeout(READ_TIMEOUT):
                while len(body) < BODY_LIMIT and (
                        chunk := await resp.content.read(BODY_LIMIT - len(body))):
                    body += chunk
        except (aiohttp.ClientError, OSError, TimeoutError):
            pass  # what came is enough (or nothing did: the status says the rest)
        refused = Refused(resp.status, resp.content_type, body)
    _last.set(refused)
    return resp


def last_refusal() -> Refused | None:
    """The answer of this task's last refused upgrade (after ``WSServerHandshakeError``
    from a session with :func:`keep_refusal`); None if it was accepted or never sent."""
    return _last.get()


def reason_in(body: bytes, content_type: str) -> str:
    """The message of a refusal's body: ``{"message": ...}`` (a node handler's answers, a
    Kubernetes Status) or plain text; one printable line of at most
    :data:`REASON_LIMIT` characters, empty if there is none."""
    text = body.decode("utf-8", errors="replace")
    if content_type == "application/json":
        try:
            doc = json.loads(text)
        except ValueError:
            return ""  # cut at the limit, or not JSON after all: not a reason to show
        message = doc.get("message") if isinstance(doc, dict) else None
        if not isinstance(message, str):
            return ""
        text = message
    elif content_type != "text/plain":
        return ""
    line = " ".join("".join(c if c.isprintable() else " " for c in text).split())
    return line if len(line) <= REASON_LIMIT else line[:REASON_LIMIT - 3] + "..."
