"""VMI exec and guestAgentPing probes through the real qemu-ga (on the host, running only
true/false/sleep), and the pure reading of guest-exec-status."""

from __future__ import annotations

import asyncio
import time

import pytest

from tests.vm.agent.realagent import real_agent
from vm.launcher import guest_probe
from vm.launcher.agent import SocketAgent
from vm.launcher.guest_probe import ProbeFailed, exec_verdict

EXEC = ("guest-exec", "guest-exec-status")


@pytest.mark.parametrize(("status", "verdict"), [
    ({"exited": False}, None),
    ({"exited": True, "exitcode": 0}, (True, "")),
    ({"exited": True, "exitcode": 3}, (False, "command failed with exit code 3")),
    ({"exited": True, "signal": 9}, (False, "command was killed by signal 9")),
])
def test_exec_verdict(status: dict, verdict: tuple[bool, str] | None) -> None:
    assert exec_verdict(status) == verdict


def test_exec_verdict_refuses_garbage() -> None:
    with pytest.raises(ProbeFailed, match="unreadable"):
        exec_verdict([1])


def _run(command: tuple[str, ...], *, ping: bool = False, timeout: float = 5,
         unblock: tuple[str, ...] = EXEC) -> str:
    """'' on success, else the failure's message."""
    async def main() -> str:
        with real_agent(unblock) as path:
            agent = SocketAgent(str(path))
            try:
                await guest_probe.run(agent, command=command, guest_agent_ping=ping,
                                      timeout=timeout)
                return ""
            except ProbeFailed as err:
                return str(err)
            finally:
                await agent.close()
    return asyncio.run(asyncio.wait_for(main(), 60))


def test_exec_success_and_failure_by_exit_code() -> None:
    assert _run(("/bin/true",)) == ""
    assert _run(("/bin/sh", "-c", "exit 7")) == "command failed with exit code 7"


def test_exec_is_bounded_by_the_timeout() -> None:
    start = time.monotonic()
    assert _run(("/bin/sleep", "30"), timeout=1) == "command did not exit within 1 s"
    assert time.monotonic() - start < 15


def test_exec_refused_by_the_agent_fails_the_probe() -> None:
    assert _run(("/bin/true",), unblock=()).startswith("guest agent: ")


def test_guest_agent_ping() -> None:
    assert _run((), ping=True) == ""
