"""Stopping asyncio tasks for sure, in bounded time.

Python 3.11's ``asyncio.wait_for`` can lose a cancellation that arrives as the awaited
call completes (CPython gh-86296, fixed in 3.12): a task looping over such calls (the
guest agent's poller) then runs on, and a plain ``task.cancel(); await task`` waits for
ever — a launcher whose QEMU was killed never exited on a loaded machine. So a task is
cancelled again until it ends, within a bound.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable

logger = logging.getLogger(__name__)

ROUNDS = 5
"""Cancellations sent to a task before it is given up on."""


async def stop(tasks: Iterable[asyncio.Task[object]], *, timeout: float = 5.0) -> None:
    """Cancel ``tasks`` and wait for them to end, cancelling again a task that swallowed
    the cancellation; after ``timeout`` seconds the ones still running are logged and
    left (the event loop's own shutdown cancels them once more)."""
    pending = {t for t in tasks if not t.done()}
    for _ in range(ROUNDS):
        if not pending:
            return
        for task in pending:
            task.cancel()
        _, pending = await asyncio.wait(pending, timeout=timeout / ROUNDS)
    for task in pending:
        logger.warning("task %s did not stop within %g s", task.get_name(), timeout)
