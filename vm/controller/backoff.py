"""Crash-loop back-off between VMI starts, as upstream's ``calculateStartBackoffTime``.

The delay grows with the square of the consecutive failures (VMIs that failed before
they ever ran): ``max(10, max_delay/30) × count²`` plus up to half of that again at
random, never above ``max_delay`` (300 s upstream). The random part is a parameter, so
the function stays pure.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

MAX_DELAY = 300
MIN_INTERVAL = 10


def start_backoff_seconds(*, fail_count: int, jitter: float, max_delay: int = MAX_DELAY) -> int:
    """``jitter`` in [0, 1) picks the random share; the result is whole seconds."""
    if fail_count < 1:
        return 0
    interval = max(MIN_INTERVAL, max_delay // 30)
    delay = interval * fail_count * fail_count
    delay += int(jitter * (delay // 2 + 1))
    return min(delay, max_delay)


@dataclass(frozen=True)
class StartFailure:
    count: int
    last_failed_uid: str
    retry_after: datetime

    def to_status(self) -> dict[str, object]:
        return {"consecutiveFailCount": self.count, "lastFailedVMIUID": self.last_failed_uid,
                "retryAfterTimestamp": self.retry_after.strftime("%Y-%m-%dT%H:%M:%SZ")}

    @classmethod
    def from_status(cls, raw: object) -> StartFailure | None:
        if not isinstance(raw, dict) or not raw.get("retryAfterTimestamp"):
            return None
        try:
            when = datetime.strptime(str(raw["retryAfterTimestamp"]), "%Y-%m-%dT%H:%M:%SZ").replace(
                tzinfo=UTC)
        except ValueError:
            return None
        return cls(count=int(raw.get("consecutiveFailCount") or 0),
                   last_failed_uid=str(raw.get("lastFailedVMIUID") or ""),
                   retry_after=when)


def next_failure(*, previous: StartFailure | None, failed_uid: str, now: datetime,
                 jitter: float, max_delay: int = MAX_DELAY) -> StartFailure:
    """The record after VMI ``failed_uid`` failed early (counted once per VMI)."""
    if previous is not None and previous.last_failed_uid == failed_uid:
        return previous
    count = (previous.count if previous else 0) + 1
    delay = start_backoff_seconds(fail_count=count, jitter=jitter, max_delay=max_delay)
    return StartFailure(count=count, last_failed_uid=failed_uid,
                        retry_after=now + timedelta(seconds=delay))
