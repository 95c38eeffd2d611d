"""The default driver: QEMU run directly, controlled over QMP with qemu.qmp.

Why it exists: it needs no daemon, no /sys, no privileges and no passwd entry, and it
starts as fast as QEMU by hand. The launcher listens on the QMP socket and QEMU connects
to it at start (``-chardev socket`` without ``server``), so nothing is polled. QEMU's
stderr is kept (last lines) for the failure reason.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import os
import shutil
import signal
from typing import Any

from qemu.qmp import QMPClient
from qemu.qmp.error import QMPError

from vm.domain import render_qemu
from vm.domain.model import Domain
from vm.launcher import tasks
from vm.launcher.agent import Agent, SocketAgent
from vm.launcher.driver import PDEATHSIG, DomainEnd, StateCallback
from vm.launcher.errors import DriverError

logger = logging.getLogger(__name__)

START_TIMEOUT = 30.0
STOP_TIMEOUT = 10.0
MAX_UNIX_PATH = 107


class QemuDriver:
    name = "qemu"

    def __init__(self, *, private_dir: str, qemu_binary: str = render_qemu.QEMU) -> None:
        self.private_dir = private_dir
        self.qemu_binary = qemu_binary
        self.qmp_path = os.path.join(private_dir, "qmp.sock")
        self._proc: asyncio.subprocess.Process | None = None
        self._qmp: QMPClient | None = None
        self._stderr: collections.deque[str] = collections.deque(maxlen=20)
        self._tasks: list[asyncio.Task[Any]] = []
        self._guest_shutdown = False
        self._destroyed = False
        self._crash: str | None = None
        self._rebooting = False
        self._on_state: StateCallback = lambda state, reason: None

    async def start(self, domain: Domain, on_state: StateCallback) -> None:
        self._on_state = on_state
        if len(self.qmp_path.encode()) > MAX_UNIX_PATH:
            raise DriverError(f"private dir too long for a unix socket: {self.qmp_path}")
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.qmp_path)
        self._qmp = QMPClient(domain.name)
        await self._qmp.start_server(self.qmp_path)
        argv = render_qemu.render(domain, qmp_socket=self.qmp_path, binary=self.qemu_binary)
        argv = [*PDEATHSIG, *argv] if shutil.which(PDEATHSIG[0]) else argv
        logger.debug("starting %s", argv)
        try:
            self._proc = await asyncio.create_subprocess_exec(
                *argv,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.DEVNULL,
                stderr=asyncio.subprocess.PIPE,
                start_new_session=True,
            )
        except OSError as err:
            raise DriverError(f"cannot run {self.qemu_binary}: {err.strerror}") from err
        self._tasks.append(asyncio.create_task(self._read_stderr()))
        accept = asyncio.create_task(self._qmp.accept())
        exited = asyncio.create_task(self._proc.wait())
        done, _ = await asyncio.wait(
            {accept, exited}, timeout=START_TIMEOUT, return_when=asyncio.FIRST_COMPLETED
        )
        if accept not in done:
            accept.cancel()
            with contextlib.suppress(BaseException):
                await accept
            if exited not in done:
                exited.cancel()
                await self.destroy()
                raise DriverError(f"QEMU did not connect to QMP within {START_TIMEOUT:g} s")
            await asyncio.sleep(0.05)  # let the stderr reader catch the last lines
            raise DriverError("QEMU failed to start: " + self._stderr_tail(), reason="LaunchFailed")
        exited.cancel()
        accept.result()
        self._tasks.append(asyncio.create_task(self._events()))
        if domain.start_paused:  # -S: the CPUs wait for cont
            on_state("paused", "PausedByUser")
        else:
            on_state("running", "Booted")

    def _stderr_tail(self) -> str:
        return " | ".join(self._stderr) or "(no output)"

    async def _read_stderr(self) -> None:
        assert self._proc is not None and self._proc.stderr is not None
        while line := await self._proc.stderr.readline():
            text = line.decode(errors="replace").rstrip()[:500]
            self._stderr.append(text)
            logger.warning("qemu: %s", text)

    async def _events(self) -> None:
        assert self._qmp is not None
        try:
            async for event in self._qmp.events:
                name = event["event"]
                raw: Any = event.get("data")
                data: dict[str, Any] = raw if isinstance(raw, dict) else {}
                logger.debug("QMP event %s %s", name, data)
                if name == "SHUTDOWN" and self._rebooting and data.get("guest"):
                    await self._reset_after_reboot()
                elif name == "SHUTDOWN":
                    self._guest_shutdown = bool(data.get("guest"))
                    self._on_state("shutdown", str(data.get("reason", "")))
                elif name == "STOP":
                    await self._stopped()
                elif name == "RESUME":
                    self._on_state("running", "Unpaused")
                elif name == "GUEST_PANICKED":
                    self._crash = "the guest panicked"
                    await self.destroy(crash=True)
        except (QMPError, asyncio.CancelledError, EOFError):
            return

    async def _stopped(self) -> None:
        assert self._qmp is not None
        try:
            status: Any = await self._qmp.execute("query-status")
        except QMPError:
            return
        run_state = status.get("status", "") if isinstance(status, dict) else ""
        if run_state in ("internal-error", "io-error", "guest-panicked"):
            self._crash = f"the guest stopped: {run_state}"
            self._on_state("crashed", run_state)
            await self.destroy(crash=True)
        elif run_state in ("paused", "prelaunch"):
            self._on_state("paused", "PausedByUser")

    async def wait(self) -> DomainEnd:
        assert self._proc is not None
        code = await self._proc.wait()
        await asyncio.sleep(0)  # let the event reader deliver a final SHUTDOWN
        if self._crash:
            return DomainEnd("crashed", self._crash)
        if self._destroyed:
            return DomainEnd("destroyed", "the domain was killed")
        if code == 0 and self._guest_shutdown:
            return DomainEnd("shutdown", "the guest powered off")
        how = f"signal {-code}" if code < 0 else f"exit code {code}"
        return DomainEnd("crashed", f"QEMU ended with {how}: {self._stderr_tail()}")

    async def _execute(self, cmd: str) -> None:
        if self._qmp is None:
            raise DriverError("QMP is not connected")
        try:
            await self._qmp.execute(cmd)
        except QMPError as err:
            raise DriverError(f"QMP {cmd} failed: {err}") from err

    async def reboot_acpi(self) -> None:
        """The power button with QEMU told to pause, not quit, on the guest's shutdown;
        that shutdown then resets and resumes the guest (libvirt's fake reboot)."""
        if self._qmp is None:
            raise DriverError("QMP is not connected")
        try:
            await self._qmp.execute("set-action", {"shutdown": "pause"})
            self._rebooting = True
            await self._qmp.execute("system_powerdown")
        except QMPError as err:
            raise DriverError(f"QMP reboot failed: {err}") from err

    async def _reset_after_reboot(self) -> None:
        assert self._qmp is not None
        self._rebooting = False
        try:
            await self._qmp.execute("system_reset")
            await self._qmp.execute("set-action", {"shutdown": "poweroff"})
            await self._qmp.execute("cont")
        except QMPError as err:
            logger.warning("reset after an ACPI reboot failed: %s", err)

    def agent(self, domain: Domain) -> Agent | None:
        return None if domain.agent is None else SocketAgent(domain.agent.socket_path)

    async def powerdown(self) -> None:
        await self._execute("system_powerdown")

    async def pause(self) -> None:
        await self._execute("stop")

    async def monitor(self, command: str) -> str:
        if self._qmp is None:
            raise DriverError("QMP is not connected")
        try:
            answer = await self._qmp.execute("human-monitor-command",
                                             {"command-line": command})
        except QMPError as err:
            raise DriverError(f"QMP human-monitor-command failed: {err}") from err
        return str(answer)

    async def resume(self) -> None:
        await self._execute("cont")

    async def destroy(self, *, crash: bool = False) -> None:
        if not crash:
            self._destroyed = True
        proc = self._proc
        if proc is not None and proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signal.SIGKILL)

    async def close(self) -> None:
        await self.destroy(crash=self._proc is not None and self._proc.returncode is not None)
        if self._proc is not None:
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._proc.wait(), STOP_TIMEOUT)
        await tasks.stop(self._tasks)
        if self._qmp is not None:
            with contextlib.suppress(Exception):
                await self._qmp.disconnect()
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.qmp_path)
