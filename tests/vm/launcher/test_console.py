"""The console log: bounded with one rotation, and followed across it; a client's input
held back while the guest does not read it."""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

from vm.launcher.console import ConsoleHub, RotatingLog
from vm.launcher.console_log import follow

REPO = Path(__file__).resolve().parents[3]


def test_rotating_log_keeps_at_most_two_files(tmp_path: Path) -> None:
    log = RotatingLog(str(tmp_path / "console.log"), max_bytes=100)
    for i in range(30):
        log.write(f"line {i:02d}\n".encode())
    log.close()
    current = (tmp_path / "console.log").read_bytes()
    previous = (tmp_path / "console.log.1").read_bytes()
    assert len(current) <= 100 and len(previous) <= 100
    assert current.endswith(b"line 29\n")
    assert (previous + current).endswith(
        b"".join(f"line {i:02d}\n".encode() for i in range(20, 30))
    )
    assert sorted(os.listdir(tmp_path)) == ["console.log", "console.log.1"]


def test_follow_prints_rotated_and_new_output(tmp_path: Path) -> None:
    path = tmp_path / "console.log"
    log = RotatingLog(str(path), max_bytes=40)
    log.write(b"first-part-of-the-boot\n")
    r, w = os.pipe()

    def writer() -> None:
        time.sleep(0.5)
        log.write(b"second-part-rotates-the-file\n")
        time.sleep(0.5)
        log.write(b"third\n")

    t = threading.Thread(target=writer)
    t.start()
    follow(str(path), out=w, stop_after=2.5)
    t.join()
    os.close(w)
    with os.fdopen(r, "rb") as f:
        got = f.read()
    assert got == b"first-part-of-the-boot\nsecond-part-rotates-the-file\nthird\n"


def test_console_log_command_no_follow(tmp_path: Path) -> None:
    (tmp_path / "console.log").write_bytes(b"hello from the guest\n")
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "vm.launcher.console_log",
            "--no-follow",
            str(tmp_path / "console.log"),
        ],
        capture_output=True,
        timeout=60,
        cwd=REPO,
        check=True,
    )
    assert out.stdout == b"hello from the guest\n"


def test_sigterm_prints_what_the_guest_wrote_since_the_last_poll(tmp_path: Path) -> None:
    """A guest that prints and powers off at once: its pod goes, and the sidecar gets
    SIGTERM before its next poll. What the guest wrote last is printed, and the sidecar
    ends with 0 (upstream's virt-tail ends cleanly on SIGTERM), not 143."""
    import signal

    log = tmp_path / "console.log"
    log.write_bytes(b"booting\n")
    proc = subprocess.Popen([sys.executable, "-m", "vm.launcher.console_log", str(log)],
                            stdout=subprocess.PIPE, cwd=REPO)
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline() == b"booting\n"  # it follows the log now
        with log.open("ab") as f:
            f.write(b"MARKER and power off\n")
        proc.send_signal(signal.SIGTERM)  # well within the 0.2 s poll
        rest, _ = proc.communicate(timeout=30)
    finally:
        proc.kill()
        proc.wait()
    assert rest == b"MARKER and power off\n"
    assert proc.returncode == 0


def test_input_waits_for_a_guest_that_does_not_read(tmp_path: Path) -> None:
    """The attack: the guest stops reading COM1 (so QEMU stops reading the socket) and an
    attached client pastes without end. The hub reads the client's input only as fast
    as the guest takes it: the client is held back after a few socket buffers, and what
    waits for the guest stays bounded, instead of the launcher's memory filling up."""
    async def run() -> tuple[int, int]:
        loop = asyncio.get_running_loop()
        hub = ConsoleHub(RotatingLog(str(tmp_path / "console.log")))
        hub_guest, qemu = socket.socketpair()  # "QEMU" never reads
        hub_client, user = socket.socketpair()
        g_reader, g_writer = await asyncio.open_connection(sock=hub_guest)
        c_reader, c_writer = await asyncio.open_connection(sock=hub_client)
        guest = asyncio.create_task(hub.serve_guest(g_reader, g_writer))
        await hub.guest_connected.wait()
        client = asyncio.create_task(hub.attach(c_reader, c_writer))
        user.setblocking(False)
        sent, chunk, deadline = 0, b"x" * 65536, loop.time() + 3
        while loop.time() < deadline and sent < 64 * 2**20:
            try:
                sent += user.send(chunk)
            except BlockingIOError:
                await asyncio.sleep(0.01)
        queued = g_writer.transport.get_write_buffer_size()
        for task in (client, guest):
            task.cancel()
        hub.close()
        for s in (qemu, user):
            s.close()
        return sent, queued

    sent, queued = asyncio.run(run())
    assert sent < 8 * 2**20, sent
    assert queued <= 2**20, queued
