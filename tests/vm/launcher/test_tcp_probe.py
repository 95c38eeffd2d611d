"""The tcpSocket probe's decisions (pure) and its loop against a real socket standing for
QEMU's NAT (which accepts on the pod side whatever the guest does) and a table standing
for QEMU's ``info usernet`` (named as such: the real table is read in
test_launch_network.py, with a real guest)."""

from __future__ import annotations

import asyncio

import pytest

from vm.domain.model import PortForward
from vm.launcher import protocol
from vm.launcher.tcp_probe import (
    ProbeFailed,
    SlirpConnection,
    check,
    connections,
    forward_for,
    verdict,
)

# QEMU 7.2's `info usernet` while a forwarded connection waits for the guest's SYN-ACK
TABLE = """Hub -1 (n0):
  Protocol[State]    FD  Source Address  Port   Dest. Address  Port RecvQ SendQ
  TCP[SYN_SENT]       8       127.0.0.1  5555       10.0.2.15    22     0     0
  TCP[HOST_FORWARD]   3       127.0.0.1  5555       10.0.2.15    22     0     0
  UDP[236 sec]       11        10.0.2.2   68        10.0.2.2    67     0     0
"""


def row(state: str, fd: int, port: int = 22) -> str:
    return f"  TCP[{state}]  {fd:>5}       127.0.0.1  5555       10.0.2.15 {port:>5}     0     0"


def test_the_table_is_read() -> None:
    assert connections(TABLE) == [SlirpConnection("SYN_SENT", 8, 22)]


@pytest.mark.parametrize(("before", "now", "expected"), [
    ([], [SlirpConnection("SYN_SENT", 8, 22)], None),
    ([], [SlirpConnection("ESTABLISHED", 8, 22)], True),
    ([], [SlirpConnection("ESTABLISHED", 8, 80)], None),  # another port
    # an SSH session already open is not this probe's answer
    ([SlirpConnection("ESTABLISHED", 9, 22)], [SlirpConnection("ESTABLISHED", 9, 22)], None),
    ([SlirpConnection("ESTABLISHED", 9, 22)],
     [SlirpConnection("ESTABLISHED", 9, 22), SlirpConnection("ESTABLISHED", 12, 22)], True),
    ([SlirpConnection("SYN_SENT", 9, 22)], [SlirpConnection("ESTABLISHED", 9, 22)], True),
])
def test_verdict(before: list[SlirpConnection], now: list[SlirpConnection],
                 expected: bool | None) -> None:
    assert verdict(before, now, 22) is expected


def test_forward_for() -> None:
    forwards = (PortForward("udp", "127.0.0.9", 53, 53), PortForward("tcp", "127.0.0.9",
                                                                     30022, 22))
    assert forward_for(forwards, 22).port == 30022
    with pytest.raises(ProbeFailed, match="guest TCP port 53 is not forwarded"):
        forward_for(forwards, 53)


class FakeNat:
    """A listener standing for libslirp's forward: it accepts, then holds, closes or
    greets as told; the monitor answers from ``table``."""

    def __init__(self, behaviour: str) -> None:
        self.behaviour = behaviour
        self.table = TABLE.split("  TCP[SYN_SENT]")[0]
        self.port = 0

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self.behaviour == "refuse":
            writer.close()
            return
        if self.behaviour == "accept":
            self.table += row("ESTABLISHED", 17) + "\n"
        if self.behaviour == "banner":
            writer.write(b"SSH-2.0-OpenSSH_9.2\r\n")
            await writer.drain()
        await reader.read()  # hold ("silent") until the probe goes
        writer.close()

    async def monitor(self, command: str) -> str:
        assert command == "info usernet"
        return self.table


async def probe_against(behaviour: str, timeout: float) -> None:
    fake = FakeNat(behaviour)
    server = await asyncio.start_server(fake.serve, "127.0.0.1", 0)
    try:
        port = server.sockets[0].getsockname()[1]
        await check(fake.monitor, PortForward("tcp", "127.0.0.1", port, 22), timeout=timeout)
    finally:
        server.close()


@pytest.mark.parametrize(("behaviour", "outcome"), [
    ("accept", None), ("banner", None),
    ("refuse", "the guest refused TCP port 22"),
    ("silent", "the guest did not accept TCP port 22 within 0.3 s"),
])
def test_check(behaviour: str, outcome: str | None) -> None:
    if outcome is None:
        asyncio.run(probe_against(behaviour, 5))
    else:
        with pytest.raises(ProbeFailed, match=outcome):
            asyncio.run(probe_against(behaviour, 0.3))


@pytest.mark.parametrize(("body", "error"), [
    ({"tcpSocket": 0}, "tcpSocket: must be a port number from 1 to 65535"),
    ({"tcpSocket": "22"}, "tcpSocket: must be a port number from 1 to 65535"),
    ({"tcpSocket": True}, "tcpSocket: must be a port number from 1 to 65535"),
    ({"tcpSocket": 22, "guestAgentPing": True}, "tcpSocket: not with guestAgentPing or command"),
])
def test_bad_tcp_probe_requests(body: dict[str, object], error: str) -> None:
    line = protocol.encode({"cmd": "probe", "timeoutSeconds": 1, **body})
    assert protocol.parse_request(line=line) == protocol.BadRequest(error)


def test_a_tcp_probe_request() -> None:
    line = protocol.encode({"cmd": "probe", "timeoutSeconds": 2, "tcpSocket": 22})
    assert protocol.parse_request(line=line) == protocol.Request(
        cmd="probe", probe=protocol.ProbeRequest(timeout_seconds=2, tcp_port=22))
