"""The control socket's request and answer shapes, as pure functions.

Why it exists: the socket is read by the node handler and written by anyone who can reach
the pod's socket directory, so a request is parsed here, bounded and checked, before the
server acts on it; a bad request becomes an error answer, never an exception in the
launcher. The client (:mod:`vm.launcher.client`) uses the same constants.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Literal

MAX_LINE = 4096
"""Longest request line accepted (bytes, newline included)."""

MAX_GRACE_SECONDS = 24 * 3600
"""A shutdown grace period beyond a day is refused rather than trusted."""

MAX_GUESTINFO = 1024 * 1024
"""Longest ``guestinfo`` answer (bytes): the guest's facts, each list bounded."""

MAX_PROBE_SECONDS = 3600
"""A probe's timeout beyond an hour is refused rather than trusted."""

Command = Literal[
    "status", "shutdown", "kill", "pause", "unpause", "console", "guestinfo", "softreboot",
    "probe", "forward",
]
COMMANDS: tuple[Command, ...] = (
    "status", "shutdown", "kill", "pause", "unpause", "console", "guestinfo", "softreboot",
    "probe", "forward",
)

State = Literal["starting", "running", "paused", "shutdown", "crashed"]


@dataclass(frozen=True)
class Request:
    """One parsed control request."""

    cmd: Command
    grace_period_seconds: int | None = None
    probe: ProbeRequest | None = None
    forward: ForwardRequest | None = None


@dataclass(frozen=True)
class ForwardRequest:
    """``{"cmd": "forward", "port": p, "protocol": "tcp"}``: make the guest's ``port``
    reachable on the pod IP (virt-api's port-forward of a VMI that lists no ports)."""

    port: int
    protocol: Literal["tcp", "udp"] = "tcp"


@dataclass(frozen=True)
class ProbeRequest:
    """``{"cmd": "probe", "timeoutSeconds": t, "command": [...]}`` runs the command in
    the guest through the agent (guest-exec; success is exit code 0);
    ``"guestAgentPing": true`` instead of a command pings the agent;
    ``"tcpSocket": port`` checks that the guest accepts on its TCP ``port``."""

    timeout_seconds: int
    command: tuple[str, ...] = ()
    guest_agent_ping: bool = False
    tcp_port: int | None = None


@dataclass(frozen=True)
class BadRequest:
    """A request refused, with the reason sent back to the caller."""

    error: str


def parse_request(*, line: bytes) -> Request | BadRequest:
    """Parse one request line (newline optional); never raises."""
    if len(line) > MAX_LINE:
        return BadRequest(f"request longer than {MAX_LINE} bytes")
    try:
        body = json.loads(line.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as err:
        return BadRequest(f"request is not a JSON line: {err}")
    if not isinstance(body, dict):
        return BadRequest("request must be a JSON object")
    cmd = body.get("cmd")
    if not isinstance(cmd, str) or cmd not in COMMANDS:
        return BadRequest(f"cmd: unknown command {cmd!r} (known: {', '.join(COMMANDS)})")
    if cmd == "probe":
        return _probe_request(body)
    if cmd == "forward":
        port, proto = body.get("port"), body.get("protocol", "tcp")
        if isinstance(port, bool) or not isinstance(port, int) or not 1 <= port <= 65535:
            return BadRequest("port: must be a port number from 1 to 65535")
        if proto not in ("tcp", "udp"):
            return BadRequest("protocol: must be tcp or udp")
        return Request(cmd="forward", forward=ForwardRequest(port=port, protocol=proto))
    if cmd != "shutdown":
        return Request(cmd=cmd)
    grace = body.get("gracePeriodSeconds")
    if grace is None:
        return Request(cmd="shutdown", grace_period_seconds=None)
    if isinstance(grace, bool) or not isinstance(grace, int):
        return BadRequest("gracePeriodSeconds: must be an integer")
    if not 0 <= grace <= MAX_GRACE_SECONDS:
        return BadRequest(f"gracePeriodSeconds: must be between 0 and {MAX_GRACE_SECONDS}")
    return Request(cmd="shutdown", grace_period_seconds=grace)


def _probe_request(body: dict[str, Any]) -> Request | BadRequest:
    timeout = body.get("timeoutSeconds")
    if isinstance(timeout, bool) or not isinstance(timeout, int):
        return BadRequest("timeoutSeconds: must be an integer")
    if not 1 <= timeout <= MAX_PROBE_SECONDS:
        return BadRequest(f"timeoutSeconds: must be between 1 and {MAX_PROBE_SECONDS}")
    ping = body.get("guestAgentPing", False)
    if not isinstance(ping, bool):
        return BadRequest("guestAgentPing: must be a boolean")
    command = body.get("command")
    port = body.get("tcpSocket")
    if port is not None:
        if ping or command is not None:
            return BadRequest("tcpSocket: not with guestAgentPing or command")
        if isinstance(port, bool) or not isinstance(port, int) or not 1 <= port <= 65535:
            return BadRequest("tcpSocket: must be a port number from 1 to 65535")
        return Request(cmd="probe", probe=ProbeRequest(timeout_seconds=timeout,
                                                       tcp_port=port))
    if ping:
        if command is not None:
            return BadRequest("command: not with guestAgentPing")
        return Request(cmd="probe", probe=ProbeRequest(timeout_seconds=timeout,
                                                       guest_agent_ping=True))
    if (not isinstance(command, list) or not command
            or not all(isinstance(c, str) for c in command)):
        return BadRequest("command: must be a non-empty list of strings")
    return Request(cmd="probe", probe=ProbeRequest(timeout_seconds=timeout,
                                                   command=tuple(command)))


def encode(answer: dict[str, Any]) -> bytes:
    """One answer line."""
    return json.dumps(answer, separators=(",", ":"), sort_keys=True).encode() + b"\n"


def ok() -> dict[str, Any]:
    return {"ok": True}


def error(message: str) -> dict[str, Any]:
    return {"ok": False, "error": message}


@dataclass(frozen=True)
class Status:
    """What ``{"cmd": "status"}`` answers."""

    state: State
    reason: str
    driver: str
    accelerator: str
    started_at: str | None

    def to_json(self) -> dict[str, Any]:
        return {
            "state": self.state,
            "reason": self.reason,
            "driver": self.driver,
            "accelerator": self.accelerator,
            "startedAt": self.started_at,
        }
