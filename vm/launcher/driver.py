"""The interface both drivers (QEMU over QMP, libvirt session daemon) implement.

Why it exists: the supervisor (:mod:`vm.launcher.runner`) decides what a request or an
event means; a driver only starts the domain, acts on it and reports how it ended, so
both drivers behave the same to the VMI controller. ``qemu.qmp`` and ``libvirt`` are
imported only in their driver modules.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal, Protocol

from vm.domain.model import Domain
from vm.launcher.agent import Agent
from vm.launcher.protocol import State

PDEATHSIG = ("setpriv", "--pdeathsig", "KILL", "--")
"""Prefix for the programs a driver starts: they die with the launcher even outside a pod
(in a pod the PID namespace would take them)."""

EndKind = Literal["shutdown", "destroyed", "crashed"]
StateCallback = Callable[[State, str], None]


@dataclass(frozen=True)
class DomainEnd:
    """How the domain ended: the guest powered off, it was destroyed on request, or it
    crashed (QEMU died, or the guest stopped on an internal error)."""

    kind: EndKind
    detail: str


class Driver(Protocol):
    name: str

    async def start(self, domain: Domain, on_state: StateCallback) -> None:
        """Start the domain; returns once it runs. :raise DriverError:"""

    async def wait(self) -> DomainEnd:
        """Until the domain has ended."""

    async def powerdown(self) -> None:
        """Press the ACPI power button."""

    async def destroy(self) -> None:
        """Kill the domain now."""

    async def reboot_acpi(self) -> None:
        """Reboot through the ACPI power button (the guest shuts down, the domain resets
        instead of ending), as libvirt's ``VIR_DOMAIN_REBOOT_ACPI_POWER_BTN``."""

    def agent(self, domain: Domain) -> Agent | None:
        """The guest agent of the started domain (None without its channel)."""

    async def pause(self) -> None: ...

    async def monitor(self, command: str) -> str:
        """QEMU's human monitor (HMP) ``command``, its text answer. :raise DriverError:"""

    async def resume(self) -> None: ...

    async def close(self) -> None:
        """Release everything the driver started (idempotent, bounded)."""


def make_driver(name: str, *, private_dir: str, qemu_binary: str, libvirtd_binary: str) -> Driver:
    if name == "libvirt":
        from vm.launcher.libvirt_driver import LibvirtDriver

        return LibvirtDriver(private_dir=private_dir, libvirtd_binary=libvirtd_binary)
    from vm.launcher.qemu_driver import QemuDriver

    return QemuDriver(private_dir=private_dir, qemu_binary=qemu_binary)
