"""The deadline's own rule, on a socket pair: a connection opened once the deadline has
passed is shut as it is handed over (the loopback registry tests cover a read blocked
when it passes)."""

from __future__ import annotations

import socket

from ociregistry.deadline import Deadline


def test_a_connection_opened_after_the_deadline_is_shut_at_once() -> None:
    ours, peer = socket.socketpair()
    with ours, peer, Deadline(0.0) as deadline:
        deadline._timer.join(10)  # the timer has fired (it is the deadline's own)
        assert deadline.passed
        deadline.track(ours)
        peer.settimeout(10)
        assert peer.recv(1) == b""  # the end of the stream, at once
