"""vm.launcher.tasks.stop: a task that swallows a cancellation (as Python 3.11's wait_for
can lose one) is cancelled again until it ends; one that never ends is left after the
bound, logged, instead of hanging the launcher's exit."""

from __future__ import annotations

import asyncio
import logging

import pytest

from vm.launcher import tasks


class Stubborn:
    """A task body that swallows its first ``times`` cancellations."""

    def __init__(self, times: int) -> None:
        self.times, self.swallowed, self.ended = times, 0, False

    async def run(self) -> None:
        while True:
            try:
                await asyncio.sleep(3600)
            except asyncio.CancelledError:
                if self.swallowed >= self.times:
                    self.ended = True
                    raise
                self.swallowed += 1

    async def release(self, task: asyncio.Task[None]) -> None:
        """End it for sure (the test's own cleanup, whatever stop() did)."""
        self.times = 0
        task.cancel()
        await asyncio.wait({task}, timeout=5)


def _stop(body: Stubborn, timeout: float) -> tuple[bool, float]:
    async def main() -> tuple[bool, float]:
        task = asyncio.create_task(body.run(), name="stubborn")
        await asyncio.sleep(0)
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        await tasks.stop([task], timeout=timeout)
        spent, done = loop.time() - t0, task.done()
        await body.release(task)
        return done, spent
    return asyncio.run(main())


def test_a_task_that_swallowed_a_cancellation_is_cancelled_again() -> None:
    body = Stubborn(2)
    done, _ = _stop(body, 5)
    assert done and body.ended and body.swallowed == 2


def test_a_task_that_never_stops_is_left_after_the_bound(caplog: pytest.LogCaptureFixture
                                                          ) -> None:
    body = Stubborn(10**6)
    with caplog.at_level(logging.WARNING, logger="vm.launcher.tasks"):
        done, spent = _stop(body, 0.2)
    assert not done and spent < 5
    assert "task stubborn did not stop within 0.2 s" in caplog.text
