"""A synchronous client for the launcher's control socket (see :mod:`vm.launcher`).

Why it exists: the node handler and the tests talk to launchers the same way; this keeps
the framing (one JSON line out, one JSON line back, bounded) in one place.
"""

from __future__ import annotations

import json
import socket
from pathlib import Path
from typing import Any

from vm.launcher.protocol import MAX_LINE


class ControlError(Exception):
    """The launcher could not be reached or answered something unreadable."""


def socket_path(*, socket_dir: str | Path, vmi_uid: str) -> Path:
    return Path(socket_dir) / f"{vmi_uid}.sock"


def _connect(path: str | Path, timeout: float) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(timeout)
    try:
        sock.connect(str(path))
    except OSError as err:
        sock.close()
        raise ControlError(f"cannot reach launcher at {path}: {err}") from err
    return sock


def _read_line(sock: socket.socket) -> bytes:
    buf = b""
    while b"\n" not in buf:
        chunk = sock.recv(MAX_LINE)
        if not chunk:
            break
        buf += chunk
        if len(buf) > MAX_LINE:
            raise ControlError("launcher answer longer than the line limit")
    line, _, _rest = buf.partition(b"\n")
    return line


def request(path: str | Path, body: dict[str, Any], *, timeout: float = 10.0) -> dict[str, Any]:
    """Send one request, return the decoded answer."""
    with _connect(path, timeout) as sock:
        sock.sendall(json.dumps(body).encode() + b"\n")
        line = _read_line(sock)
    try:
        answer = json.loads(line)
    except ValueError as err:
        raise ControlError(f"unreadable answer from launcher: {line[:200]!r}") from err
    if not isinstance(answer, dict):
        raise ControlError(f"unreadable answer from launcher: {line[:200]!r}")
    return answer


def status(path: str | Path, *, timeout: float = 10.0) -> dict[str, Any]:
    return request(path, {"cmd": "status"}, timeout=timeout)


def shutdown(
    path: str | Path, *, grace_period_seconds: int, timeout: float = 10.0
) -> dict[str, Any]:
    return request(
        path, {"cmd": "shutdown", "gracePeriodSeconds": grace_period_seconds}, timeout=timeout
    )


def attach_console(path: str | Path, *, timeout: float = 10.0) -> socket.socket:
    """Open a console connection; returns the socket, now carrying raw serial bytes."""
    sock = _connect(path, timeout)
    try:
        sock.sendall(b'{"cmd":"console"}\n')
        # Read the answer byte by byte so no console byte is swallowed with it.
        line = b""
        while not line.endswith(b"\n"):
            ch = sock.recv(1)
            if not ch or len(line) > MAX_LINE:
                raise ControlError("launcher closed the console request")
            line += ch
        answer = json.loads(line)
        if answer.get("ok") is not True:
            raise ControlError(f"console refused: {answer.get('error')}")
    except BaseException:
        sock.close()
        raise
    sock.settimeout(None)
    return sock
