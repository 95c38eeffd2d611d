"""Talking to the qemu-guest-agent: one command at a time, each bounded.

Why it exists: the launcher asks the guest for its OS, users, filesystems and addresses,
and reboots it through the agent. Two transports, one interface (:class:`Agent`):

- :class:`SocketAgent` (the qemu driver): QEMU listens on the channel's unix socket and
  the launcher connects. The agent speaks QMP-style JSON, one object per line, with no
  greeting and no capabilities negotiation, so ``qemu.qmp``'s QMPClient (which waits for
  QMP's greeting) does not fit; this is a small JSON-lines client. Before a command on a
  fresh connection it sends ``guest-sync`` with a random id and drops every line until
  the agent echoes that id, as the QGA protocol asks (answers to commands sent before a
  guest restarted, or while no agent listened, may still be queued).
- :class:`LibvirtAgent` (the libvirt driver): libvirt owns the channel; commands go
  through ``libvirt_qemu.qemuAgentCommand`` (imported in the libvirt driver only).

Every command has a timeout; an answer is at most :data:`MAX_ANSWER` bytes and must be a
JSON object; a timeout, a broken or oversized answer closes the connection (the next
command connects and syncs again) and raises :class:`AgentError`, never anything else.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import secrets
from typing import Any, Protocol

MAX_ANSWER = 1024 * 1024
"""Longest answer line accepted from the guest (bytes)."""
MAX_SKIPPED = 64
"""Lines dropped at most while waiting for guest-sync's echo."""


class AgentError(Exception):
    """The agent could not be reached, did not answer in time, or answered nonsense."""


class AgentCommandError(AgentError):
    """The agent answered with an error object (``{"error": {"class", "desc"}}``)."""

    def __init__(self, error_class: str, desc: str) -> None:
        super().__init__(f"{error_class}: {desc}")
        self.error_class = error_class
        self.desc = desc


class Agent(Protocol):
    async def execute(
        self, command: str, arguments: dict[str, Any] | None = None, *, timeout: float
    ) -> Any:
        """The command's ``return`` value. :raise AgentError:"""

    async def close(self) -> None: ...


def request_line(command: str, arguments: dict[str, Any] | None) -> bytes:
    body: dict[str, Any] = {"execute": command}
    if arguments is not None:
        body["arguments"] = arguments
    return json.dumps(body, separators=(",", ":")).encode() + b"\n"


def parse_answer(line: bytes) -> Any:
    """The ``return`` of one answer line. :raise AgentError:"""
    try:
        body = json.loads(line.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as err:
        raise AgentError(f"the agent answered something that is not JSON: {line[:80]!r}") from err
    if not isinstance(body, dict):
        raise AgentError("the agent answered something that is not a JSON object")
    if "return" in body:
        return body["return"]
    error = body.get("error")
    if isinstance(error, dict):
        raise AgentCommandError(str(error.get("class", ""))[:100], str(error.get("desc", ""))[:500])
    raise AgentError("the agent answered neither a return nor an error")


class SocketAgent:
    """A JSON-lines client of the agent behind QEMU's channel socket at ``path``."""

    def __init__(self, path: str, *, max_answer: int = MAX_ANSWER) -> None:
        self.path = path
        self.max_answer = max_answer
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._lock = asyncio.Lock()

    async def close(self) -> None:
        writer, self._reader, self._writer = self._writer, None, None
        if writer is not None:
            writer.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(writer.wait_closed(), 1)

    async def _readline(self) -> bytes:
        assert self._reader is not None
        try:
            line = await self._reader.readline()
        except (ValueError, asyncio.LimitOverrunError) as err:
            raise AgentError(f"the agent's answer is longer than {self.max_answer} bytes") from err
        if not line.endswith(b"\n"):
            raise AgentError("the agent closed the channel")
        return line

    async def _send(self, line: bytes) -> None:
        assert self._writer is not None
        self._writer.write(line)
        await self._writer.drain()

    async def _connect_and_sync(self) -> None:
        self._reader, self._writer = await asyncio.open_unix_connection(
            self.path, limit=self.max_answer
        )
        token = secrets.randbelow(2**31)
        await self._send(request_line("guest-sync", {"id": token}))
        for _ in range(MAX_SKIPPED):
            line = await self._readline()
            with contextlib.suppress(AgentError):
                if parse_answer(line) == token:
                    return
        raise AgentError("the agent never echoed guest-sync's id")

    async def execute(
        self, command: str, arguments: dict[str, Any] | None = None, *, timeout: float
    ) -> Any:
        async with self._lock:
            try:
                async with asyncio.timeout(timeout):
                    if self._writer is None:
                        await self._connect_and_sync()
                    await self._send(request_line(command, arguments))
                    if command in NO_ANSWER:
                        return None
                    return parse_answer(await self._readline())
            except AgentCommandError:
                raise
            except TimeoutError as err:
                await self.close()
                raise AgentError(f"the agent did not answer {command} in {timeout:g} s") from err
            except AgentError:
                await self.close()
                raise
            except OSError as err:
                await self.close()
                raise AgentError(f"cannot reach the agent: {err}") from err


NO_ANSWER = frozenset({"guest-shutdown"})
"""Commands the agent does not answer when they succeed (the guest goes away)."""
