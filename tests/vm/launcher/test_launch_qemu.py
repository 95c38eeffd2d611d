"""The launcher with its default driver (QEMU over QMP), booting real guests under TCG."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.fixtures.guests import MARKER, POWERBUTTON_MARKER, LinuxGuest
from tests.vm.launcher.harness import REPO, Launch, make_vmi
from vm.launcher import client

Factory = Callable[..., Launch]


def test_boot_sector_powers_off_and_launcher_exits_0(
    launch: Factory, boot_sectors: dict[str, Path]
) -> None:
    run = launch(make_vmi())
    run.add_disk("root", boot_sectors["poweroff"])
    assert run.start().wait() == 0, run.log()
    assert MARKER in run.console_text()
    term = run.termination()
    assert term["phase"] == "Succeeded" and term["reason"] == "GuestShutdown"
    assert not run.socket.exists()  # removed on exit
    assert not (run.private / "virt-serial0").exists()


def test_linux_guest_boots_on_every_bus(launch: Factory, linux_guest: LinuxGuest) -> None:
    disks = [
        {"name": "root", "disk": {"bus": "scsi"}, "bootOrder": 1},
        {"name": "data", "disk": {"bus": "sata"}},
        {"name": "extra", "disk": {"bus": "virtio"}},
    ]
    run = launch(make_vmi(memory="256Mi", disks=disks))
    run.add_disk("root", linux_guest.raw)
    run.add_disk("data", linux_guest.raw)
    run.add_disk("extra", linux_guest.raw)
    assert run.start().wait(240) == 0, run.log()
    assert MARKER in run.console_text()
    assert run.termination()["phase"] == "Succeeded"


def test_status_pause_unpause_and_kill(launch: Factory, boot_sectors: dict[str, Path]) -> None:
    run = launch(make_vmi())
    run.add_disk("root", boot_sectors["halt"])
    run.start()
    run.wait_for_console(MARKER)
    status = run.wait_for_state("running")
    assert status["driver"] == "qemu" and status["accelerator"] == "tcg"
    assert status["startedAt"]
    mode = os.stat(run.socket).st_mode & 0o777
    assert mode == 0o660
    assert run.request({"cmd": "pause"}) == {"ok": True}
    assert run.wait_for_state("paused")["reason"] == "PausedByUser"
    assert run.request({"cmd": "unpause"}) == {"ok": True}
    run.wait_for_state("running")
    [qemu] = run.qemu_pids()
    assert run.request({"cmd": "kill"}) == {"ok": True}
    assert run.wait() == 1
    assert not os.path.exists(f"/proc/{qemu}")
    term = run.termination()
    assert term["phase"] == "Failed" and term["reason"] == "Destroyed"


def test_shutdown_of_a_guest_ignoring_acpi_kills_after_grace(
    launch: Factory, boot_sectors: dict[str, Path]
) -> None:
    run = launch(make_vmi())
    run.add_disk("root", boot_sectors["halt"])
    run.start()
    run.wait_for_state("running")
    t0 = time.monotonic()
    assert run.request({"cmd": "shutdown", "gracePeriodSeconds": 2}) == {"ok": True}
    assert run.wait() == 1
    assert time.monotonic() - t0 >= 2  # not before the grace period
    assert run.termination()["reason"] == "Destroyed"


def test_acpi_shutdown_and_console_io(launch: Factory, linux_guest_wait: LinuxGuest) -> None:
    run = launch(make_vmi(memory="256Mi", grace=120))
    run.add_disk("root", linux_guest_wait.raw)
    run.start()
    run.wait_for_console(MARKER, timeout=180)
    first = client.attach_console(run.socket)
    second = client.attach_console(run.socket)  # the newest owns the input
    try:
        first.sendall(b"ignored-line\n")
        second.sendall(b"hello-console\n")
        run.wait_for_console("ECHO:hello-console", timeout=60)
        seen = b""
        first.settimeout(30)
        while b"ECHO:hello-console" not in seen:
            chunk = first.recv(4096)
            assert chunk, "console closed"
            seen += chunk
        assert "ECHO:ignored-line" not in run.console_text()
        assert run.request({"cmd": "shutdown", "gracePeriodSeconds": 120}) == {"ok": True}
        assert run.wait(180) == 0, run.log()
    finally:
        first.close()
        second.close()
    assert POWERBUTTON_MARKER in run.console_text()
    assert run.termination()["phase"] == "Succeeded"


def test_sigterm_is_a_graceful_shutdown(launch: Factory, linux_guest_wait: LinuxGuest) -> None:
    run = launch(make_vmi(memory="256Mi", grace=120))
    run.add_disk("root", linux_guest_wait.raw)
    run.start()
    run.wait_for_console(MARKER, timeout=180)
    assert run.proc is not None
    run.proc.send_signal(signal.SIGTERM)
    assert run.wait(180) == 0, run.log()
    assert POWERBUTTON_MARKER in run.console_text()


def test_qemu_crash_is_failed(launch: Factory, boot_sectors: dict[str, Path]) -> None:
    run = launch(make_vmi())
    run.add_disk("root", boot_sectors["halt"])
    run.start()
    run.wait_for_state("running")
    [qemu] = run.qemu_pids()
    os.kill(qemu, signal.SIGKILL)
    assert run.wait() == 1
    term = run.termination()
    assert term["phase"] == "Failed" and term["reason"] == "Crashed"
    assert "signal 9" in term["message"]


def test_bad_requests_are_answered_not_fatal(
    launch: Factory, boot_sectors: dict[str, Path]
) -> None:
    run = launch(make_vmi())
    run.add_disk("root", boot_sectors["halt"])
    run.start()
    run.wait_for_state("running")
    assert "unknown command" in run.request({"cmd": "reboot-the-world"})["error"]
    assert (
        "gracePeriodSeconds" in run.request({"cmd": "shutdown", "gracePeriodSeconds": "x"})["error"]
    )
    for raw in (b"not json\n", b"[1,2]\n", b"x" * 10000 + b"\n"):
        with socket.socket(socket.AF_UNIX) as s:
            s.settimeout(10)
            s.connect(str(run.socket))
            s.sendall(raw)
            answer = s.recv(4096)
            assert b'"ok":false' in answer, answer
    assert run.request({"cmd": "status"})["state"] == "running"


def test_empty_pvc_gets_a_sparse_disk_img(launch: Factory, boot_sectors: dict[str, Path]) -> None:
    disks = [
        {"name": "root", "disk": {"bus": "virtio"}, "bootOrder": 1},
        {"name": "blank", "disk": {"bus": "virtio"}},
    ]
    vmi = make_vmi(disks=disks)
    vmi["status"] = {
        "volumeStatus": [
            {
                "name": "blank",
                "persistentVolumeClaimInfo": {
                    "requests": {"storage": "64Mi"},
                    "capacity": {"storage": "100Mi"},
                },
            }
        ]
    }
    run = launch(vmi)
    run.add_disk("root", boot_sectors["poweroff"])
    blank = run.volume_dir("blank") / "disk.img"
    assert run.start().wait() == 0, run.log()
    st = blank.stat()
    assert st.st_size == 64 * 1024 * 1024
    assert st.st_blocks == 0


@pytest.mark.parametrize(
    ("mutate", "reason", "text"),
    [
        (
            lambda v: v["spec"]["domain"]["devices"]["disks"][0]["disk"].update(bus="ide"),
            "InvalidVMI",
            "spec.domain.devices.disks[0].disk.bus",
        ),
        (
            lambda v: v["spec"]["domain"].pop("resources"),
            "InvalidVMI",
            "spec.domain.resources.requests.memory",
        ),
        (
            lambda v: v["spec"]["volumes"][0].update(name="other"),
            "InvalidVMI",
            "spec.domain.devices.disks[0].name",
        ),
    ],
)
def test_bad_vmi_fails_naming_the_field(
    launch: Factory, mutate: Callable[[dict], None], reason: str, text: str
) -> None:
    vmi = make_vmi()
    mutate(vmi)
    run = launch(vmi)
    assert run.start().wait() == 1
    term = run.termination()
    assert term["phase"] == "Failed" and term["reason"] == reason
    assert text in term["message"]
    assert run.qemu_pids() == []


def test_missing_volume_fails(launch: Factory) -> None:
    run = launch(make_vmi())
    assert run.start().wait() == 1
    term = run.termination()
    assert term["reason"] == "VolumeNotFound"
    assert "spec.volumes[0]" in term["message"] and "pvc-root" in term["message"]


def test_qemu_dies_with_a_killed_launcher(launch: Factory, boot_sectors: dict[str, Path]) -> None:
    run = launch(make_vmi())
    run.add_disk("root", boot_sectors["halt"])
    run.start()
    run.wait_for_state("running")
    [qemu] = run.qemu_pids()
    assert run.proc is not None
    run.proc.kill()
    run.proc.wait(30)
    deadline = time.monotonic() + 30
    while os.path.exists(f"/proc/{qemu}") and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not os.path.exists(f"/proc/{qemu}")


def test_qemu_that_cannot_start_is_a_launch_failure(
    launch: Factory, tmp_path: Path, boot_sectors: dict[str, Path]
) -> None:
    fake = tmp_path / "qemu"
    fake.write_text("#!/bin/sh\necho 'qemu: could not load PC BIOS' >&2\nexit 1\n")
    fake.chmod(0o755)
    run = launch(make_vmi(), args=["--qemu-binary", str(fake)])
    run.add_disk("root", boot_sectors["poweroff"])
    assert run.start().wait() == 1
    term = run.termination()
    assert term["phase"] == "Failed" and term["reason"] == "LaunchFailed"
    assert "could not load PC BIOS" in term["message"]
    assert not run.socket.exists()


def test_missing_vmi_env_is_a_configuration_failure(tmp_path: Path) -> None:
    term = tmp_path / "term"
    env = {k: v for k, v in os.environ.items() if k != "VMI"}
    done = subprocess.run(
        [sys.executable, "-m", "vm.launcher", "--termination-log", str(term)],
        env=env,
        capture_output=True,
        timeout=60,
        cwd=REPO,
    )
    assert done.returncode == 2
    body = json.loads(term.read_text())
    assert body["phase"] == "Failed" and body["reason"] == "InvalidConfiguration"
    assert body["message"].startswith("VMI:")


def test_softreboot_without_an_agent_is_the_acpi_button_and_the_guest_boots_again(
    launch: Factory, linux_guest_wait: LinuxGuest
) -> None:
    run = launch(make_vmi(memory="256Mi", grace=120), env={"AGENT_POLL_SCALE": "0.05"})
    run.add_disk("root", linux_guest_wait.raw)
    run.start()
    run.wait_for_console(MARKER, timeout=180)
    assert client.guestinfo(run.socket)["connected"] is False  # this guest has no agent
    assert run.request({"cmd": "softreboot"}) == {"ok": True}
    deadline = time.monotonic() + 180
    while run.console_text().count(MARKER) < 2:  # powered off, reset, booted again
        assert time.monotonic() < deadline, run.console_text()[-2000:] + run.log()
        assert run.proc is not None and run.proc.poll() is None, run.log()
        time.sleep(0.1)
    assert POWERBUTTON_MARKER in run.console_text()
    assert run.wait_for_state("running")["state"] == "running"
    # and a shutdown afterwards still ends the launcher (QEMU quits on poweroff again)
    assert run.request({"cmd": "shutdown", "gracePeriodSeconds": 120}) == {"ok": True}
    assert run.wait(180) == 0, run.log()


def test_softreboot_refused_without_agent_and_acpi(
    launch: Factory, boot_sectors: dict[str, Path]
) -> None:
    vmi = make_vmi()
    vmi["spec"]["domain"]["features"] = {"acpi": {"enabled": False}}
    run = launch(vmi)
    run.add_disk("root", boot_sectors["halt"])
    run.start()
    run.wait_for_state("running")
    assert run.request({"cmd": "softreboot"}) == {
        "ok": False, "error": "VMI neither have the agent connected nor the ACPI feature enabled"}
