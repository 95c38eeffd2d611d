"""A periodic resync loop beside kopf's watches, for the level-triggered controllers.

kopf's own timers keep per-object state (a finalizer and annotations written with PATCH),
which would need the controllers to patch objects they otherwise only read; this loop
lists the objects itself and calls the same sync function, in a worker thread, with
a bound on each pass.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

logger = logging.getLogger(__name__)


async def every(interval: float, *, list_objects: Callable[[], list[dict[str, Any]]],
                sync: Callable[[dict[str, Any]], None]) -> None:
    """Forever: list, sync each object (errors logged), sleep ``interval`` seconds."""
    while True:
        try:
            objects = await asyncio.to_thread(list_objects)
            for obj in objects:
                await asyncio.to_thread(sync, obj)
        except asyncio.CancelledError:
            raise
        except Exception:  # a pass that fails is retried on the next one
            logger.exception("resync pass failed")
        await asyncio.sleep(interval)
