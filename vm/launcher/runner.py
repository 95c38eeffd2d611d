"""The launcher's life: prepare, build, start, serve, end with the guest.

Why it exists: this is where a request or an event gets its meaning, the same for both
drivers. Ending rules (as upstream's virt-handler reads a libvirt domain's state):
the guest powering off is Succeeded; a domain destroyed while ACPI is on (a kill, or a
shutdown whose grace period ran out) is Failed, without ACPI Succeeded; a crash is
Failed. SIGTERM is a graceful shutdown with the VMI's termination grace period.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import logging
import os
import shutil
import signal

from vm import nodeports
from vm.domain.builder import build_spec
from vm.domain.configurators import network
from vm.domain.errors import DomainError
from vm.domain.model import Domain, Interface, PortForward
from vm.domain.options import BuildOptions, Ovmf
from vm.domain.vmi import VmiSpec, parse_vmi
from vm.launcher import accel, cloudinit, disks, guest_probe, protocol, scratch, tasks, tcp_probe
from vm.launcher.agent import AgentError
from vm.launcher.agent_poller import AgentPoller, Intervals
from vm.launcher.config import LauncherConfig
from vm.launcher.console import ConsoleHub, RotatingLog
from vm.launcher.control import ControlServer
from vm.launcher.driver import DomainEnd, Driver, make_driver
from vm.launcher.errors import DriverError, LauncherError
from vm.launcher.termination import Outcome

logger = logging.getLogger(__name__)

OVMF_DIR = "/usr/share/OVMF"


def find_ovmf(directory: str = OVMF_DIR) -> Ovmf | None:
    """Debian's ``ovmf`` package layout (4M builds preferred, as libvirt's descriptors)."""
    for suffix in ("_4M", ""):
        code = os.path.join(directory, f"OVMF_CODE{suffix}.fd")
        vars_ = os.path.join(directory, f"OVMF_VARS{suffix}.fd")
        if os.path.exists(code) and os.path.exists(vars_):
            secure = os.path.join(directory, f"OVMF_CODE{suffix}.secboot.fd")
            return Ovmf(
                code=code,
                secure_code=secure if os.path.exists(secure) else None,
                vars_template=vars_,
            )
    return None


def outcome_for(end: DomainEnd, *, acpi: bool) -> Outcome:
    if end.kind == "shutdown":
        return Outcome("Succeeded", "GuestShutdown", end.detail)
    if end.kind == "destroyed":
        if acpi:
            return Outcome(
                "Failed", "Destroyed", end.detail + " (ACPI was on: not a clean shutdown)"
            )
        return Outcome("Succeeded", "Destroyed", end.detail)
    return Outcome("Failed", "Crashed", end.detail)


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class Supervisor:
    """Owns the driver, the console and the control socket of one VMI."""

    def __init__(
        self, config: LauncherConfig, spec: VmiSpec, driver: Driver, accelerator: str
    ) -> None:
        self.config = config
        self.spec = spec
        self.driver = driver
        self.accelerator = accelerator
        self.state: protocol.State = "starting"
        self.reason = "Starting"
        self.started_at: str | None = None
        self._grace_task: asyncio.Task[None] | None = None
        self.poller: AgentPoller | None = None
        self.domain_interfaces: list[dict[str, str]] = []
        self.forwards: tuple[PortForward, ...] = ()
        """The domain's inbound forwards (a tcpSocket probe dials its port's), and those
        opened on request since."""
        self.interfaces: tuple[Interface, ...] = ()
        self._forward_lock = asyncio.Lock()

    def on_state(self, state: protocol.State, reason: str) -> None:
        logger.info("domain %s (%s)", state, reason)
        self.state, self.reason = state, reason

    def status(self) -> protocol.Status:
        return protocol.Status(
            state=self.state,
            reason=self.reason,
            driver=self.driver.name,
            accelerator=self.accelerator,
            started_at=self.started_at,
        )

    def _require_live(self) -> None:
        if self.state not in ("running", "paused"):
            raise DriverError(f"the domain is {self.state}")

    async def shutdown(self, grace_period_seconds: int | None) -> None:
        grace = (
            self.spec.grace_period_seconds if grace_period_seconds is None else grace_period_seconds
        )
        self._require_live()
        if self.spec.acpi and grace > 0:
            if self.state == "paused":
                await self.driver.resume()
            await self.driver.powerdown()
        if self._grace_task is None or grace == 0:
            if self._grace_task is not None:
                self._grace_task.cancel()
            self._grace_task = asyncio.create_task(self._kill_after(grace))

    async def _kill_after(self, grace: int) -> None:
        await asyncio.sleep(grace)
        logger.info("grace period of %d s over: killing the domain", grace)
        await self.driver.destroy()

    def guestinfo(self) -> dict[str, object]:
        """The guest agent's facts (``connected`` false without an agent) and the
        domain's interfaces (``name``, ``mac``) to match the guest's ones by MAC."""
        facts = self.poller.facts.to_json() if self.poller else {"connected": False}
        return {**facts, "domainInterfaces": self.domain_interfaces}

    async def softreboot(self) -> None:
        """Through the agent when it is connected, else the ACPI power button (as
        upstream's SoftRebootVMI)."""
        self._require_live()
        if self.state == "paused":
            raise DriverError("VMI is paused")
        if self.poller is not None and self.poller.facts.connected:
            try:
                await self.poller.agent.execute("guest-shutdown", {"mode": "reboot"},
                                                timeout=self.poller.intervals.timeout)
                return
            except AgentError as err:
                raise DriverError(f"the guest agent could not reboot the guest: {err}") from err
        if not self.spec.acpi:
            raise DriverError("VMI neither have the agent connected nor the ACPI feature enabled")
        await self.driver.reboot_acpi()

    async def probe(self, request: protocol.ProbeRequest) -> None:
        """A VMI probe through the guest agent (see :mod:`vm.launcher.guest_probe`), or of
        a guest TCP port through QEMU's NAT (:mod:`vm.launcher.tcp_probe`)."""
        self._require_live()
        if request.tcp_port is not None:
            try:
                forward = tcp_probe.forward_for(self.forwards, request.tcp_port)
                await tcp_probe.check(self.driver.monitor, forward,
                                      timeout=request.timeout_seconds)
            except tcp_probe.ProbeFailed as err:
                raise DriverError(str(err)) from err
            return
        if self.poller is None:
            raise DriverError("the VMI has no guest agent channel")
        try:
            await guest_probe.run(self.poller.agent, command=request.command,
                                  guest_agent_ping=request.guest_agent_ping,
                                  timeout=request.timeout_seconds)
        except guest_probe.ProbeFailed as err:
            raise DriverError(str(err)) from err

    async def forward(self, request: protocol.ForwardRequest) -> dict[str, object]:
        """Open a forward of a guest port the VMI does not list, when it lists none
        (upstream forwards every port then): QEMU's ``hostfwd_add`` on the first
        interface's user network, at the pod IP where a listed port would be."""
        self._require_live()
        if not self.interfaces:
            raise DriverError("the VMI has no pod network interface")
        iface = self.interfaces[0]
        try:
            fwd = network.on_demand(iface, protocol=request.protocol,
                                    guest_port=request.port, pod_ip=self.config.pod_ip or "",
                                    unprivileged_start=nodeports.unprivileged_port_start(),
                                    taken=self.forwards)
        except DomainError as err:
            raise DriverError(str(err)) from err
        if fwd not in self.forwards:
            async with self._forward_lock:
                if fwd not in self.forwards:
                    rule = f"{fwd.protocol}:{fwd.address}:{fwd.port}-{iface.guest}:{fwd.guest_port}"
                    said = (await self.driver.monitor(f"hostfwd_add {iface.netdev} {rule}"))
                    if said.strip():
                        raise DriverError(f"hostfwd_add {rule}: {said.strip()[:300]}")
                    logger.info("forwarded %s/%d from %s:%d on request", fwd.protocol,
                                fwd.guest_port, fwd.address, fwd.port)
                    self.forwards = (*self.forwards, fwd)
        return {"address": fwd.address, "port": fwd.port}

    async def kill(self) -> None:
        self._require_live()
        await self.driver.destroy()

    async def pause(self) -> None:
        self._require_live()
        await self.driver.pause()

    async def unpause(self) -> None:
        self._require_live()
        await self.driver.resume()


def build_domain(config: LauncherConfig, spec: VmiSpec, accelerator: str) -> Domain:
    facts = disks.prepare(
        spec=spec, vmi=config.vmi, private_dir=config.private_dir, dev_dir=config.dev_dir
    )
    prepared = scratch.prepare(
        spec,
        private_dir=config.private_dir,
        dev_dir=config.dev_dir,
        runtime_dir=config.runtime_dir,
        ephemeral_dir=config.ephemeral_dir,
        image_volume_dir=config.image_volume_dir,
    )
    iso = cloudinit.prepare(
        spec, secret_dir=config.secret_dir, ephemeral_dir=config.ephemeral_dir
    )
    if iso is not None:
        prepared += (iso,)
    direct = set(facts.direct_io)
    for image in prepared:
        if disks.supports_direct_io(image.path):
            direct.add(image.volume)
    options = BuildOptions(
        accelerator=accelerator,  # type: ignore[arg-type]
        private_dir=config.private_dir,
        dev_dir=config.dev_dir,
        block_volumes=facts.block_volumes,
        direct_io=frozenset(direct),
        preallocated=facts.preallocated,
        ovmf=find_ovmf(),
        prepared=prepared,
        pod_ip=config.pod_ip,
        unprivileged_port_start=nodeports.unprivileged_port_start(),
    )
    domain = build_spec(spec=spec, options=options)
    for iface in domain.interfaces:
        if iface.forwards:
            logger.info("interface %s: %s forwarded from the pod IP to %s", iface.alias,
                        ", ".join(f"{f.protocol}/{f.port}" for f in iface.forwards), iface.guest)
        else:
            logger.warning("interface %s lists no ports: a port is forwarded when a"
                           " port-forward asks for it (KubeVirt forwards every port; list"
                           " them in its ports for a Service or a client of the pod IP)",
                           iface.alias)
    fw = domain.firmware
    if config.driver == "qemu" and fw.kind == "efi" and fw.nvram and fw.nvram_template:
        # libvirt copies the variables template itself; for QEMU the launcher does
        os.makedirs(os.path.dirname(fw.nvram), exist_ok=True)
        if not os.path.exists(fw.nvram):
            shutil.copyfile(fw.nvram_template, fw.nvram)
    return domain


async def run(config: LauncherConfig) -> Outcome:
    """Run the VMI to its end; never raises for a VMI or guest problem."""
    try:
        spec = parse_vmi(config.vmi)
    except DomainError as err:
        return Outcome("Failed", "InvalidVMI", str(err))
    verdict = accel.choose(
        use_emulation=config.use_emulation,
        cache_path=os.path.join(config.private_dir, "accelerator.json"),
        probe_kernel=config.kvm_probe_kernel,
        probe_initrd=config.kvm_probe_initrd,
        qemu_binary=config.qemu_binary,
    )
    try:
        domain = build_domain(config, spec, verdict.accelerator)
    except DomainError as err:
        return Outcome("Failed", "InvalidVMI", str(err))
    except LauncherError as err:
        return Outcome("Failed", err.reason, err.message)
    driver = make_driver(
        config.driver,
        private_dir=config.private_dir,
        qemu_binary=config.qemu_binary,
        libvirtd_binary=config.libvirtd_binary,
    )
    supervisor = Supervisor(config, spec, driver, verdict.accelerator)
    hub = ConsoleHub(RotatingLog(os.path.join(config.private_dir, "console.log")))
    control = ControlServer(
        path=os.path.join(config.socket_dir, f"{spec.uid}.sock"), controls=supervisor, console=hub
    )
    serial_server: asyncio.AbstractServer | None = None
    agent_task: asyncio.Task[None] | None = None
    loop = asyncio.get_running_loop()
    try:
        if domain.serial is not None:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(domain.serial.socket_path)
            serial_server = await asyncio.start_unix_server(
                hub.serve_guest, path=domain.serial.socket_path
            )
        os.makedirs(config.socket_dir, exist_ok=True)
        await control.start()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, lambda: asyncio.ensure_future(_on_sigterm(supervisor)))
        supervisor.forwards = tuple(f for i in domain.interfaces for f in i.forwards)
        supervisor.interfaces = domain.interfaces
        try:
            await driver.start(domain, supervisor.on_state)
        except LauncherError as err:
            return Outcome("Failed", err.reason, err.message)
        supervisor.started_at = _now()
        supervisor.domain_interfaces = [
            {"name": i.alias.removeprefix("ua-"), "mac": i.mac or ""} for i in domain.interfaces
        ]
        agent = driver.agent(domain)
        if agent is not None:
            supervisor.poller = AgentPoller(agent, Intervals.scaled(config.agent_poll_scale))
            agent_task = asyncio.create_task(supervisor.poller.run())
        end = await driver.wait()
        supervisor.on_state("crashed" if end.kind == "crashed" else "shutdown", end.kind)
        return outcome_for(end, acpi=spec.acpi)
    finally:
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(sig)
        if supervisor._grace_task is not None:
            supervisor._grace_task.cancel()
        if agent_task is not None:
            await tasks.stop([agent_task])
        if supervisor.poller is not None:
            await supervisor.poller.agent.close()
        await driver.close()
        await control.close()
        if serial_server is not None:
            serial_server.close()
            if domain.serial is not None:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(domain.serial.socket_path)
        hub.close()


async def _on_sigterm(supervisor: Supervisor) -> None:
    logger.info("SIGTERM: shutting the domain down")
    try:
        await supervisor.shutdown(None)
    except LauncherError as err:
        logger.info("shutdown on SIGTERM: %s", err.message)
        if supervisor.state == "starting":
            await supervisor.driver.destroy()
