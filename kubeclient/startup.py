"""What a program serving the API (virt-api, cdi-apiserver, the upload proxy) needs from
the API server before it can listen, fetched with bounded retries: at start the API
server, its RBAC or the objects it publishes may not be there yet."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TypeVar

import tenacity

logger = logging.getLogger(__name__)

T = TypeVar("T")
DEADLINE = 120.0


def retry_startup(program: str, what: str, fn: Callable[[], T], *,
                  errors: tuple[type[BaseException], ...], deadline: float = DEADLINE,
                  first: float = 0.5, longest: float = 5.0) -> T:
    """``fn()``, retried on ``errors`` (waits from ``first`` doubling to ``longest``) for
    up to ``deadline`` seconds; then the program exits naming what failed and why."""

    def log(state: tenacity.RetryCallState) -> None:
        err = state.outcome.exception() if state.outcome else None
        logger.warning("%s failed (%s); retrying", what, err)

    try:
        for attempt in tenacity.Retrying(
                retry=tenacity.retry_if_exception_type(errors),
                wait=tenacity.wait_exponential(multiplier=first, min=first, max=longest),
                stop=tenacity.stop_after_delay(deadline), before_sleep=log, reraise=True):
            with attempt:
                return fn()
    except errors as err:
        raise SystemExit(f"{program}: {what} failed: {err}") from None
    raise AssertionError("unreachable: tenacity either returns or raises")
