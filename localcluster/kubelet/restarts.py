"""Whether a finished container restarts, and after how long (crash-loop back-off).

Like the kubelet: the first restart waits ``initial`` (10 s), each further one twice the
previous wait up to ``cap`` (5 min); a container that ran for ``reset_after`` (10 min)
before it exited starts over at ``initial``. ``scale`` shrinks every duration for tests.
"""

from __future__ import annotations

from dataclasses import dataclass

ALWAYS = "Always"
ON_FAILURE = "OnFailure"
NEVER = "Never"
POLICIES = (ALWAYS, ON_FAILURE, NEVER)


@dataclass(frozen=True)
class BackoffSettings:
    initial: float = 10.0
    """Seconds before the first restart."""
    cap: float = 300.0
    """Longest wait between restarts."""
    reset_after: float = 600.0
    """A run at least this long resets the back-off."""
    scale: float = 1.0
    """Multiplies every duration above (tests use e.g. 0.01)."""


def should_restart(*, policy: str, exit_code: int) -> bool:
    if policy not in POLICIES:
        raise ValueError(f"restartPolicy must be one of {POLICIES}, got {policy!r}")
    if policy == ALWAYS:
        return True
    if policy == ON_FAILURE:
        return exit_code != 0
    return False


def next_backoff(*, previous: float | None, ran_for: float, settings: BackoffSettings) -> float:
    """Seconds to wait before restarting a container that just exited after ``ran_for``."""
    initial = settings.initial * settings.scale
    if previous is None or ran_for >= settings.reset_after * settings.scale:
        return initial
    return min(max(previous, initial) * 2, settings.cap * settings.scale)
