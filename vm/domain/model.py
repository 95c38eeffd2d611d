"""The typed domain: what both renderers (libvirt XML, QEMU argv) turn into a VM.

Why it exists: the configurators decide, the renderers only spell. A frozen dataclass per
device keeps every decision visible in one value that tests compare whole. Sizes are
bytes, paths are absolute; nothing here knows about libvirt or QEMU syntax.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

Accelerator = Literal["kvm", "tcg"]
SourceKind = Literal["file", "block"]


@dataclass(frozen=True)
class Cpu:
    sockets: int = 1
    cores: int = 1
    threads: int = 1
    # "host-model", "host-passthrough" or a named model; None = the accelerator's default
    model: str | None = None

    @property
    def vcpus(self) -> int:
        return self.sockets * self.cores * self.threads


@dataclass(frozen=True)
class Backing:
    path: str
    source_kind: SourceKind = "file"
    format: Literal["raw", "qcow2"] = "raw"


@dataclass(frozen=True)
class Disk:
    alias: str  # "ua-<disk name>"
    device: Literal["disk", "cdrom"]
    bus: Literal["virtio", "sata", "scsi"]
    target: str  # vda, sda…
    source_kind: SourceKind
    path: str
    format: Literal["raw", "qcow2"] = "raw"
    cache: Literal["none", "writethrough", "writeback"] = "none"
    io: Literal["native"] | None = None
    boot_order: int | None = None
    read_only: bool = False
    serial: str | None = None
    unit: int = 0  # SATA port or SCSI unit on controller 0
    discard: Literal["unmap"] | None = "unmap"
    error_policy: Literal["stop"] | None = "stop"
    backing: Backing | None = None
    """A qcow2 overlay's backing image (ephemeral volumes), opened read-only."""


@dataclass(frozen=True)
class ScsiController:
    index: int = 0
    model: str = "virtio-non-transitional"


@dataclass(frozen=True)
class Serial:
    """The guest's first serial port (COM1), wired to a unix socket the launcher listens
    on: QEMU connects at start, so no early byte is lost and no socket is polled."""

    socket_path: str


@dataclass(frozen=True)
class AgentChannel:
    """The qemu-guest-agent's virtio-serial port (``org.qemu.guest_agent.0``), backed by a
    unix socket in the launcher's private dir that QEMU listens on (upstream's channel)."""

    socket_path: str
    name: str = "org.qemu.guest_agent.0"


@dataclass(frozen=True)
class Firmware:
    kind: Literal["bios", "efi"] = "bios"
    loader: str | None = None  # OVMF code (read-only pflash)
    nvram: str | None = None  # this VM's copy of the variables
    nvram_template: str | None = None
    secure_boot: bool = False


@dataclass(frozen=True)
class PortForward:
    """Inbound ``protocol`` traffic to ``address:port`` (the pod IP) goes to the guest's
    ``guest_port`` (the same port, unless ``podnet.node_port`` moved a privileged one)."""

    protocol: Literal["tcp", "udp"]
    address: str
    port: int
    guest_port: int


@dataclass(frozen=True)
class Interface:
    alias: str  # "ua-<interface name>"
    model: str  # "virtio-non-transitional", "e1000e"…
    mac: str | None = None
    backend: Literal["user"] = "user"
    network: str = "10.0.2.0/24"  # the guest's side of the NAT
    gateway: str = "10.0.2.1"
    guest: str = "10.0.2.2"  # what DHCP gives the guest
    forwards: tuple[PortForward, ...] = ()
    all_ports: bool = False
    """The VMI lists no ports: any guest port may be forwarded when asked for."""

    @property
    def netdev(self) -> str:
        """QEMU's id of the interface's user-mode network (``hostfwd_add`` names it)."""
        return f"host{self.alias}"


@dataclass(frozen=True)
class Rng:
    model: str = "virtio-non-transitional"
    backend: str = "/dev/urandom"


@dataclass(frozen=True)
class Domain:
    name: str
    uuid: str
    accelerator: Accelerator
    machine: str = "q35"
    memory_bytes: int = 0
    cpu: Cpu = field(default_factory=Cpu)
    acpi: bool = True
    smm: bool = False
    start_paused: bool = False
    """``spec.startStrategy: Paused``: the guest's CPUs do not run until unpaused."""
    firmware: Firmware = field(default_factory=Firmware)
    disks: tuple[Disk, ...] = ()
    controllers: tuple[ScsiController, ...] = ()
    interfaces: tuple[Interface, ...] = ()
    serial: Serial | None = None
    agent: AgentChannel | None = None
    rng: Rng | None = None
