"""The guest of the agent tests that boot one: the small Linux guest running Debian 12's
real qemu-guest-agent (tests/fixtures/guests.py, mode ``agent``), looked up once a session."""

from __future__ import annotations

import pytest

from tests.fixtures.guests import GuestBuilder, LinuxGuest


@pytest.fixture(scope="session")
def linux_guest_agent() -> LinuxGuest:
    return GuestBuilder().linux(mode="agent")
