"""Answers aiohttp servers share: the upload server (importer/) and the upload proxy
(cdi/) refuse a silent client the same way, without either importing the other."""

from __future__ import annotations

import contextlib

from aiohttp import web


async def refused_closing(request: web.Request, status: int,
                          text: str) -> web.StreamResponse:
    """A refusal to a client gone silent: answered, then the connection is closed at
    once; what is left of its body is never waited for (no lingering close). The upload
    proxy answers its silent clients so too."""
    resp = web.Response(status=status, text=f"{text}\n")
    resp.force_close()
    with contextlib.suppress(ConnectionError):
        await resp.prepare(request)
        await resp.write_eof()
    if request.protocol is not None:
        request.protocol.force_close()
    return resp
