"""The termination message: what the importer tells its controller as it exits.

JSON at ``/dev/termination-log`` (Kubernetes keeps at most 4096 bytes of it), with a
machine-readable ``reason`` and whether the failure is worth a retry. Never credentials:
messages are built from redacted URLs only.
"""

from __future__ import annotations

import contextlib
import json
import logging
from pathlib import Path
from typing import Any

from importer.errors import ImporterError

LIMIT = 4096
EXIT_OK, EXIT_RETRYABLE, EXIT_PERMANENT = 0, 1, 2


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


def failed(path: Path | None, err: ImporterError | OSError, *, what: str,
           logger: logging.Logger) -> int:
    """Record a failed run of one of the in-pod programs (importer, cloner, clone target,
    upload server): the log line, the termination message, and the exit code (an
    OSError not classified by the program is a retryable TransferFailed)."""
    if isinstance(err, ImporterError):
        reason, text, retryable = err.reason, err.message, err.retryable
    else:
        reason, text, retryable = "TransferFailed", str(err), True
    logger.error("%s failed (%s): %s", what, reason, text)
    write(path, message(reason=reason, text=text, retryable=retryable))
    return EXIT_RETRYABLE if retryable else EXIT_PERMANENT
