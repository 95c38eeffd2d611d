"""Run a generator a few items ahead in a thread: the clone's two halves overlap their
disk and network work this way (reading and framing the next extent while the last one
is encrypted and sent; decrypting the next while the last one is written). The heavy
calls on both sides (``pread``/``pwrite``, TLS reads and writes, zstd) release the GIL,
so the two threads really run at once where there are cores for them. In a pod held to
upstream's 750m CPU limit the overlap buys little: alternating runs under such a quota,
with and without the thread, were within the machine's noise of each other."""

from __future__ import annotations

import queue
import threading
from collections.abc import Generator
from typing import Any, TypeVar

T = TypeVar("T")
R = TypeVar("R")

_ITEM, _DONE, _ERROR = 0, 1, 2
_POLL = 0.5
"""Seconds between checks, while the queue is full, that the consumer still wants more."""


def ahead(gen: Generator[T, None, R], *, depth: int) -> Generator[T, None, R]:
    """Items of ``gen``, produced at most ``depth`` ahead; its return value and its
    exceptions come through unchanged. Closing this generator early stops the producer
    at its next item."""
    slots: queue.Queue[tuple[int, Any]] = queue.Queue(maxsize=depth)
    stop = threading.Event()

    def put(entry: tuple[int, Any]) -> bool:
        while not stop.is_set():
            try:
                slots.put(entry, timeout=_POLL)
                return True
            except queue.Full:
                continue
        return False

    def produce() -> None:
        try:
            while True:
                try:
                    item = next(gen)
                except StopIteration as end:
                    put((_DONE, end.value))
                    return
                if not put((_ITEM, item)):
                    return
        except BaseException as err:  # handed to the consumer, raised there
            put((_ERROR, err))
        finally:
            gen.close()

    worker = threading.Thread(target=produce, name="ahead", daemon=True)
    worker.start()
    try:
        while True:
            kind, value = slots.get()
            if kind == _ITEM:
                yield value
            elif kind == _DONE:
                return value  # type: ignore[no-any-return]
            else:
                raise value
    finally:
        stop.set()
        worker.join(timeout=10)
