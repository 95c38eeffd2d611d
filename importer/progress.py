"""Import progress as a percentage, fed by bytes transferred or by qemu-img, and shown to
whoever listens: the Prometheus metric in a pod, a progress bar on a terminal."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class Update:
    percent: float
    """0–100, never decreasing."""
    done_bytes: int
    total_bytes: int | None
    elapsed: float


Listener = Callable[[Update], None]


class Progress:
    def __init__(self, listeners: list[Listener] | None = None) -> None:
        self.listeners = list(listeners or [])
        self._lock = threading.Lock()
        self._started = time.monotonic()
        self.percent = 0.0
        self.done_bytes = 0
        self.total_bytes: int | None = None
        self._span = (0.0, 100.0)

    def stage(self, *, start: float, end: float, total_bytes: int | None = None) -> None:
        """Map the next stage's own 0–100 % onto ``start``–``end`` of the whole."""
        with self._lock:
            self._span = (start, end)
            self.total_bytes = total_bytes
            self.done_bytes = 0

    def set_span(self, *, start: float, end: float) -> None:
        """Re-map the current stage, keeping its count (once the route is known)."""
        with self._lock:
            self._span = (start, end)

    def advance(self, count: int) -> None:
        with self._lock:
            self.done_bytes += count
            total = self.total_bytes
        if total:
            self.stage_percent(min(100.0, 100.0 * self.done_bytes / total))
        else:
            self._notify()

    def stage_percent(self, percent: float) -> None:
        start, end = self._span
        self.set_percent(start + (end - start) * percent / 100.0)

    def set_percent(self, percent: float) -> None:
        with self._lock:
            self.percent = max(self.percent, min(100.0, percent))
        self._notify()

    def _notify(self) -> None:
        update = Update(self.percent, self.done_bytes, self.total_bytes,
                        time.monotonic() - self._started)
        for listener in self.listeners:
            listener(update)
