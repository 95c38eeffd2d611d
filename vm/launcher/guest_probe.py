"""A VMI probe run in the guest through the agent (upstream's virt-launcher ``Exec`` and
``GuestPing``, asked by ``virt-probe``).

``exec``: ``guest-exec`` the command (its output captured and dropped), then poll
``guest-exec-status`` until it has exited or the probe's timeout is over; success is
exit code 0. ``guestAgentPing``: ``guest-ping`` answers within the timeout. Everything
is bounded by the one timeout; the answers are judged by :func:`exec_verdict` (pure).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from vm.launcher.agent import Agent, AgentError

POLL_SECONDS = 0.1
"""Between two guest-exec-status questions."""


class ProbeFailed(Exception):
    """The probe ran and failed, or could not be run; the message says which."""


def exec_verdict(status: Any) -> tuple[bool, str] | None:
    """guest-exec-status's answer: None while the command runs, else (success, why)."""
    if not isinstance(status, dict):
        raise ProbeFailed(f"unreadable guest-exec-status answer: {str(status)[:100]}")
    if not status.get("exited"):
        return None
    code = status.get("exitcode")
    if code == 0:
        return True, ""
    if code is None and status.get("signal") is not None:
        return False, f"command was killed by signal {status['signal']}"
    return False, f"command failed with exit code {code}"


async def run(agent: Agent, *, command: Sequence[str], guest_agent_ping: bool,
              timeout: float, clock: Callable[[], float] = time.monotonic,
              sleep: Callable[[float], Awaitable[None]] = asyncio.sleep) -> None:
    """Run one probe; returns on success. :raise ProbeFailed: with the reason."""
    deadline = clock() + timeout
    try:
        if guest_agent_ping:
            await agent.execute("guest-ping", timeout=timeout)
            return
        started = await agent.execute(
            "guest-exec", {"path": command[0], "arg": list(command[1:]),
                           "capture-output": True}, timeout=timeout)
        pid = started.get("pid") if isinstance(started, dict) else None
        if not isinstance(pid, int):
            raise ProbeFailed(f"guest-exec gave no pid: {str(started)[:100]}")
        while True:
            left = deadline - clock()
            if left <= 0:
                raise ProbeFailed(f"command did not exit within {timeout:g} s")
            verdict = exec_verdict(await agent.execute(
                "guest-exec-status", {"pid": pid}, timeout=left))
            if verdict is not None:
                if not verdict[0]:
                    raise ProbeFailed(verdict[1])
                return
            await sleep(min(POLL_SECONDS, max(0.0, deadline - clock())))
    except AgentError as err:
        raise ProbeFailed(f"guest agent: {err}") from err
