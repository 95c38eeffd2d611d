"""Polling the guest agent as upstream's agent poller does, into :class:`Facts`.

Why it exists: the node handler reads the facts from the launcher each second; the
guest is asked far less often. Every :attr:`Intervals.ping` the agent is pinged
(``guest-ping``, bounded by :attr:`Intervals.timeout`); an answer means connected. On
connecting, every group is asked at once, then again after :attr:`Intervals.initial`,
doubling up to the group's own interval (upstream's ``pollInitialInterval`` 10 s and
its defaults: interfaces, OS, hostname and timezone 120 s; users 10 s; filesystems and
guest-info 300 s). A command that fails keeps the last answer; one the agent does not
know is not asked again on this connection. The clock and sleep are injected (tests).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from vm.launcher import agent_facts
from vm.launcher.agent import Agent, AgentCommandError, AgentError

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Intervals:
    ping: float = 2.0
    timeout: float = 5.0
    initial: float = 10.0
    sys: float = 120.0
    users: float = 10.0
    files: float = 300.0
    version: float = 300.0

    @classmethod
    def scaled(cls, factor: float) -> Intervals:
        """Every interval times ``factor`` (tests; ``AGENT_POLL_SCALE``)."""
        d = cls()
        return cls(ping=d.ping * factor, timeout=d.timeout, initial=d.initial * factor,
                   sys=d.sys * factor, users=d.users * factor, files=d.files * factor,
                   version=d.version * factor)


Apply = Callable[[agent_facts.Facts, Any], None]


def _set_info(f: agent_facts.Facts, raw: Any) -> None:
    f.version, f.supported_commands = agent_facts.agent_info(raw)


def _set(attr: str, parse: Callable[[Any], Any]) -> Apply:
    def apply(f: agent_facts.Facts, raw: Any) -> None:
        setattr(f, attr, parse(raw))
    return apply


GROUPS: dict[str, tuple[tuple[str, Apply], ...]] = {
    "version": (("guest-info", _set_info),),
    "files": (("guest-get-fsinfo", _set("filesystems", agent_facts.filesystems)),),
    "sys": (
        ("guest-network-get-interfaces", _set("interfaces", agent_facts.interfaces)),
        ("guest-get-osinfo", _set("os", agent_facts.os_info)),
        ("guest-get-host-name", _set("hostname", agent_facts.hostname)),
        ("guest-get-timezone", _set("timezone", agent_facts.timezone)),
    ),
    "users": (("guest-get-users", _set("users", agent_facts.users)),),
}


@dataclass
class _Schedule:
    due: float
    interval: float


class AgentPoller:
    def __init__(self, agent: Agent, intervals: Intervals | None = None, *,
                 clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], Awaitable[Any]] = asyncio.sleep) -> None:
        self.agent = agent
        self.intervals = intervals or Intervals()
        self.facts = agent_facts.Facts()
        self.clock = clock
        self.sleep = sleep
        self._schedule: dict[str, _Schedule] = {}
        self._unknown: set[str] = set()

    def _tick(self, group: str) -> float:
        return float(getattr(self.intervals, group))

    async def ping(self) -> bool:
        try:
            await self.agent.execute("guest-ping", timeout=self.intervals.timeout)
            return True
        except AgentError as err:
            if self.facts.connected:
                logger.info("guest agent disconnected: %s", err)
            return False

    async def poll_once(self) -> None:
        """One round: ping, then the groups that are due."""
        connected = await self.ping()
        now = self.clock()
        if connected and not self.facts.connected:
            logger.info("guest agent connected")
            self._unknown.clear()
            self._schedule = {g: _Schedule(now, min(self.intervals.initial, self._tick(g)))
                              for g in GROUPS}
        self.facts.connected = connected
        if not connected:
            return
        for group, sched in self._schedule.items():
            if sched.due > now:
                continue
            for command, apply in GROUPS[group]:
                if command not in self._unknown:
                    await self._ask(command, apply)
            sched.due = now + sched.interval
            sched.interval = min(sched.interval * 2, self._tick(group))

    async def _ask(self, command: str, apply: Apply) -> None:
        try:
            raw = await self.agent.execute(command, timeout=self.intervals.timeout)
        except AgentCommandError as err:
            if err.error_class == "CommandNotFound":
                self._unknown.add(command)
            logger.info("guest agent %s: %s", command, err)
            return
        except AgentError as err:
            logger.info("guest agent %s: %s", command, err)
            return
        apply(self.facts, raw)

    async def run(self) -> None:
        """Forever (cancel to stop)."""
        while True:
            await self.poll_once()
            await self.sleep(self.intervals.ping)
