"""A synchronous client for the launcher's control socket (see :mod:`vm.launcher`).

Why it exists: the node handler and the tests talk to launchers the same way; this keeps
the framing (one JSON line out, one JSON line back, bounded) in one place.

A launcher is not trusted by the one who calls it: ``timeout`` bounds the whole call
(connect, send and the whole answer), not each read, so a socket that answers a byte at
a time cannot hold the caller longer; the answer is at most :data:`MAX_LINE` bytes; and
the socket is opened without following a symlink (a launcher writes the directory its
socket is in, and must not send the caller to another launcher's socket).
"""

from __future__ import annotations

import json
import os
import socket
import stat
import time
from pathlib import Path
from typing import Any

from vm.launcher.protocol import MAX_GUESTINFO, MAX_LINE


class ControlError(Exception):
    """The launcher could not be reached or answered something unreadable."""


def socket_path(*, socket_dir: str | Path, vmi_uid: str) -> Path:
    return Path(socket_dir) / f"{vmi_uid}.sock"


def _left(deadline: float, path: str | Path) -> float:
    left = deadline - time.monotonic()
    if left <= 0:
        raise ControlError(f"launcher at {path} did not answer in time")
    return left


def connect(path: str | Path, *, timeout: float) -> socket.socket:
    """A stream connected to the socket at ``path`` itself: a symlink there (or anything
    but a socket) is refused, not followed. The socket is connected through its
    ``/proc/self/fd`` entry, so nothing is looked up twice."""
    deadline = time.monotonic() + timeout
    try:
        fd = os.open(path, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as err:
        raise ControlError(f"cannot reach launcher at {path}: {err}") from err
    try:
        if not stat.S_ISSOCK(os.fstat(fd).st_mode):
            raise ControlError(f"cannot reach launcher at {path}: not a socket")
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.settimeout(_left(deadline, path))
            sock.connect(f"/proc/self/fd/{fd}")
        except OSError as err:
            sock.close()
            raise ControlError(f"cannot reach launcher at {path}: {err}") from err
        except BaseException:
            sock.close()
            raise
        return sock
    finally:
        os.close(fd)


def _read_line(sock: socket.socket, deadline: float, path: str | Path,
               limit: int = MAX_LINE) -> bytes:
    buf = b""
    while b"\n" not in buf:
        sock.settimeout(_left(deadline, path))
        chunk = sock.recv(65536)
        if not chunk:
            break
        buf += chunk
        if len(buf) > limit:
            raise ControlError("launcher answer longer than the line limit")
    line, _, _rest = buf.partition(b"\n")
    return line


def request(path: str | Path, body: dict[str, Any], *, timeout: float = 10.0,
            limit: int = MAX_LINE) -> dict[str, Any]:
    """Send one request, return the decoded answer (at most ``limit`` bytes), all
    within ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    with connect(path, timeout=timeout) as sock:
        try:
            sock.settimeout(_left(deadline, path))
            sock.sendall(json.dumps(body).encode() + b"\n")
            line = _read_line(sock, deadline, path, limit)
        except TimeoutError as err:
            raise ControlError(f"launcher at {path} did not answer in time") from err
        except OSError as err:
            raise ControlError(f"launcher at {path}: {err}") from err
    try:
        answer = json.loads(line)
    except ValueError as err:
        raise ControlError(f"unreadable answer from launcher: {line[:200]!r}") from err
    if not isinstance(answer, dict):
        raise ControlError(f"unreadable answer from launcher: {line[:200]!r}")
    return answer


def status(path: str | Path, *, timeout: float = 10.0) -> dict[str, Any]:
    return request(path, {"cmd": "status"}, timeout=timeout)


def guestinfo(path: str | Path, *, timeout: float = 10.0) -> dict[str, Any]:
    """The guest agent's facts (see ``Supervisor.guestinfo``), at most
    :data:`MAX_GUESTINFO` bytes."""
    return request(path, {"cmd": "guestinfo"}, timeout=timeout, limit=MAX_GUESTINFO)


def softreboot(path: str | Path, *, timeout: float = 10.0) -> dict[str, Any]:
    return request(path, {"cmd": "softreboot"}, timeout=timeout)


def probe(path: str | Path, *, timeout_seconds: int, command: list[str] | None = None,
          guest_agent_ping: bool = False, tcp_port: int | None = None) -> dict[str, Any]:
    """Ask the launcher to run a VMI probe in the guest; the answer's ``ok`` is its
    verdict. The whole exchange is bounded by the probe's timeout plus a second."""
    body: dict[str, Any] = {"cmd": "probe", "timeoutSeconds": timeout_seconds}
    if tcp_port is not None:
        body["tcpSocket"] = tcp_port
    elif guest_agent_ping:
        body["guestAgentPing"] = True
    else:
        body["command"] = command or []
    return request(path, body, timeout=timeout_seconds + 1.0)


def forward(path: str | Path, *, port: int, protocol: str = "tcp",
            timeout: float = 10.0) -> dict[str, Any]:
    """Ask the launcher to make the guest's ``port`` reachable on the pod IP; the answer
    names where (``address``, ``port``)."""
    return request(path, {"cmd": "forward", "port": port, "protocol": protocol},
                   timeout=timeout)


def pause(path: str | Path, *, timeout: float = 10.0) -> dict[str, Any]:
    return request(path, {"cmd": "pause"}, timeout=timeout)


def unpause(path: str | Path, *, timeout: float = 10.0) -> dict[str, Any]:
    return request(path, {"cmd": "unpause"}, timeout=timeout)


def shutdown(
    path: str | Path, *, grace_period_seconds: int, timeout: float = 10.0
) -> dict[str, Any]:
    return request(
        path, {"cmd": "shutdown", "gracePeriodSeconds": grace_period_seconds}, timeout=timeout
    )


def attach_console(path: str | Path, *, timeout: float = 10.0) -> socket.socket:
    """Open a console connection; returns the socket, now carrying raw serial bytes.
    ``timeout`` bounds getting there (connect, request, the answer line)."""
    deadline = time.monotonic() + timeout
    sock = connect(path, timeout=timeout)
    try:
        sock.settimeout(_left(deadline, path))
        sock.sendall(b'{"cmd":"console"}\n')
        # Read the answer byte by byte so no console byte is swallowed with it.
        line = b""
        while not line.endswith(b"\n"):
            sock.settimeout(_left(deadline, path))
            ch = sock.recv(1)
            if not ch or len(line) > MAX_LINE:
                raise ControlError("launcher closed the console request")
            line += ch
        try:
            answer = json.loads(line)
        except ValueError as err:
            raise ControlError(f"unreadable answer from launcher: {line[:200]!r}") from err
        if not isinstance(answer, dict) or answer.get("ok") is not True:
            error = answer.get("error") if isinstance(answer, dict) else answer
            raise ControlError(f"console refused: {error!r}")
    except OSError as err:
        sock.close()
        raise ControlError(f"launcher at {path}: {err}") from err
    except BaseException:
        sock.close()
        raise
    sock.settimeout(None)
    return sock
