"""A ``tcpSocket`` probe that answers whether the *guest* accepts, not QEMU's NAT.

Why it exists: QEMU's user network (libslirp) accepts a connection to a forwarded port
on the host side at once and only then opens the guest side, so a plain connect — the
kubelet's tcpSocket probe — succeeds even when nothing listens in the guest, or before
the guest has a network at all. Upstream's masquerade NAT hands the SYN to the guest, so
its probe fails then. Here the launcher connects to the forward, then reads QEMU's own
table of slirp connections (HMP ``info usernet``) until the new guest-side connection is
``ESTABLISHED`` (pass), or slirp closes ours (the guest refused: fail), or the probe's
timeout passes (no answer: fail). The table parse is pure; the loop is bounded.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass

from vm.domain.model import PortForward

POLL_SECONDS = 0.05
ACCEPTED = frozenset({"ESTABLISHED", "CLOSE_WAIT", "FIN_WAIT_1", "FIN_WAIT_2", "CLOSING",
                      "LAST_ACK", "TIME_WAIT"})
"""States a guest-side connection reaches only after the guest answered the SYN."""

_ROW = re.compile(r"^\s*TCP\[(?P<state>[A-Z_0-9]+)\]\s+(?P<fd>-?\d+)\s+\S+\s+\d+\s+\S+"
                  r"\s+(?P<dport>\d+)\s")


class ProbeFailed(Exception):
    """The guest port did not accept; the message says what happened."""


@dataclass(frozen=True)
class SlirpConnection:
    state: str
    fd: int
    guest_port: int


def connections(table: str) -> list[SlirpConnection]:
    """The TCP rows of ``info usernet`` (forward listeners excluded)."""
    out = []
    for line in table.splitlines():
        match = _ROW.match(line)
        if match and match["state"] != "HOST_FORWARD":
            out.append(SlirpConnection(match["state"], int(match["fd"]), int(match["dport"])))
    return out


def verdict(before: Iterable[SlirpConnection], now: Iterable[SlirpConnection],
            guest_port: int) -> bool | None:
    """True once a connection to ``guest_port`` that was not accepted ``before`` is past
    the guest's SYN-ACK (one pending before that got accepted since also counts: the
    guest accepts on the port); None while none is (yet)."""
    accepted_before = {c.fd for c in before if c.guest_port == guest_port
                       and c.state in ACCEPTED}
    for c in now:
        if c.guest_port == guest_port and c.state in ACCEPTED and c.fd not in accepted_before:
            return True
    return None


def forward_for(forwards: Iterable[PortForward], guest_port: int) -> PortForward:
    for f in forwards:
        if f.protocol == "tcp" and f.guest_port == guest_port:
            return f
    raise ProbeFailed(f"guest TCP port {guest_port} is not forwarded to the pod")


async def check(monitor: Callable[[str], Awaitable[str]], forward: PortForward, *,
                timeout: float, clock: Callable[[], float] = time.monotonic) -> None:
    """Pass (return) when the guest accepts on ``forward``'s port within ``timeout``."""
    deadline = clock() + timeout
    before = connections(await monitor("info usernet"))
    try:
        async with asyncio.timeout(max(0.0, deadline - clock())):
            reader, writer = await asyncio.open_connection(forward.address, forward.port)
    except (OSError, TimeoutError) as err:
        raise ProbeFailed(f"dial tcp {forward.address}:{forward.port}: {err}") from err
    try:
        while True:
            if verdict(before, connections(await monitor("info usernet")),
                       forward.guest_port):
                return
            if reader.at_eof() or writer.is_closing():
                raise ProbeFailed(f"the guest refused TCP port {forward.guest_port}")
            left = deadline - clock()
            if left <= 0:
                raise ProbeFailed(f"the guest did not accept TCP port {forward.guest_port}"
                                  f" within {timeout:g} s")
            with contextlib.suppress(TimeoutError):
                # wakes early when slirp closes our side (the guest's RST)
                async with asyncio.timeout(min(POLL_SECONDS, left)):
                    data = await reader.read(1)
                    if not data:
                        raise ProbeFailed(f"the guest refused TCP port {forward.guest_port}")
                    return  # the guest spoke first (a banner): it accepted
    finally:
        writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()
