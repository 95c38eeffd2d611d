"""The controllers' resync pass: one slow object (a hostile launcher answering at the end
of each call's deadline) holds up one worker, not the other objects of the pass."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

from vm import resync


def _run_passes(objects: list[dict[str, Any]], sync: Any, *, seconds: float) -> None:
    async def main() -> None:
        task = asyncio.create_task(resync.every(60, list_objects=lambda: objects, sync=sync))
        await asyncio.sleep(seconds)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    asyncio.run(main())


def test_a_slow_object_does_not_hold_up_the_others() -> None:
    release = threading.Event()
    synced: dict[str, float] = {}
    start = time.monotonic()

    def sync(obj: dict[str, Any]) -> None:
        if obj["name"] == "hostile":
            release.wait(10)  # its launcher answers only at the end of the deadline
        synced[obj["name"]] = time.monotonic() - start

    objects = [{"name": "hostile"}, *({"name": f"vmi-{i}"} for i in range(6))]
    try:
        _run_passes(objects, sync, seconds=1.0)
    finally:
        release.set()
    late = {name: at for name, at in synced.items() if name != "hostile" and at > 0.5}
    assert set(synced) >= {f"vmi-{i}" for i in range(6)}, synced
    assert not late, late


def test_a_failing_sync_is_logged_and_the_others_still_synced(caplog: Any) -> None:
    synced: list[str] = []

    def sync(obj: dict[str, Any]) -> None:
        if obj["name"] == "broken":
            raise RuntimeError("the API answered 500")
        synced.append(obj["name"])

    _run_passes([{"name": "broken"}, {"name": "a"}, {"name": "b"}], sync, seconds=0.5)
    assert sorted(synced) == ["a", "b"]
    assert "resync of one object failed" in caplog.text
    assert "the API answered 500" in caplog.text


def test_at_most_the_pool_syncs_at_once() -> None:
    running = peak = 0
    lock = threading.Lock()

    def sync(_obj: dict[str, Any]) -> None:
        nonlocal running, peak
        with lock:
            running += 1
            peak = max(peak, running)
        time.sleep(0.05)
        with lock:
            running -= 1

    _run_passes([{"name": str(i)} for i in range(20)], sync, seconds=1.0)
    assert 1 < peak <= resync.WORKERS
