"""Close what an event loop still holds open before the loop itself is closed.

``asyncio`` (3.11) forgets a server-side TLS connection whose handshake has not finished:
the web framework never saw it, ``Server.close()`` only stops listening, and closing the
loop leaves the socket open until the garbage collector finds it (a ResourceWarning, and a
file descriptor held until then). A peer that connects and says nothing keeps one such
connection open for as long as it likes; a connection whose reading is paused is watched
by no selector and is left the same way. Every transport the loop still holds is aborted
here, so a loop that ends holds no socket at all.
"""

from __future__ import annotations

import asyncio
import selectors


def _transports(loop: asyncio.AbstractEventLoop) -> list[asyncio.BaseTransport]:
    """Every transport the loop holds: its own registry of socket transports (each one
    registers itself by file descriptor, whether or not it reads or writes now: a
    connection whose reading is paused is in no selector set) and whatever else its
    selector watches."""
    found: dict[int, asyncio.BaseTransport] = {}
    registry = getattr(loop, "_transports", None)  # the selector event loop's own
    if registry is not None:
        for transport in list(registry.values()):
            if isinstance(transport, asyncio.BaseTransport):
                found[id(transport)] = transport
    selector = getattr(loop, "_selector", None)
    if isinstance(selector, selectors.BaseSelector):
        for key in list(selector.get_map().values()):
            for handle in key.data or ():
                owner = getattr(getattr(handle, "_callback", None), "__self__", None)
                if isinstance(owner, asyncio.BaseTransport):
                    found[id(owner)] = owner
    return list(found.values())


async def abort_open_transports() -> int:
    """Abort every transport the running loop still holds (one closing gracefully, a TLS
    connection waiting for its peer's close_notify, included); return how many. Their
    ``connection_lost`` callbacks have run when this returns."""
    loop = asyncio.get_running_loop()
    transports = _transports(loop)
    for transport in transports:
        abort = getattr(transport, "abort", None)
        if abort is not None:
            abort()
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    return len(transports)
