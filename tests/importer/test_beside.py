"""``beside.pool``: waited for when the block ends, not when it fails (a stalled import
once waited 40 s for its ``qemu-img check`` to finish reading a trickling server)."""

from __future__ import annotations

import threading

import pytest

from importer import beside


def test_a_failing_block_does_not_wait_for_a_task_still_running() -> None:
    release, ran = threading.Event(), threading.Event()

    def blocked() -> str:
        ran.set()
        assert release.wait(30), "never released"
        return "done"

    with pytest.raises(RuntimeError, match="stalled"), beside.pool(1, "t") as side:
        task = side.submit(blocked)
        assert ran.wait(10)
        raise RuntimeError("stalled")
    # the failure got out while the task was still blocked
    assert not task.done()
    release.set()
    assert task.result(timeout=10) == "done"


def test_tasks_not_yet_started_are_cancelled_on_failure() -> None:
    release, started = threading.Event(), threading.Event()

    def first() -> None:
        started.set()
        release.wait(30)

    with pytest.raises(RuntimeError), beside.pool(1, "t") as side:
        side.submit(first)
        queued = side.submit(lambda: "never")
        assert started.wait(10)
        raise RuntimeError("stop")
    release.set()
    assert queued.cancelled()


def test_a_block_that_ends_normally_waits_for_its_tasks() -> None:
    finished = threading.Event()

    def slow() -> None:
        threading.Event().wait(0.2)
        finished.set()

    with beside.pool(2, "t") as side:
        side.submit(slow)
    assert finished.is_set()
