"""The launcher with a real guest agent: the small Linux guest of tests/fixtures/guests.py
(mode ``agent``) running Debian 12's real qemu-guest-agent on an ext4 root, booted under TCG
with either driver; the agent's facts, then a soft reboot through the agent that goes back
through the bootloader."""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable
from typing import Any

import pytest

from tests.fixtures.guests import AGENT_BOOT, LinuxGuest
from tests.vm.launcher.conftest import launch  # noqa: F401  (the launcher fixture)
from tests.vm.launcher.harness import Launch, make_vmi
from vm.launcher import client

FAST_POLL = {"AGENT_POLL_SCALE": "0.05"}  # ping each 0.1 s, groups from 0.5 s on
BOOT_WAIT = 120  # the small guest boots in seconds under TCG; a broken one fails in time


def wait_guestinfo(run: Launch, ok: Callable[[dict[str, Any]], bool], timeout: float,
                   ) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    info: dict[str, Any] = {}
    while time.monotonic() < deadline:
        info = client.guestinfo(run.socket)
        if ok(info):
            return info
        assert run.proc is not None and run.proc.poll() is None, run.log()
        time.sleep(0.2)
    raise AssertionError(f"guestinfo never as expected: {info}\n{run.console_text()[-3000:]}")


def boots(run: Launch) -> int:
    return run.console_text().count("SYSLINUX ")  # the bootloader's banner (a quiet kernel)


@pytest.mark.slow
@pytest.mark.parametrize("driver", ["qemu", "libvirt"])
def test_agent_facts_and_softreboot_through_the_agent(
    launch: Callable[..., Launch],  # noqa: F811
    linux_guest_agent: LinuxGuest,
    driver: str,
) -> None:
    if not shutil.which("qemu-system-x86_64"):
        pytest.fail("qemu-system-x86_64 is not installed")
    # libvirt's session daemon runs as the pod's uid 107 only (the pod sandbox)
    run = launch(make_vmi(memory="256Mi", grace=60), driver=driver, env=FAST_POLL,
                 sandbox=driver == "libvirt")
    run.add_disk("root", linux_guest_agent.raw)  # owned by the pod's uid when sandboxed
    run.start()
    run.wait_for_state("running")
    assert client.guestinfo(run.socket)["connected"] is False  # not booted yet
    info = wait_guestinfo(run, lambda i: bool(i["connected"] and i["interfaces"] and i["timezone"]),
                          BOOT_WAIT)
    assert info["os"]["id"] == "debian" and info["os"]["versionId"] == "12"
    assert info["guestAgentVersion"]
    assert {c["name"] for c in info["supportedCommands"]} >= {"guest-ping", "guest-shutdown"}
    assert info["timezone"].startswith("Etc/UTC, 0") or info["timezone"].startswith("UTC, 0")
    assert any(fs["mountPoint"] == "/" for fs in info["fsInfo"]["disks"])
    [domain_if] = info["domainInterfaces"]
    macs = {i["mac"]: i for i in info["interfaces"]}
    assert domain_if["mac"] in macs, (domain_if, info["interfaces"])
    assert boots(run) == 1
    assert f"{AGENT_BOOT} n=1" in run.console_text()  # printed before the agent starts
    assert run.request({"cmd": "softreboot"}) == {"ok": True}
    deadline = time.monotonic() + BOOT_WAIT
    while boots(run) < 2:
        assert time.monotonic() < deadline, run.console_text()[-3000:]
        assert run.proc is not None and run.proc.poll() is None, run.log()
        time.sleep(0.2)
    assert run.wait_for_state("running")
