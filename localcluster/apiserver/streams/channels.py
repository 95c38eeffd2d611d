"""Kubernetes' WebSocket channel protocol for pods/exec and pods/attach (pure).

Every binary message starts with one byte naming its stream: 0 stdin, 1 stdout,
2 stderr, 3 error (the result, sent once at the end), 4 resize (JSON ``{"Width": W,
"Height": H}``); ``v5.channel.k8s.io`` adds 255, a close signal whose second byte is
the stream closed (the client's end of stdin). Versions, as kubectl 1.32 offers them:

- ``v5.channel.k8s.io``: v4 plus the close signal;
- ``v4.channel.k8s.io``: the error stream carries a JSON ``metav1.Status`` (exit codes as
  ``NonZeroExitCode`` with an ``ExitCode`` cause, which kubectl turns into its own exit);
- ``v3.channel.k8s.io``: adds the resize stream;
- ``v2.channel.k8s.io`` and ``channel.k8s.io``: the error stream is plain text.

(``base64.channel.k8s.io`` text framing is not offered.)
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

STDIN, STDOUT, STDERR, ERROR, RESIZE, CLOSE = 0, 1, 2, 3, 4, 255
V5, V4, V3, V2, V1 = ("v5.channel.k8s.io", "v4.channel.k8s.io", "v3.channel.k8s.io",
                      "v2.channel.k8s.io", "channel.k8s.io")
PROTOCOLS: tuple[str, ...] = (V5, V4, V3, V2, V1)
"""What this server speaks, most preferred first."""


def choose_protocol(offered: Sequence[str]) -> str | None:
    """The protocol to answer with: the first of ours the client offered (None: the
    client speaks none of them)."""
    wanted = {p.strip() for p in offered}
    return next((p for p in PROTOCOLS if p in wanted), None)


def frame(channel: int, data: bytes) -> bytes:
    return bytes([channel]) + data


@dataclass(frozen=True)
class Message:
    channel: int
    data: bytes


def parse(message: bytes) -> Message | None:
    """A received frame, or None for an empty message (clients send none, but ignore it)."""
    if not message:
        return None
    return Message(message[0], bytes(message[1:]))


def parse_resize(data: bytes) -> tuple[int, int] | None:
    """``{"Width": 80, "Height": 24}`` → (columns, rows); None if malformed."""
    try:
        size = json.loads(data)
        width, height = int(size["Width"]), int(size["Height"])
    except (ValueError, KeyError, TypeError):
        return None
    if not (0 < width < 65536 and 0 < height < 65536):
        return None
    return width, height


def result_status(*, exit_code: int | None, command: Sequence[str],
                  error: str | None = None) -> dict[str, Any]:
    """The v4/v5 error-stream status for a finished command (as the kubelet writes it)."""
    if error is None and exit_code == 0:
        return {"metadata": {}, "status": "Success"}
    if error is not None:
        return {"metadata": {}, "status": "Failure", "message": error,
                "reason": "InternalError", "code": 500}
    return {"metadata": {}, "status": "Failure",
            "message": f"command terminated with non-zero exit code: error executing "
                       f"command {list(command)}, exit code {exit_code}",
            "reason": "NonZeroExitCode",
            "details": {"causes": [{"reason": "ExitCode", "message": str(exit_code)}]}}


def result_frame(protocol: str, *, exit_code: int | None, command: Sequence[str],
                 error: str | None = None) -> bytes | None:
    """The final message on the error stream, or None when there is nothing to say (a
    success on the text protocols)."""
    if protocol in (V5, V4):
        status = result_status(exit_code=exit_code, command=command, error=error)
        return frame(ERROR, json.dumps(status).encode())
    if error is None and exit_code == 0:
        return None
    text = error or f"command terminated with non-zero exit code: exit code {exit_code}"
    return frame(ERROR, text.encode())
