"""Both drivers as the kubelet runs the launcher: bubblewrap, uid 107 via setpriv, no
capabilities, no_new_privs; the pod's emptyDirs bound at upstream's paths."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.fixtures.guests import MARKER, POWERBUTTON_MARKER, LinuxGuest
from tests.vm.launcher import sandbox
from tests.vm.launcher.harness import Launch, make_vmi

Factory = Callable[..., Launch]

pytestmark = pytest.mark.skipif(not sandbox.available(), reason="needs root, bwrap and setpriv")


def _proc_status(pid: int) -> dict[str, str]:
    out = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        out[key] = value.strip()
    return out


def test_qemu_driver_runs_unprivileged(launch: Factory, boot_sectors: dict[str, Path]) -> None:
    run = launch(make_vmi(), sandbox=True)
    run.add_disk("root", boot_sectors["halt"])
    run.start()
    run.wait_for_console(MARKER)
    assert run.wait_for_state("running")["driver"] == "qemu"
    [qemu] = run.qemu_pids()
    status = _proc_status(qemu)
    assert status["Uid"].split() == ["107"] * 4
    assert status["Gid"].split() == ["107"] * 4
    assert status["CapEff"] == status["CapPrm"] == status["CapBnd"] == "0000000000000000"
    assert status["NoNewPrivs"] == "1"
    assert (run.sockets / f"{run.vmi['metadata']['uid']}.sock").stat().st_uid == 107
    assert run.request({"cmd": "kill"}) == {"ok": True}
    assert run.wait() == 1
    assert run.termination()["reason"] == "Destroyed"


@pytest.mark.parametrize("guest", ["bootsector", "linux"])
def test_libvirt_driver_boots(
    launch: Factory, boot_sectors: dict[str, Path], linux_guest: LinuxGuest, guest: str
) -> None:
    run = launch(make_vmi(memory="256Mi"), driver="libvirt", sandbox=True)
    run.add_disk("root", boot_sectors["poweroff"] if guest == "bootsector" else linux_guest.raw)
    assert run.start().wait(240) == 0, run.log()
    assert MARKER in run.console_text()
    term = run.termination()
    assert term == {**term, "phase": "Succeeded", "reason": "GuestShutdown", "driver": "libvirt"}


def test_libvirt_driver_shutdown_pause_and_state(
    launch: Factory, linux_guest_wait: LinuxGuest
) -> None:
    run = launch(make_vmi(memory="256Mi", grace=120), driver="libvirt", sandbox=True)
    run.add_disk("root", linux_guest_wait.raw)
    run.start()
    run.wait_for_console(MARKER, timeout=180)
    status = run.wait_for_state("running")
    assert status["driver"] == "libvirt" and status["accelerator"] == "tcg"
    [qemu] = run.qemu_pids()
    assert _proc_status(qemu)["Uid"].split()[0] == "107"
    assert run.request({"cmd": "pause"}) == {"ok": True}
    run.wait_for_state("paused")
    assert run.request({"cmd": "unpause"}) == {"ok": True}
    run.wait_for_state("running")
    assert run.request({"cmd": "shutdown", "gracePeriodSeconds": 120}) == {"ok": True}
    assert run.wait(180) == 0, run.log()
    assert POWERBUTTON_MARKER in run.console_text()
    assert run.termination()["phase"] == "Succeeded"


def test_libvirt_driver_kill_is_failed(launch: Factory, boot_sectors: dict[str, Path]) -> None:
    run = launch(make_vmi(), driver="libvirt", sandbox=True)
    run.add_disk("root", boot_sectors["halt"])
    run.start()
    run.wait_for_console(MARKER)
    run.wait_for_state("running")
    assert run.request({"cmd": "kill"}) == {"ok": True}
    assert run.wait() == 1
    assert run.termination()["reason"] == "Destroyed"


def test_block_volume_needs_the_pods_access_and_then_boots(
    launch: Factory, loop_with_boot_sector: str
) -> None:
    """A Block PVC appears as /dev/<volume> in the pod; uid 107 must be able to open it
    (upstream's 'Permission denied' crash loop, kubevirt#11002, becomes a clear failure)."""
    dev = loop_with_boot_sector
    os.chmod(dev, 0o600)
    refused = launch(make_vmi(), sandbox=True)
    assert refused.pod is not None
    refused.pod.dev_binds[dev] = "/dev/root"
    assert refused.start().wait() == 1
    term = refused.termination()
    assert term["reason"] == "DiskError"
    assert "/dev/root" in term["message"] and "Permission denied" in term["message"]
    os.chown(dev, 107, 107)
    run = launch(make_vmi(), sandbox=True)
    assert run.pod is not None
    run.pod.dev_binds[dev] = "/dev/root"
    assert run.start().wait() == 0, run.log()
    assert MARKER in run.console_text()
    assert run.termination()["phase"] == "Succeeded"


@pytest.mark.parametrize("driver", ["qemu", "libvirt"])
def test_start_strategy_paused_runs_nothing_until_unpaused(
    launch: Factory, boot_sectors: dict[str, Path], driver: str
) -> None:
    """``startStrategy: Paused`` (upstream's ``start --paused``): the domain is paused
    (PausedByUser) from the start and the guest prints nothing until unpause."""
    run = launch(make_vmi(startStrategy="Paused"), driver=driver, sandbox=True)
    run.add_disk("root", boot_sectors["halt"])
    run.start()
    status = run.wait_for_state("paused")
    assert status["reason"] == "PausedByUser" and status["driver"] == driver
    assert MARKER not in run.console_text()
    assert run.request({"cmd": "unpause"}) == {"ok": True}
    run.wait_for_state("running")
    run.wait_for_console(MARKER)
    assert run.request({"cmd": "kill"}) == {"ok": True}
    assert run.wait() == 1
