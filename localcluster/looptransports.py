"""Close what an event loop still holds open before the loop itself is closed.

``asyncio`` (3.11) forgets a server-side TLS connection whose handshake has not finished:
the web framework never saw it, ``Server.close()`` only stops listening, and closing the
loop leaves the socket open until the garbage collector finds it (a ResourceWarning, and a
file descriptor held until then). A peer that connects and says nothing keeps one such
connection open for as long as it likes. Every transport still registered with the loop's
selector is aborted here, so a stopped server holds no socket at all.
"""

from __future__ import annotations

import asyncio
import selectors


def _transports(loop: asyncio.AbstractEventLoop) -> list[asyncio.BaseTransport]:
    selector = getattr(loop, "_selector", None)  # the selector event loop's own
    if not isinstance(selector, selectors.BaseSelector):
        return []
    found: dict[int, asyncio.BaseTransport] = {}
    for key in list(selector.get_map().values()):
        for handle in key.data or ():
            owner = getattr(getattr(handle, "_callback", None), "__self__", None)
            if isinstance(owner, asyncio.BaseTransport):
                found[id(owner)] = owner
    return list(found.values())


async def abort_open_transports() -> int:
    """Abort every transport the running loop still reads from or writes to; return how
    many. Their ``connection_lost`` callbacks have run when this returns."""
    loop = asyncio.get_running_loop()
    transports = _transports(loop)
    for transport in transports:
        abort = getattr(transport, "abort", None)
        if abort is not None:
            abort()
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    return len(transports)
