"""Render a :class:`~vm.domain.model.Domain` as a ``qemu-system-x86_64`` argv.

Why it exists: the default driver runs QEMU itself (no daemon, no privileges) and must
give the guest the same machine libvirt would: the same devices, ids (the ``ua-``
aliases), boot indexes, cache modes and firmware. Options are spelled as libvirt 9
spells them for QEMU 7.2; values go through :func:`opt` (QEMU doubles commas), and
every option string is a separate argv entry, so nothing reaches a shell.
"""

from __future__ import annotations

from vm.domain.model import Disk, Domain, Interface

QEMU = "qemu-system-x86_64"
SANDBOX = "on,obsolete=deny,elevateprivileges=deny,spawn=deny,resourcecontrol=deny"


def opt(value: str) -> str:
    """A value inside a QEMU option list: commas are doubled."""
    return value.replace(",", ",,")


def _join(*parts: str | None) -> str:
    return ",".join(p for p in parts if p)


def _memory_kib(size: int) -> int:
    # libvirt aligns x86 guest memory up to 1 MiB; do the same so both drivers agree.
    mib = 1024 * 1024
    return (size + mib - 1) // mib * 1024


def _backing(disk: Disk) -> list[str]:
    """An overlay's backing image, spelled out (not left to the qcow2 header), so a block
    device gets host_device and the format is never probed."""
    if disk.backing is None:
        return []
    b = disk.backing
    return [
        f"backing.driver={b.format}",
        f"backing.file.driver={'host_device' if b.source_kind == 'block' else 'file'}",
        f"backing.file.filename={opt(b.path)}",
    ]


def _drive(disk: Disk) -> list[str]:
    driver = "host_device" if disk.source_kind == "block" else "file"
    drive = _join(
        f"file.driver={driver}",
        f"file.filename={opt(disk.path)}",
        f"format={disk.format}",
        *_backing(disk),
        "if=none",
        f"id=drive-{disk.alias}",
        f"cache={disk.cache}",
        f"aio={disk.io}" if disk.io else None,
        f"discard={disk.discard}" if disk.discard else None,
        f"werror={disk.error_policy},rerror={disk.error_policy}" if disk.error_policy else None,
        "readonly=on" if disk.read_only else None,
    )
    if disk.bus == "virtio":
        dev = _join("virtio-blk-pci-non-transitional")
    elif disk.bus == "sata":
        dev = _join("ide-cd" if disk.device == "cdrom" else "ide-hd", f"bus=ide.{disk.unit}")
    else:
        dev = _join(
            "scsi-cd" if disk.device == "cdrom" else "scsi-hd",
            "bus=scsi0.0",
            "channel=0",
            "scsi-id=0",
            f"lun={disk.unit}",
        )
    dev = _join(
        dev,
        f"drive=drive-{disk.alias}",
        f"id={disk.alias}",
        f"bootindex={disk.boot_order}" if disk.boot_order is not None else None,
        f"serial={opt(disk.serial)}" if disk.serial else None,
    )
    return ["-drive", drive, "-device", dev]


NIC_SLOT = 0x1B
"""The first interface's slot on pcie.0, counting down: libvirt fills pcie.0 from slot 1
with its own root ports and QEMU's q35 has its chipset at 0x1f, so a NIC that libvirt does
not know of (see render_libvirt) must be placed where neither puts anything."""


def interface_args(iface: Interface, index: int = 0) -> list[str]:
    """One NIC on a user-mode (libslirp) network with the masquerade addresses and the
    port forwards; the libvirt driver passes the same arguments (see render_libvirt)."""
    netdev = iface.netdev
    model = "virtio-net-pci-non-transitional" if iface.model.startswith("virtio") else iface.model
    user = _join(
        "user",
        f"id={netdev}",
        f"net={iface.network}",
        f"host={iface.gateway}",
        f"dhcpstart={iface.guest}",
        *(
            f"hostfwd={f.protocol}:{f.address}:{f.port}-{iface.guest}:{f.guest_port}"
            for f in iface.forwards
        ),
    )
    device = _join(
        model,
        f"netdev={netdev}",
        f"id={iface.alias}",
        "bus=pcie.0",
        f"addr={NIC_SLOT - index:#x}",
        f"mac={iface.mac}" if iface.mac else None,
        "romfile=",
    )
    return ["-netdev", user, "-device", device]


def render(domain: Domain, *, qmp_socket: str, binary: str = QEMU) -> list[str]:
    """The argv; QEMU connects to ``qmp_socket`` (and to the serial socket) at start."""
    cpu = domain.cpu
    machine = _join(
        domain.machine,
        f"accel={domain.accelerator}",
        "smm=on" if domain.smm else None,
        None if domain.acpi else "acpi=off",
    )
    argv = [
        binary,
        "-name",
        f"guest={opt(domain.name)},debug-threads=on",
        "-uuid",
        domain.uuid,
        "-machine",
        machine,
        "-m",
        f"size={_memory_kib(domain.memory_bytes)}k",
        "-smp",
        f"{cpu.vcpus},sockets={cpu.sockets},dies=1,cores={cpu.cores},threads={cpu.threads}",
        "-no-user-config",
        "-nodefaults",
        "-display",
        "none",
        "-sandbox",
        SANDBOX,
        "-msg",
        "timestamp=on",
        "-chardev",
        f"socket,id=charmonitor,path={opt(qmp_socket)}",
        "-mon",
        "chardev=charmonitor,id=monitor,mode=control",
    ]
    if domain.start_paused:
        argv.append("-S")  # the CPUs wait for QMP cont (unpause)
    if cpu.model == "host-passthrough":
        argv += ["-cpu", "host"]
    elif cpu.model == "host-model":
        argv += ["-cpu", "host,-arch-capabilities"]
    elif cpu.model:
        argv += ["-cpu", cpu.model]
    fw = domain.firmware
    if fw.kind == "efi" and fw.loader and fw.nvram:
        argv += [
            "-drive",
            f"if=pflash,format=raw,unit=0,file={opt(fw.loader)},readonly=on",
            "-drive",
            f"if=pflash,format=raw,unit=1,file={opt(fw.nvram)}",
        ]
        if fw.secure_boot:
            argv += ["-global", "driver=cfi.pflash01,property=secure,value=on"]
    for ctrl in domain.controllers:
        argv += ["-device", f"virtio-scsi-pci-non-transitional,id=scsi{ctrl.index}"]
    for disk in domain.disks:
        argv += _drive(disk)
    for index, iface in enumerate(domain.interfaces):
        argv += interface_args(iface, index)
    if domain.serial is not None:
        argv += [
            "-chardev",
            f"socket,id=charserial0,path={opt(domain.serial.socket_path)}",
            "-device",
            "isa-serial,chardev=charserial0,id=serial0",
        ]
    if domain.agent is not None:
        # QEMU listens; the launcher connects (and connects again after a disconnect)
        argv += [
            "-device",
            "virtio-serial-pci-non-transitional,id=virtio-serial0",
            "-chardev",
            f"socket,id=charchannel0,path={opt(domain.agent.socket_path)},server=on,wait=off",
            "-device",
            _join(
                "virtserialport",
                "bus=virtio-serial0.0",
                "nr=1",
                "chardev=charchannel0",
                "id=channel0",
                f"name={opt(domain.agent.name)}",
            ),
        ]
    if domain.rng is not None:
        argv += [
            "-object",
            f"rng-random,id=objrng0,filename={opt(domain.rng.backend)}",
            "-device",
            "virtio-rng-pci-non-transitional,rng=objrng0,id=rng0",
        ]
    return argv
