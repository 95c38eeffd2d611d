"""The launcher's outcome and its JSON termination message.

Why it exists: Kubernetes keeps at most 4096 bytes of ``/dev/termination-log``; the VMI
controller reads ``phase`` and ``reason`` from it. The message is cut to fit by
shortening the free text, never by producing invalid JSON.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Literal

MAX_BYTES = 4096


@dataclass(frozen=True)
class Outcome:
    phase: Literal["Succeeded", "Failed"]
    reason: str
    message: str = ""

    @property
    def exit_code(self) -> int:
        return 0 if self.phase == "Succeeded" else 1


def encode(outcome: Outcome, *, extra: dict[str, object] | None = None) -> bytes:
    body: dict[str, object] = {
        "phase": outcome.phase,
        "reason": outcome.reason,
        "message": outcome.message,
        **(extra or {}),
    }
    data = json.dumps(body, sort_keys=True).encode()
    message = outcome.message
    while len(data) > MAX_BYTES and message:
        message = message[: max(0, len(message) - (len(data) - MAX_BYTES) - 16)]
        body["message"] = message + "…"
        data = json.dumps(body, sort_keys=True).encode()
    if len(data) > MAX_BYTES:  # an absurd reason or extra: keep the phase at least
        data = json.dumps({"phase": outcome.phase, "reason": outcome.reason[:200]}).encode()
    return data
