"""The libvirt driver: a per-pod, unprivileged ``libvirtd`` in session mode, as upstream
runs one (virtqemud) per launcher pod, driven with libvirt-python.

Why it exists: it is upstream's way and what a cluster operator may expect to inspect
(``virsh -c qemu+unix:///session?socket=…``). The daemon lives entirely in the pod's
private dir (HOME and the XDG dirs point there), logs QEMU's stdio to a file instead of
virtlogd, and ends with the launcher. Lifecycle events arrive on the asyncio loop
through libvirt's own asyncio event implementation (libvirtaio). The daemon must run as
a non-root user with a passwd entry (root would be the system daemon); on these hosts it
also needs /sys. Upstream's image has that entry (qemu, uid 107); a pod here shares the
host's /etc, which may not, so the daemon then gets one from nss_wrapper (LD_PRELOAD, a
passwd and group file in the private dir), as images for arbitrary uids do.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
import pwd
import shutil
import subprocess
from typing import Any

import libvirt
import libvirt_qemu
import libvirtaio

from vm.domain import render_libvirt
from vm.domain.model import Domain
from vm.launcher.agent import Agent, AgentCommandError, AgentError, parse_answer, request_line
from vm.launcher.driver import PDEATHSIG, DomainEnd, StateCallback
from vm.launcher.errors import DriverError, is_invalid_operation, is_not_found

logger = logging.getLogger(__name__)
# libvirtaio logs every timer and handle update at DEBUG: noise, not the launcher's story
logging.getLogger("virEventAsyncIOImpl").setLevel(logging.INFO)

START_TIMEOUT = 60.0
STOP_TIMEOUT = 10.0
MONITOR_TIMEOUT = 10.0
"""Seconds a human-monitor command through libvirt may take."""
QEMU_CONF = 'stdio_handler = "file"\n'
NSS_WRAPPER = ("/usr/lib/x86_64-linux-gnu/libnss_wrapper.so", "/usr/lib64/libnss_wrapper.so",
               "/usr/lib/libnss_wrapper.so")


def user_record_env(*, root: str, uid: int, gid: int,
                    libraries: tuple[str, ...] = NSS_WRAPPER) -> dict[str, str]:
    """The environment that gives libvirtd a passwd entry for ``uid`` when the system
    has none (nss_wrapper over files in ``root``); empty when the system has one."""
    try:
        pwd.getpwuid(uid)
        return {}
    except KeyError:
        pass
    lib = next((p for p in libraries if os.path.exists(p)), None)
    if lib is None:
        raise DriverError(f"uid {uid} has no passwd entry, which libvirtd needs, and "
                          "nss_wrapper (libnss-wrapper) is not installed to provide one")
    passwd = os.path.join(root, "passwd")
    group = os.path.join(root, "group")
    home = os.path.join(root, "home")
    with open(passwd, "w", encoding="ascii") as f:
        f.write(f"qemu:x:{uid}:{gid}:qemu:{home}:/bin/false\n")
    with open(group, "w", encoding="ascii") as f:
        f.write(f"qemu:x:{gid}:\n")
    return {"LD_PRELOAD": lib, "NSS_WRAPPER_PASSWD": passwd, "NSS_WRAPPER_GROUP": group}
_event_impl: Any = None


def _ensure_event_impl(loop: asyncio.AbstractEventLoop) -> None:
    global _event_impl
    if _event_impl is None:
        _event_impl = libvirtaio.virEventRegisterAsyncIOImpl(loop=loop)


def _silence(_ctx: object, _err: object) -> None:
    """libvirt prints every error to stderr by default; they are raised and logged here."""


class LibvirtDriver:
    name = "libvirt"

    def __init__(self, *, private_dir: str, libvirtd_binary: str = "libvirtd") -> None:
        self.root = os.path.join(private_dir, "libvirt")
        self.libvirtd_binary = libvirtd_binary
        self.env = {
            "PATH": os.environ.get("PATH", "/usr/sbin:/usr/bin:/sbin:/bin"),
            "HOME": os.path.join(self.root, "home"),
            "XDG_RUNTIME_DIR": os.path.join(self.root, "run"),
            "XDG_CONFIG_HOME": os.path.join(self.root, "config"),
            "XDG_CACHE_HOME": os.path.join(self.root, "cache"),
        }
        self.socket = os.path.join(self.env["XDG_RUNTIME_DIR"], "libvirt", "libvirt-sock")
        self._daemon: subprocess.Popen[bytes] | None = None
        self._conn: Any = None
        self._dom: Any = None
        self._ended: asyncio.Future[DomainEnd] | None = None
        self._destroyed = False
        self._callback_id: int | None = None
        self._tasks: set[asyncio.Future[None]] = set()
        self._on_state: StateCallback = lambda state, reason: None

    def _prepare_dirs(self) -> None:
        for key in ("HOME", "XDG_RUNTIME_DIR", "XDG_CONFIG_HOME", "XDG_CACHE_HOME"):
            os.makedirs(self.env[key], mode=0o700, exist_ok=True)
            os.chmod(self.env[key], 0o700)
        conf_dir = os.path.join(self.env["XDG_CONFIG_HOME"], "libvirt")
        os.makedirs(conf_dir, mode=0o700, exist_ok=True)
        with open(os.path.join(conf_dir, "qemu.conf"), "w") as f:
            f.write(QEMU_CONF)

    async def _start_daemon(self) -> None:
        if os.geteuid() == 0:
            raise DriverError(
                "the libvirt driver runs a session libvirtd and needs a non-root "
                "user (the launcher pod runs as uid 107)"
            )
        self._prepare_dirs()
        env = {**self.env, **user_record_env(root=self.root, uid=os.getuid(),
                                             gid=os.getgid())}
        log = open(os.path.join(self.root, "libvirtd.log"), "ab")  # noqa: SIM115
        try:
            self._daemon = subprocess.Popen(
                [*(PDEATHSIG if shutil.which(PDEATHSIG[0]) else ()), self.libvirtd_binary],
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                start_new_session=True,
            )
        except OSError as err:
            raise DriverError(f"cannot run {self.libvirtd_binary}: {err.strerror}") from err
        finally:
            log.close()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + START_TIMEOUT
        while not os.path.exists(self.socket):
            if self._daemon.poll() is not None:
                raise DriverError(
                    f"libvirtd exited with code {self._daemon.returncode}: "
                    + self._tail("libvirtd.log")
                )
            if loop.time() > deadline:
                raise DriverError(f"libvirtd did not listen within {START_TIMEOUT:g} s")
            await asyncio.sleep(0.02)

    def _tail(self, name: str, lines: int = 5) -> str:
        try:
            with open(os.path.join(self.root, name), "rb") as f:
                text = f.read()[-4000:].decode(errors="replace")
        except OSError:
            return "(no log)"
        return " | ".join(text.strip().splitlines()[-lines:])

    async def start(self, domain: Domain, on_state: StateCallback) -> None:
        self._on_state = on_state
        loop = asyncio.get_running_loop()
        _ensure_event_impl(loop)
        libvirt.registerErrorHandler(_silence, None)
        self._ended = loop.create_future()
        await self._start_daemon()
        uri = f"qemu+unix:///session?socket={self.socket}"
        xml = render_libvirt.to_xml(domain)
        try:
            self._conn = await asyncio.to_thread(libvirt.open, uri)
            self._dom = await asyncio.to_thread(self._conn.defineXML, xml)
            self._callback_id = self._conn.domainEventRegisterAny(
                self._dom, libvirt.VIR_DOMAIN_EVENT_ID_LIFECYCLE, self._lifecycle, None
            )
            await asyncio.to_thread(
                self._dom.createWithFlags,
                libvirt.VIR_DOMAIN_START_PAUSED if domain.start_paused else 0)
        except libvirt.libvirtError as err:
            qemu_log = os.path.join("cache", "libvirt", "qemu", "log", f"{domain.name}.log")
            raise DriverError(
                f"libvirt could not start the domain: {err.get_error_message()} "
                f"(QEMU: {self._tail(qemu_log, 3)})",
                reason="LaunchFailed",
            ) from err
        if domain.start_paused:
            on_state("paused", "PausedByUser")
        else:
            on_state("running", "Booted")

    def _lifecycle(self, _conn: Any, _dom: Any, event: int, detail: int, _opaque: Any) -> None:
        logger.debug("libvirt lifecycle event %d detail %d", event, detail)
        if event == libvirt.VIR_DOMAIN_EVENT_SUSPENDED:
            if detail in (
                libvirt.VIR_DOMAIN_EVENT_SUSPENDED_IOERROR,
                libvirt.VIR_DOMAIN_EVENT_SUSPENDED_API_ERROR,
            ):
                self._on_state("crashed", "GuestError")
                task = asyncio.ensure_future(self._destroy_crashed(f"the guest stopped ({detail})"))
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)
            else:
                self._on_state("paused", "PausedByUser")
        elif event == libvirt.VIR_DOMAIN_EVENT_RESUMED:
            self._on_state("running", "Unpaused")
        elif event == libvirt.VIR_DOMAIN_EVENT_STOPPED:
            self._finish(detail)
        elif event == libvirt.VIR_DOMAIN_EVENT_CRASHED:
            self._on_state("crashed", "Crashed")

    def _finish(self, detail: int) -> None:
        if self._ended is None or self._ended.done():
            return
        if detail == libvirt.VIR_DOMAIN_EVENT_STOPPED_SHUTDOWN:
            end = DomainEnd("shutdown", "the guest powered off")
        elif detail == libvirt.VIR_DOMAIN_EVENT_STOPPED_DESTROYED and self._destroyed:
            end = DomainEnd("destroyed", "the domain was killed")
        else:
            end = DomainEnd(
                "crashed",
                f"the domain stopped unexpectedly (libvirt detail {detail}): "
                + self._tail("libvirtd.log", 2),
            )
        self._ended.set_result(end)

    async def _destroy_crashed(self, why: str) -> None:
        if self._ended is not None and not self._ended.done():
            self._ended.set_result(DomainEnd("crashed", why))
        await self._call("destroy", quiet=True)

    async def wait(self) -> DomainEnd:
        assert self._ended is not None
        waiter = asyncio.ensure_future(asyncio.shield(self._ended))
        while True:  # the daemon dying must also end the wait
            done, _ = await asyncio.wait({waiter}, timeout=1.0)
            if done:
                return waiter.result()
            if self._daemon is not None and self._daemon.poll() is not None:
                waiter.cancel()
                return DomainEnd("crashed", f"libvirtd exited with code {self._daemon.returncode}")

    async def _call(self, method: str, *args: Any, quiet: bool = False) -> None:
        if self._dom is None:
            raise DriverError("no domain")
        try:
            await asyncio.to_thread(getattr(self._dom, method), *args)
        except libvirt.libvirtError as err:
            if quiet and (is_invalid_operation(err) or is_not_found(err)):
                return
            raise DriverError(f"libvirt {method} failed: {err.get_error_message()}") from err

    async def reboot_acpi(self) -> None:
        await self._call("reboot", libvirt.VIR_DOMAIN_REBOOT_ACPI_POWER_BTN)

    def agent(self, domain: Domain) -> Agent | None:
        return None if domain.agent is None or self._dom is None else LibvirtAgent(self._dom)

    async def powerdown(self) -> None:
        await self._call("shutdownFlags", libvirt.VIR_DOMAIN_SHUTDOWN_ACPI_POWER_BTN)

    async def pause(self) -> None:
        await self._call("suspend")

    async def resume(self) -> None:
        await self._call("resume")

    async def monitor(self, command: str) -> str:
        if self._dom is None:
            raise DriverError("the domain is not defined")
        try:
            answer = await asyncio.wait_for(asyncio.to_thread(
                libvirt_qemu.qemuMonitorCommand, self._dom, command,
                libvirt_qemu.VIR_DOMAIN_QEMU_MONITOR_COMMAND_HMP), MONITOR_TIMEOUT)
        except TimeoutError as err:
            raise DriverError(f"libvirt did not answer the monitor command in"
                              f" {MONITOR_TIMEOUT:g} s") from err
        except libvirt.libvirtError as err:
            raise DriverError(f"monitor command through libvirt: {err.get_error_message()}"
                              ) from err
        return str(answer)

    async def destroy(self) -> None:
        self._destroyed = True
        await self._call("destroy", quiet=True)

    async def close(self) -> None:
        if self._dom is not None:
            with contextlib.suppress(DriverError):
                await self._call("destroy", quiet=True)
            with contextlib.suppress(libvirt.libvirtError):
                await asyncio.to_thread(self._dom.undefineFlags, libvirt.VIR_DOMAIN_UNDEFINE_NVRAM)
        if self._conn is not None:
            if self._callback_id is not None:
                with contextlib.suppress(libvirt.libvirtError):
                    self._conn.domainEventDeregisterAny(self._callback_id)
            with contextlib.suppress(libvirt.libvirtError):
                await asyncio.to_thread(self._conn.close)
            self._conn = None
        if self._daemon is not None and self._daemon.poll() is None:
            self._daemon.terminate()
            try:
                await asyncio.to_thread(self._daemon.wait, STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                self._daemon.kill()
                await asyncio.to_thread(self._daemon.wait, STOP_TIMEOUT)


class LibvirtAgent:
    """The guest agent through libvirt, which owns the channel
    (``libvirt_qemu.qemuAgentCommand``; libvirt syncs and bounds the answer)."""

    def __init__(self, dom: Any) -> None:
        self.dom = dom

    async def execute(
        self, command: str, arguments: dict[str, Any] | None = None, *, timeout: float
    ) -> Any:
        if command == "guest-shutdown":  # no answer when it works: libvirt's own call
            if (arguments or {}).get("mode") == "reboot":
                call = functools.partial(self.dom.reboot, libvirt.VIR_DOMAIN_REBOOT_GUEST_AGENT)
            else:
                call = functools.partial(self.dom.shutdownFlags,
                                         libvirt.VIR_DOMAIN_SHUTDOWN_GUEST_AGENT)
            try:
                await asyncio.wait_for(asyncio.to_thread(call), timeout + 1)
            except TimeoutError as err:
                raise AgentError(f"the agent did not take {command} in {timeout:g} s") from err
            except libvirt.libvirtError as err:
                raise AgentError(f"guest agent through libvirt: {err.get_error_message()}"
                                 ) from err
            return None
        line = request_line(command, arguments).decode()
        try:
            answer = await asyncio.wait_for(
                asyncio.to_thread(libvirt_qemu.qemuAgentCommand, self.dom, line,
                                  max(1, int(timeout)), 0),
                timeout + 1)
        except TimeoutError as err:
            raise AgentError(f"the agent did not answer {command} in {timeout:g} s") from err
        except libvirt.libvirtError as err:
            message = str(err.get_error_message())
            if "has been disabled" in message or "not found" in message.lower():
                raise AgentCommandError("CommandNotFound", message) from err
            raise AgentError(f"guest agent through libvirt: {message}") from err
        if answer is None:
            return None
        return parse_answer(str(answer).encode()[:4 * 1024 * 1024])

    async def close(self) -> None:
        return None
