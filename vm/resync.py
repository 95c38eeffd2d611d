"""A periodic resync loop beside kopf's watches, for the level-triggered controllers.

kopf's own timers keep per-object state (a finalizer and annotations written with PATCH),
which would need the controllers to patch objects they otherwise only read; this loop
lists the objects itself and calls the same sync function in worker threads of its own.

Objects of one pass are synced side by side, at most ``WORKERS`` at once (each
controller's sync holds a per-object lock, so one object is never synced twice at
once): an object whose sync is slow (a hostile launcher answering at the last moment
of each call's deadline, an API call retried) holds up one worker, not the pass, so the
other objects are synced on time. The next pass starts once every sync of this one
has ended, ``interval`` seconds later.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

logger = logging.getLogger(__name__)

WORKERS = 4
"""Syncs of one pass at a time. Their own pool: kopf's handlers and ``to_thread`` keep
the default one."""


async def every(interval: float, *, list_objects: Callable[[], list[dict[str, Any]]],
                sync: Callable[[dict[str, Any]], None], workers: int = WORKERS) -> None:
    """Forever: list, sync each object (side by side, errors logged), sleep
    ``interval`` seconds."""
    loop = asyncio.get_running_loop()
    pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="resync")
    try:
        while True:
            try:
                objects = await loop.run_in_executor(pool, list_objects)
                outcomes = await asyncio.gather(
                    *(loop.run_in_executor(pool, sync, obj) for obj in objects),
                    return_exceptions=True)
                for outcome in outcomes:
                    if isinstance(outcome, Exception):  # the others were still synced
                        logger.error("resync of one object failed", exc_info=outcome)
            except asyncio.CancelledError:
                raise
            except Exception:  # a pass that fails is retried on the next one
                logger.exception("resync pass failed")
            await asyncio.sleep(interval)
    finally:  # never waits in the event loop for a sync still running
        pool.shutdown(wait=False, cancel_futures=True)
