"""The launcher's guest agent client and poller against the real qemu-ga, and against
peers that fail: absent, mute, answering garbage or too much."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import socket
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

from tests.vm.agent.realagent import real_agent
from vm.launcher import agent_facts
from vm.launcher.agent import AgentCommandError, AgentError, SocketAgent
from vm.launcher.agent_poller import AgentPoller, Intervals

FAST = Intervals(ping=0.05, timeout=2.0, initial=0.1, sys=0.4, users=0.2, files=0.8,
                 version=0.8)


def test_the_real_agent_answers_every_command_the_launcher_asks() -> None:
    async def main() -> None:
        with real_agent() as path:
            agent = SocketAgent(str(path))
            try:
                poller = AgentPoller(agent, FAST)
                await poller.poll_once()
            finally:
                await agent.close()
        facts = poller.facts
        assert facts.connected
        assert facts.version.startswith("7.")
        names = {c["name"]: c["enabled"] for c in facts.supported_commands}
        assert names["guest-ping"] is True
        assert names["guest-shutdown"] is False  # blocked on the host: see realagent
        assert agent_facts.unsupported_reason(facts.supported_commands) == (
            "This guest agent doesn't support required basic commands")
        assert facts.hostname == socket.gethostname()
        release = Path("/etc/os-release").read_text()
        assert f'PRETTY_NAME="{facts.os["prettyName"]}"' in release
        assert facts.os["kernelRelease"] == os.uname().release
        zone, _, offset = facts.timezone.partition(", ")
        assert zone and offset.lstrip("-").isdigit()
        assert any(fs["mountPoint"] == "/" for fs in facts.filesystems), facts.filesystems
        assert all(i["interfaceName"] != "lo" for i in facts.interfaces)
        assert isinstance(facts.users, list)

    asyncio.run(asyncio.wait_for(main(), 60))


def test_a_second_connection_resyncs_with_the_real_agent() -> None:
    async def main() -> None:
        with real_agent() as path:
            agent = SocketAgent(str(path))
            try:
                assert await agent.execute("guest-ping", timeout=5) == {}
                await agent.close()  # the next command connects and syncs again
                raw = await agent.execute("guest-get-host-name", timeout=5)
                assert raw == {"host-name": socket.gethostname()}
                with pytest.raises(AgentCommandError, match="CommandNotFound"):
                    await agent.execute("guest-shutdown-is-no-command", timeout=5)
                assert await agent.execute("guest-ping", timeout=5) == {}  # still usable
            finally:
                await agent.close()

    asyncio.run(asyncio.wait_for(main(), 60))


def _short_dir() -> Path:
    return Path(tempfile.mkdtemp(prefix="qga-", dir="/tmp"))


def test_no_agent_means_not_connected_and_no_facts() -> None:
    base = _short_dir()
    try:
        async def main() -> AgentPoller:
            poller = AgentPoller(SocketAgent(str(base / "absent.sock")), FAST)
            await poller.poll_once()
            return poller

        started = time.monotonic()
        poller = asyncio.run(main())
        assert time.monotonic() - started < 2
        assert not poller.facts.connected
        assert poller.facts.to_json()["os"] == {}
    finally:
        shutil.rmtree(base)


Peer = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


async def _with_peer(peer: Peer, body: Callable[[str], Awaitable[None]]) -> None:
    base = _short_dir()
    path = str(base / "peer.sock")
    tasks: list[asyncio.Task[None]] = []

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        tasks.append(asyncio.current_task())  # type: ignore[arg-type]
        try:
            await peer(reader, writer)
        finally:
            writer.close()

    server = await asyncio.start_unix_server(serve, path=path)
    try:
        await body(path)
    finally:
        server.close()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await server.wait_closed()
        shutil.rmtree(base)


async def _echo_sync(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    sync = json.loads(await reader.readline())
    writer.write(json.dumps({"return": sync["arguments"]["id"]}).encode() + b"\n")
    await writer.drain()


def test_an_agent_that_never_answers_costs_the_timeout_only() -> None:
    async def mute(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read()  # reads everything, answers nothing

    async def body(path: str) -> None:
        poller = AgentPoller(SocketAgent(path), Intervals(timeout=0.5))
        started = time.monotonic()
        await poller.poll_once()
        assert 0.5 <= time.monotonic() - started < 2
        assert not poller.facts.connected

    asyncio.run(asyncio.wait_for(_with_peer(mute, body), 30))


@pytest.mark.parametrize("answer", [
    b"not json\n",
    b"[1, 2]\n",
    b'{"neither": 1}\n',
    b'{"return": ' + b'"x' * 100 + b'"}',  # no newline: then the peer closes
])
def test_a_malformed_answer_is_an_agent_error(answer: bytes) -> None:
    async def broken(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await _echo_sync(reader, writer)
        await reader.readline()
        writer.write(answer)
        await writer.drain()
        writer.close()

    async def body(path: str) -> None:
        agent = SocketAgent(path)
        with pytest.raises(AgentError):
            await agent.execute("guest-get-osinfo", timeout=5)
        await agent.close()

    asyncio.run(asyncio.wait_for(_with_peer(broken, body), 30))


def test_an_oversized_answer_is_refused_not_buffered() -> None:
    async def flood(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await _echo_sync(reader, writer)
        await reader.readline()
        try:
            for _ in range(64):  # 4 MiB without a newline, against a 64 KiB limit
                writer.write(b"a" * 65536)
                await writer.drain()
        except (ConnectionError, OSError):
            return

    async def body(path: str) -> None:
        agent = SocketAgent(path, max_answer=65536)
        with pytest.raises(AgentError, match="longer than 65536 bytes"):
            await agent.execute("guest-get-users", timeout=10)
        await agent.close()

    asyncio.run(asyncio.wait_for(_with_peer(flood, body), 30))


def test_a_hostile_agent_cannot_grow_the_facts_or_crash_the_parser() -> None:
    many = [{"user": "u" * 5000, "login-time": float("nan")}] * 1000 + [{"user": 3}]
    users = agent_facts.users(many)
    assert len(users) == agent_facts.MAX_ITEMS
    assert users[0] == {"userName": "u" * agent_facts.MAX_TEXT, "loginTime": 0.0}
    assert agent_facts.os_info({"name": ["x"], "id": "debian", "pretty-name": 7}) == {
        "id": "debian"}
    assert agent_facts.filesystems([{"name": "vda1", "used-bytes": "1", "total-bytes": True,
                                     "disk": [{"bus-type": "virtio", "serial": None}, 5]}]) == [
        {"diskName": "vda1", "mountPoint": "", "fileSystemType": "", "usedBytes": 0,
         "totalBytes": 0, "disk": [{"busType": "virtio"}]}]
    assert agent_facts.interfaces("x") == []
    assert agent_facts.interfaces([{"name": "eth0", "hardware-address": "AA:BB:CC:DD:EE:FF",
                                    "ip-addresses": [{"ip-address": "10.0.2.15"}, {}]}]) == [
        {"interfaceName": "eth0", "mac": "aa:bb:cc:dd:ee:ff", "ipAddresses": ["10.0.2.15"]}]
    assert agent_facts.timezone({"zone": "CET", "offset": 3600}) == "CET, 3600"
    assert agent_facts.agent_info({"version": 1, "supported_commands": [{"name": "a"}]}) == (
        "", [{"name": "a", "enabled": False}])


class _Recorder:
    """An agent stand-in that records what it was asked when (the schedule test)."""

    def __init__(self) -> None:
        self.asked: list[tuple[float, str]] = []
        self.now = 0.0

    async def execute(self, command: str, arguments: object = None, *, timeout: float) -> object:
        self.asked.append((self.now, command))
        return {}

    async def close(self) -> None:
        return None


def test_groups_are_asked_at_once_then_at_doubling_intervals_up_to_their_own() -> None:
    rec = _Recorder()
    poller = AgentPoller(rec, Intervals(ping=1, initial=10, sys=120, users=10, files=300,
                                        version=300), clock=lambda: rec.now)

    async def main() -> None:
        while rec.now <= 400:
            await poller.poll_once()
            rec.now += 1

    asyncio.run(main())
    users = [t for t, c in rec.asked if c == "guest-get-users"]
    osinfo = [t for t, c in rec.asked if c == "guest-get-osinfo"]
    fsinfo = [t for t, c in rec.asked if c == "guest-get-fsinfo"]
    assert users[:4] == [0, 10, 20, 30]
    assert osinfo[:6] == [0, 10, 30, 70, 150, 270]
    assert fsinfo[:6] == [0, 10, 30, 70, 150, 310]
    assert sum(1 for _, c in rec.asked if c == "guest-ping") == 401
