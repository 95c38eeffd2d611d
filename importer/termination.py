"""The termination message: what the importer tells its controller as it exits.

JSON at ``/dev/termination-log`` (Kubernetes keeps at most 4096 bytes of it), with a
machine-readable ``reason`` and whether the failure is worth a retry. Never credentials:
messages are built from redacted URLs only.
"""

from __future__ import annotations

import contextlib
import json
from pathlib import Path
from typing import Any

LIMIT = 4096


def message(*, reason: str, text: str, retryable: bool, **extra: Any) -> bytes:
    """The JSON document, with ``text`` shortened so the whole fits in ``LIMIT`` bytes."""
    body: dict[str, Any] = {"reason": reason, "message": text, "retryable": retryable, **extra}
    data = json.dumps(body, sort_keys=True).encode()
    while len(data) > LIMIT and body["message"]:
        excess = len(data) - LIMIT
        keep = max(0, len(body["message"]) - excess - 1)
        body["message"] = body["message"][:keep] + "…" if keep else ""
        data = json.dumps(body, sort_keys=True).encode()
    if len(data) > LIMIT:
        data = json.dumps({"reason": reason, "retryable": retryable, "message": ""}).encode()
    return data


def write(path: Path | None, data: bytes) -> None:
    if path is None:
        return
    # Outside a pod there may be no termination log; the exit code still tells.
    with contextlib.suppress(OSError):
        path.write_bytes(data)
