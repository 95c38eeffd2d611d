"""Render a :class:`~vm.domain.model.Domain` as libvirt domain XML, through xml.etree.

Why it exists: the libvirt driver defines the domain from this text; building it as a
tree (never a string template) means no VMI value can break out of its attribute or
element. The shape follows what upstream's converter writes (name, ``unit="b"``
memory, ``ua-`` aliases, per-device boot order, virtio-non-transitional models).
"""

from __future__ import annotations

import xml.etree.ElementTree as ET

from vm.domain import render_qemu
from vm.domain.model import Disk, Domain

QEMU_NS = "http://libvirt.org/schemas/domain/qemu/1.0"
ET.register_namespace("qemu", QEMU_NS)

_BUS = {"virtio": "virtio", "sata": "sata", "scsi": "scsi"}


def _sub(parent: ET.Element, tag: str, text: str | None = None, **attrs: str) -> ET.Element:
    el = ET.SubElement(parent, tag, attrs)
    if text is not None:
        el.text = text
    return el


def _cpu(root: ET.Element, domain: Domain) -> None:
    cpu = domain.cpu
    if cpu.model in ("host-model", "host-passthrough"):
        el = _sub(root, "cpu", mode=cpu.model)
    elif cpu.model:
        el = _sub(root, "cpu", mode="custom", match="exact")
        _sub(el, "model", cpu.model, fallback="allow")
    else:
        el = _sub(root, "cpu")
    _sub(
        el,
        "topology",
        sockets=str(cpu.sockets),
        dies="1",
        cores=str(cpu.cores),
        threads=str(cpu.threads),
    )


def _os(root: ET.Element, domain: Domain) -> None:
    os_el = _sub(root, "os")
    _sub(os_el, "type", "hvm", arch="x86_64", machine=domain.machine)
    fw = domain.firmware
    if fw.kind == "efi" and fw.loader and fw.nvram:
        _sub(
            os_el,
            "loader",
            fw.loader,
            readonly="yes",
            secure="yes" if fw.secure_boot else "no",
            type="pflash",
        )
        nv = _sub(os_el, "nvram", fw.nvram)
        if fw.nvram_template:
            nv.set("template", fw.nvram_template)


def _disk(devices: ET.Element, disk: Disk) -> None:
    el = _sub(devices, "disk", type=disk.source_kind, device=disk.device)
    if disk.bus == "virtio":
        el.set("model", "virtio-non-transitional")
    driver = _sub(el, "driver", name="qemu", type=disk.format, cache=disk.cache)
    if disk.error_policy:
        driver.set("error_policy", disk.error_policy)
    if disk.io:
        driver.set("io", disk.io)
    if disk.discard:
        driver.set("discard", disk.discard)
    if disk.source_kind == "block":
        _sub(el, "source", dev=disk.path)
    else:
        _sub(el, "source", file=disk.path)
    if disk.backing is not None:
        b = disk.backing
        store = _sub(el, "backingStore", type=b.source_kind)
        _sub(store, "format", type=b.format)
        if b.source_kind == "block":
            _sub(store, "source", dev=b.path)
        else:
            _sub(store, "source", file=b.path)
        if b.format == "qcow2":
            _sub(store, "backingStore")  # the chain ends here: no backing named in its header
    _sub(el, "target", dev=disk.target, bus=_BUS[disk.bus])
    if disk.read_only:
        _sub(el, "readonly")
    if disk.serial:
        _sub(el, "serial", disk.serial)
    if disk.boot_order is not None:
        _sub(el, "boot", order=str(disk.boot_order))
    _sub(el, "alias", name=disk.alias)
    if disk.bus == "scsi" or disk.bus == "sata":
        _sub(el, "address", type="drive", controller="0", bus="0", target="0", unit=str(disk.unit))


def _devices(root: ET.Element, domain: Domain) -> None:
    devices = _sub(root, "devices")
    for disk in domain.disks:
        _disk(devices, disk)
    for ctrl in domain.controllers:
        _sub(devices, "controller", type="scsi", index=str(ctrl.index), model=ctrl.model)
    if domain.serial is not None:
        serial = _sub(devices, "serial", type="unix")
        _sub(serial, "source", mode="connect", path=domain.serial.socket_path)
        _sub(serial, "target", port="0")
        _sub(serial, "alias", name="serial0")
    if domain.agent is not None:
        _sub(devices, "controller", type="virtio-serial", index="0",
             model="virtio-non-transitional")
        channel = _sub(devices, "channel", type="unix")
        _sub(channel, "source", mode="bind", path=domain.agent.socket_path)
        _sub(channel, "target", type="virtio", name=domain.agent.name)
        _sub(channel, "alias", name="channel0")
    if domain.rng is not None:
        rng = _sub(devices, "rng", model=domain.rng.model)
        _sub(rng, "backend", domain.rng.backend, model="random")
    _sub(devices, "memballoon", model="none")


def _interfaces(root: ET.Element, domain: Domain) -> None:
    """The NICs as QEMU arguments: libvirt 9.0 forwards ports only for its passt backend
    (``<portForward>``), and its user-mode ``<interface>`` cannot set the gateway and the
    DHCP address, so both drivers give QEMU the same ``-netdev user`` (libvirt then marks
    the domain tainted by custom arguments, and does not list these NICs)."""
    if not domain.interfaces:
        return
    cmdline = _sub(root, f"{{{QEMU_NS}}}commandline")
    for index, iface in enumerate(domain.interfaces):
        for arg in render_qemu.interface_args(iface, index):
            _sub(cmdline, f"{{{QEMU_NS}}}arg", value=arg)


def render(domain: Domain) -> ET.Element:
    root = ET.Element("domain", type="kvm" if domain.accelerator == "kvm" else "qemu")
    _sub(root, "name", domain.name)
    _sub(root, "uuid", domain.uuid)
    _sub(root, "memory", str(domain.memory_bytes), unit="b")
    _sub(root, "vcpu", str(domain.cpu.vcpus), placement="static")
    _os(root, domain)
    features = _sub(root, "features")
    if domain.acpi:
        _sub(features, "acpi")
    if domain.smm:
        _sub(features, "smm", state="on")
    _cpu(root, domain)
    _sub(root, "on_poweroff", "destroy")
    _sub(root, "on_reboot", "restart")
    _sub(root, "on_crash", "destroy")
    _devices(root, domain)
    _interfaces(root, domain)
    return root


def to_xml(domain: Domain) -> str:
    root = render(domain)
    ET.indent(root)
    return ET.tostring(root, encoding="unicode")
