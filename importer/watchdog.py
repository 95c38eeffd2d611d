"""Two bounds on an import's time, whatever the server does.

The 60 s read timeout is per read, and the retry budget starts again on any progress, so
a server that trickles a few bytes a minute, or stalls and recovers, would keep an import
alive for ever. The watchdog fails it:

- ``Stalled`` (retryable) when fewer than ``min_bytes`` arrived in the last ``window``
  seconds of fetching (phases that fetch nothing, such as converting a scratch file,
  are paused);
- ``DeadlineExceeded`` (permanent) when the optional overall deadline passes.

``Rule`` is the pure decision; ``armed`` ticks it from SIGALRM in the main thread, so
the error is raised there even while that thread is blocked in a read or a wait (the
import then unwinds as for any failure: children stopped, destination wiped).
"""

from __future__ import annotations

import contextlib
import logging
import signal
import threading
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from types import FrameType

from importer.errors import DeadlineExceeded, Stalled

logger = logging.getLogger(__name__)

DEFAULT_MIN_BYTES = 1024 * 1024
DEFAULT_WINDOW = 300.0


@dataclass
class Rule:
    """Bytes over time against the minimum-throughput rule and the deadline."""

    min_bytes: int
    window: float
    deadline: float | None
    started: float
    _samples: deque[tuple[float, int]] = field(default_factory=deque)
    _paused_at: float | None = None

    def check(self, *, now: float, total: int) -> None:
        """Raise when the rule is broken at ``now`` with ``total`` bytes fetched so far."""
        if self.deadline is not None and now - self.started > self.deadline:
            raise DeadlineExceeded(f"the import did not finish within its deadline of"
                                   f" {self.deadline:g} s")
        if self._paused_at is not None:
            return
        self._samples.append((now, total))
        while len(self._samples) > 1 and self._samples[1][0] <= now - self.window:
            self._samples.popleft()
        since, before = self._samples[0]
        if now - since >= self.window and total - before < self.min_bytes:
            raise Stalled(f"fewer than {self.min_bytes} bytes arrived in {self.window:g} s"
                          f" ({total - before} bytes): the source is stalled")

    def pause(self, *, now: float) -> None:
        self._paused_at = now

    def resume(self, *, now: float) -> None:
        """Fetching again: the window starts afresh."""
        self._paused_at = None
        self._samples.clear()


class Watchdog:
    """The bytes fetched so far, from the importer's own reads (``add``) and from
    children's counters (``watch``: nbdkit's bytes read), checked on every tick."""

    def __init__(self, rule: Rule, clock: Callable[[], float]) -> None:
        self.rule = rule
        self.clock = clock
        self._lock = threading.Lock()
        self._own = 0
        self._counters: list[Callable[[], int]] = []

    def add(self, count: int) -> None:
        with self._lock:
            self._own += count

    @contextlib.contextmanager
    def watch(self, counter: Callable[[], int]) -> Iterator[None]:
        with self._lock:
            self._counters.append(counter)
        try:
            yield
        finally:
            with self._lock:
                self._counters.remove(counter)
                with contextlib.suppress(OSError, ValueError):
                    self._own += counter()  # what it fetched stays counted

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        self.rule.pause(now=self.clock())
        try:
            yield
        finally:
            self.rule.resume(now=self.clock())

    def total(self) -> int:
        with self._lock:
            total, counters = self._own, list(self._counters)
        for counter in counters:
            with contextlib.suppress(OSError, ValueError):
                total += counter()
        return total

    def tick(self) -> None:
        self.rule.check(now=self.clock(), total=self.total())


@contextlib.contextmanager
def armed(watchdog: Watchdog, *, interval: float) -> Iterator[Watchdog]:
    """Tick ``watchdog`` every ``interval`` seconds from SIGALRM (main thread only; off
    it, the watchdog is only ticked by whoever calls ``tick``)."""
    if threading.current_thread() is not threading.main_thread():
        yield watchdog
        return

    def on_alarm(_signum: int, _frame: FrameType | None) -> None:
        try:
            watchdog.tick()
        except (Stalled, DeadlineExceeded):
            signal.setitimer(signal.ITIMER_REAL, 0)  # one failure is enough
            raise

    previous = signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, interval, interval)
    try:
        yield watchdog
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
