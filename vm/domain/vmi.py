"""A typed, checked view of the parts of a ``kubevirt.io/v1`` VirtualMachineInstance that
decide the domain.

Why it exists: configurators should read typed fields, not dig through dicts; and every
malformed or unsupported field must be refused once, here, with its JSON path in the
message (it becomes the VMI's failure reason). Unknown fields are ignored, as the API
server's schema already pruned what upstream does not know.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import Any, Literal

from sizes import parse_bytes
from vm import podnetwork
from vm.domain import podnet, probes
from vm.domain.cloudinit import (
    SOURCE_KEYS,
    CloudInitSpec,
    SshKeySource,
    instance_type,
    parse_source,
    parse_ssh_keys,
)
from vm.domain.errors import DomainError, UnsupportedError

Bus = Literal["virtio", "sata", "scsi"]
DeviceKind = Literal["disk", "cdrom", "lun"]
Cache = Literal["none", "writethrough", "writeback"]
BUSES: tuple[Bus, ...] = ("virtio", "sata", "scsi")
CACHES: tuple[Cache, ...] = ("none", "writethrough", "writeback")
DEFAULT_BUS: Bus = "sata"  # upstream's default on amd64
DEFAULT_GRACE_SECONDS = 30


@dataclass(frozen=True)
class DiskSpec:
    name: str
    kind: DeviceKind
    bus: Bus
    boot_order: int | None
    cache: Cache | None
    read_only: bool
    serial: str | None


VolumeKind = Literal["claim", "ephemeral", "emptyDisk", "cloudInit", "containerDisk"]
MIB = 1024 * 1024


@dataclass(frozen=True)
class VolumeSpec:
    name: str
    claim_name: str = ""
    """The PVC (for a dataVolume: the DataVolume's name, as upstream; for ephemeral: the
    golden claim under the overlay); empty for the other kinds."""
    kind: VolumeKind = "claim"
    capacity: int = 0
    """emptyDisk: the size in bytes, rounded down to 1 MiB as upstream."""
    cloud_init: CloudInitSpec | None = None
    read_only: bool = False
    """A ``persistentVolumeClaim`` with ``readOnly``: mounted read-only, attached so."""
    image: str = ""
    """containerDisk: the image (the launcher pod mounts it as an image volume)."""
    path: str = ""
    """containerDisk: the disk file's absolute path in the image ("": the one file under
    ``/disk``)."""


@dataclass(frozen=True)
class InterfaceSpec:
    name: str
    model: str
    mac: str | None
    ports: tuple[podnet.PortSpec, ...] = ()
    subnet: podnet.Subnet = podnet.DEFAULT
    all_ports: bool = True
    """No ``ports`` listed: upstream forwards every port (here: each port asked for, on
    demand, see ``vm.launcher.runner.Supervisor.forward``)."""


@dataclass(frozen=True)
class VmiSpec:
    namespace: str
    name: str
    uid: str
    memory_bytes: int
    sockets: int
    cores: int
    threads: int
    cpu_model: str | None
    machine: str
    efi: bool
    secure_boot: bool
    firmware_uuid: str | None
    smm: bool
    acpi: bool
    disks: tuple[DiskSpec, ...]
    volumes: tuple[VolumeSpec, ...]
    interfaces: tuple[InterfaceSpec, ...]
    rng: bool
    serial_console: bool
    grace_period_seconds: int
    hostname: str | None = None
    instance_type: str = ""
    ssh_keys: tuple[SshKeySource, ...] = ()
    start_paused: bool = False

    @property
    def cloud_init(self) -> CloudInitSpec | None:
        for volume in self.volumes:
            if volume.cloud_init is not None:
                return volume.cloud_init
        return None

    @property
    def domain_name(self) -> str:
        return f"{self.namespace}_{self.name}"

    @property
    def vcpus(self) -> int:
        return self.sockets * self.cores * self.threads


def _obj(value: Any, field: str) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise DomainError(field, "must be an object")
    return value


def _list(value: Any, field: str) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise DomainError(field, "must be a list")
    return value


def _str(value: Any, field: str, *, required: bool = True) -> str:
    if value is None and not required:
        return ""
    if not isinstance(value, str) or (required and not value):
        raise DomainError(field, "must be a non-empty string")
    return value


def _int(value: Any, field: str, default: int, *, low: int, high: int) -> int:
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int):
        raise DomainError(field, "must be an integer")
    if not low <= value <= high:
        raise DomainError(field, f"must be between {low} and {high}, got {value}")
    return value


def _enabled(value: Any, field: str, default: bool) -> bool:
    """A FeatureState (``{"enabled": bool}``; an empty object means enabled)."""
    if value is None:
        return default
    state = _obj(value, field)
    enabled = state.get("enabled", True)
    if not isinstance(enabled, bool):
        raise DomainError(f"{field}.enabled", "must be a boolean")
    return enabled


def _memory(domain: dict[str, Any]) -> int:
    guest = _obj(domain.get("memory"), "spec.domain.memory").get("guest")
    field = "spec.domain.memory.guest"
    resources = _obj(domain.get("resources"), "spec.domain.resources")
    if guest is None:
        requests = _obj(resources.get("requests"), "spec.domain.resources.requests")
        guest, field = requests.get("memory"), "spec.domain.resources.requests.memory"
    if guest is None:  # a limit alone, as upstream's defaults: the guest gets the limit
        limits = _obj(resources.get("limits"), "spec.domain.resources.limits")
        guest, field = limits.get("memory"), "spec.domain.resources.limits.memory"
    if guest is None:
        raise DomainError(
            "spec.domain.resources.requests.memory",
            "no memory requested (set it or spec.domain.memory.guest)",
        )
    try:
        size = parse_bytes(str(guest))
    except ValueError as err:
        raise DomainError(field, str(err)) from err
    if size < 1_000_000:
        raise DomainError(field, f"must be at least 1M, got {guest}")
    return size


_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")


def _name(value: Any, field: str) -> str:
    """Disk and volume names become paths (``vmi-disks/<name>``, ``/dev/<name>``) and
    device aliases: only DNS-1123 labels, as Kubernetes volume names, are accepted."""
    name = _str(value, field)
    if not _DNS_LABEL.match(name):
        raise DomainError(
            field,
            f"{name[:80]!r} is not a DNS-1123 label (lower-case "
            "letters, digits and '-', at most 63)",
        )
    return name


# The machine types QEMU's -machine gets as they are: q35 and its versioned names
# (pc-q35-7.2, RHEL's pc-q35-rhel9.2.0), nothing else. Upstream accepts what matches
# its emulatedMachines (q35*, pc-q35*) and libvirt then refuses what QEMU does not
# have; here the type is also an option string, where a ',' would add options
# (kernel=, initrd=, smm=...), so only these exact forms are let through.
_MACHINE_TYPE = re.compile(
    r"q35|pc-q35-(?:[0-9]{1,3}\.[0-9]{1,3}|rhel[0-9]{1,3}\.[0-9]{1,3}\.[0-9]{1,3})"
)
MACHINE_TYPES_ACCEPTED = "q35, pc-q35-<major>.<minor>, pc-q35-rhel<x>.<y>.<z>"


def machine_type_problem(value: Any) -> str | None:
    """Why ``value`` cannot be ``spec.domain.machine.type``, or None."""
    if not isinstance(value, str):
        return f"must be a string, got {value!r}"
    if _MACHINE_TYPE.fullmatch(value):
        return None
    return f"{value[:80]!r} is not supported (allowed values: {MACHINE_TYPES_ACCEPTED})"


_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


def _subdomain(value: Any, field: str) -> str:
    name = _str(value, field)
    if len(name) > 253 or not _DNS_SUBDOMAIN.match(name):
        raise DomainError(field, f"{name[:80]!r} is not a DNS-1123 subdomain")
    return name


def _disk(raw: Any, index: int) -> DiskSpec:
    field = f"spec.domain.devices.disks[{index}]"
    disk = _obj(raw, field)
    name = _name(disk.get("name"), f"{field}.name")
    kinds = [k for k in ("disk", "cdrom", "lun") if k in disk]
    if len(kinds) > 1:
        raise DomainError(field, f"only one of disk, cdrom, lun may be set, got {kinds}")
    kind: DeviceKind = kinds[0] if kinds else "disk"
    device = _obj(disk.get(kind), f"{field}.{kind}")
    bus = device.get("bus", DEFAULT_BUS)
    if bus not in BUSES:
        raise DomainError(
            f"{field}.{kind}.bus", f"unsupported bus {bus!r} (supported: {', '.join(BUSES)})"
        )
    if kind == "cdrom" and bus == "virtio":
        raise DomainError(f"{field}.cdrom.bus", "a CD-ROM cannot use the virtio bus")
    read_only = device.get("readonly", kind == "cdrom")
    if not isinstance(read_only, bool):
        raise DomainError(f"{field}.{kind}.readonly", "must be a boolean")
    if kind == "lun":
        raise UnsupportedError(f"{field}.lun", "LUN pass-through is not supported")
    cache = disk.get("cache")
    if cache is not None and cache not in CACHES:
        raise DomainError(
            f"{field}.cache", f"unknown cache mode {cache!r} (known: {', '.join(CACHES)})"
        )
    serial = disk.get("serial")
    if serial is not None and (
        not isinstance(serial, str) or not serial.isprintable() or len(serial) > 20
    ):
        raise DomainError(f"{field}.serial", "must be printable text of at most 20 characters")
    return DiskSpec(
        name=name,
        kind=kind,
        bus=bus,
        read_only=read_only,
        cache=cache,
        serial=serial,
        boot_order=_int(disk.get("bootOrder"), f"{field}.bootOrder", 0, low=1, high=2**31 - 1)
        or None,
    )


_SOURCES_SUPPORTED = ("persistentVolumeClaim", "dataVolume", "ephemeral", "emptyDisk",
                      "cloudInitNoCloud", "cloudInitConfigDrive", "containerDisk")
_SOURCES_KNOWN = (
    *_SOURCES_SUPPORTED,
    "hostDisk",
    "configMap",
    "secret",
    "serviceAccount",
    "downwardAPI",
    "downwardMetrics",
    "sysprep",
    "memoryDump",
    "containerPath",
)


def _volume(raw: Any, index: int) -> VolumeSpec:
    field = f"spec.volumes[{index}]"
    vol = _obj(raw, field)
    name = _name(vol.get("name"), f"{field}.name")
    sources = [k for k in _SOURCES_KNOWN if k in vol]
    if len(sources) != 1:
        raise DomainError(field, f"must have exactly one volume source, got {sources or 'none'}")
    source = sources[0]
    if source not in _SOURCES_SUPPORTED:
        raise UnsupportedError(
            f"{field}.{source}",
            f"this volume source is not supported (supported: {', '.join(_SOURCES_SUPPORTED)})",
        )
    body = _obj(vol[source], f"{field}.{source}")
    if source in SOURCE_KEYS:
        return VolumeSpec(name=name, kind="cloudInit",
                          cloud_init=parse_source(name, source, body, f"{field}.{source}"))
    if source == "emptyDisk":
        capacity = body.get("capacity")
        try:
            size = parse_bytes(str(capacity)) // MIB * MIB
        except ValueError as err:
            raise DomainError(f"{field}.emptyDisk.capacity", str(err)) from err
        if size == 0:
            raise DomainError(f"{field}.emptyDisk.capacity",
                              f"the size for volume {name} is too low")
        return VolumeSpec(name=name, kind="emptyDisk", capacity=size)
    if source == "containerDisk":
        image = _str(body.get("image"), f"{field}.containerDisk.image")
        path = body.get("path") or ""
        if not isinstance(path, str):
            raise DomainError(f"{field}.containerDisk.path", "must be a string")
        return VolumeSpec(name=name, kind="containerDisk", image=image, path=path)
    if source == "ephemeral":
        at = f"{field}.ephemeral.persistentVolumeClaim"
        claim = _obj(body.get("persistentVolumeClaim"), at)
        return VolumeSpec(name=name, kind="ephemeral",
                          claim_name=_str(claim.get("claimName"), f"{at}.claimName"))
    key = "claimName" if source == "persistentVolumeClaim" else "name"
    read_only = source == "persistentVolumeClaim" and body.get("readOnly") is True
    return VolumeSpec(name=name, claim_name=_str(body.get(key), f"{field}.{source}.{key}"),
                      read_only=read_only)


def _with_probe_ports(ifaces: tuple[InterfaceSpec, ...],
                      spec: dict[str, Any]) -> tuple[InterfaceSpec, ...]:
    """The first interface also forwards the TCP ports the VMI's probes reach, listed
    or not (upstream forwards every port, so its probes always reach the guest)."""
    if not ifaces:
        return ifaces
    first = ifaces[0]
    extra = tuple(podnet.PortSpec("tcp", p) for p in probes.guest_tcp_ports(spec)
                  if podnet.PortSpec("tcp", p) not in first.ports)
    return (replace(first, ports=first.ports + extra), *ifaces[1:])


def _interfaces(spec: dict[str, Any], devices: dict[str, Any]) -> tuple[InterfaceSpec, ...]:
    return _with_probe_ports(_pod_interfaces(spec, devices), spec)


def _pod_interfaces(spec: dict[str, Any],
                    devices: dict[str, Any]) -> tuple[InterfaceSpec, ...]:
    networks = _list(spec.get("networks"), "spec.networks")
    raw = _list(devices.get("interfaces"), "spec.domain.devices.interfaces")
    if podnetwork.defaulted(spec):
        # upstream's defaulting: one masquerade interface on the pod network
        return (InterfaceSpec(name=podnetwork.DEFAULT, model="virtio", mac=None),)
    cidrs = {}
    by_name = {}
    for i, net in enumerate(networks):
        net = _obj(net, f"spec.networks[{i}]")
        nname = _str(net.get("name"), f"spec.networks[{i}].name")
        if "pod" not in net:
            raise UnsupportedError(f"spec.networks[{i}]", "only the pod network is supported")
        by_name[nname] = net
        pod = _obj(net["pod"], f"spec.networks[{i}].pod")
        cidrs[nname] = podnet.subnet(
            pod.get("vmNetworkCIDR"), f"spec.networks[{i}].pod.vmNetworkCIDR"
        )
    result = []
    for i, iface in enumerate(raw):
        field = f"spec.domain.devices.interfaces[{i}]"
        iface = _obj(iface, field)
        name = _name(iface.get("name"), f"{field}.name")
        if name not in by_name:
            raise DomainError(f"{field}.name", f"network {name!r} not found in spec.networks")
        binding = [
            b for b in ("masquerade", "bridge", "sriov", "slirp", "passt", "binding") if b in iface
        ]
        if binding and binding != ["masquerade"]:
            raise UnsupportedError(
                f"{field}.{binding[0]}", "only the masquerade binding is supported"
            )
        model = iface.get("model", "virtio")
        if model not in ("virtio", "e1000", "e1000e", "rtl8139"):
            raise DomainError(f"{field}.model", f"unknown interface model {model!r}")
        mac = iface.get("macAddress")
        if mac is not None and (
            not isinstance(mac, str)
            or len(mac.split(":")) != 6
            or not all(
                len(p) == 2 and all(c in "0123456789abcdefABCDEF" for c in p)
                for p in mac.split(":")
            )
        ):
            raise DomainError(f"{field}.macAddress", f"not a MAC address: {mac!r}")
        if iface.get("bootOrder") is not None:
            raise UnsupportedError(f"{field}.bootOrder", "network (PXE) boot is not supported")
        result.append(InterfaceSpec(
            name=name, model=model, mac=mac,
            ports=podnet.ports(iface.get("ports"), f"{field}.ports"), subnet=cidrs[name],
            all_ports=not iface.get("ports"),
        ))
    return tuple(result)


def parse_vmi(vmi: Any) -> VmiSpec:
    """Check a VMI (a dict as the API returns it) and return its typed view.

    :raise DomainError: naming the first field that is wrong.
    """
    vmi = _obj(vmi, "VMI")
    meta = _obj(vmi.get("metadata"), "metadata")
    spec = _obj(vmi.get("spec"), "spec")
    domain = _obj(spec.get("domain"), "spec.domain")
    devices = _obj(domain.get("devices"), "spec.domain.devices")
    cpu = _obj(domain.get("cpu"), "spec.domain.cpu")
    firmware = _obj(domain.get("firmware"), "spec.domain.firmware")
    bootloader = _obj(firmware.get("bootloader"), "spec.domain.firmware.bootloader")
    features = _obj(domain.get("features"), "spec.domain.features")
    machine = _obj(domain.get("machine"), "spec.domain.machine").get("type")
    if machine in (None, ""):
        machine = "q35"  # upstream's default on amd64
    if (problem := machine_type_problem(machine)) is not None:
        # another machine family (pc, microvm) is upstream's but not supported here;
        # anything else is malformed
        other = isinstance(machine, str) and "q35" not in machine
        raise (UnsupportedError if other else DomainError)("spec.domain.machine.type", problem)
    if "bios" in bootloader and "efi" in bootloader:
        raise DomainError("spec.domain.firmware.bootloader", "efi and bios are mutually exclusive")
    efi_spec = bootloader.get("efi")
    efi = efi_spec is not None
    secure_boot = (
        efi
        and _obj(efi_spec, "spec.domain.firmware.bootloader.efi").get("secureBoot", True) is True
    )
    smm = _enabled(features.get("smm"), "spec.domain.features.smm", secure_boot)
    if secure_boot and not smm:
        raise DomainError("spec.domain.features.smm", "EFI secure boot requires SMM to be enabled")
    disks = tuple(
        _disk(d, i) for i, d in enumerate(_list(devices.get("disks"), "spec.domain.devices.disks"))
    )
    volumes = tuple(_volume(v, i) for i, v in enumerate(_list(spec.get("volumes"), "spec.volumes")))
    if sum(v.kind == "cloudInit" for v in volumes) > 1:
        raise UnsupportedError("spec.volumes", "only one cloud-init volume is supported")
    # upstream's defaults: a volume without a disk is attached as a disk on the default bus
    named = {d.name for d in disks}
    disks += tuple(DiskSpec(name=v.name, kind="disk", bus=DEFAULT_BUS, boot_order=None,
                            cache=None, read_only=False, serial=None)
                   for v in volumes if v.name not in named)
    _check_names(disks, volumes)
    interfaces = _interfaces(spec, devices)
    boots = [d.boot_order for d in disks if d.boot_order]
    if len(boots) != len(set(boots)):
        raise DomainError(
            "spec.domain.devices.disks", f"duplicate bootOrder values {sorted(boots)}"
        )
    spec_hostname = spec.get("hostname")
    if spec_hostname is not None and not isinstance(spec_hostname, str):
        raise DomainError("spec.hostname", "must be a string")
    uuid = firmware.get("uuid")
    if uuid is not None and not isinstance(uuid, str):
        raise DomainError("spec.domain.firmware.uuid", "must be a string")
    return VmiSpec(
        namespace=_name(meta.get("namespace"), "metadata.namespace"),
        name=_subdomain(meta.get("name"), "metadata.name"),
        uid=_str(meta.get("uid"), "metadata.uid"),
        memory_bytes=_memory(domain),
        sockets=_int(cpu.get("sockets"), "spec.domain.cpu.sockets", 1, low=1, high=64),
        cores=_int(cpu.get("cores"), "spec.domain.cpu.cores", 1, low=1, high=256),
        threads=_int(cpu.get("threads"), "spec.domain.cpu.threads", 1, low=1, high=8),
        cpu_model=cpu.get("model"),
        machine=machine,
        efi=efi,
        secure_boot=secure_boot,
        smm=smm,
        firmware_uuid=uuid,
        acpi=_enabled(features.get("acpi"), "spec.domain.features.acpi", True),
        disks=disks,
        volumes=volumes,
        interfaces=interfaces,
        rng=devices.get("rng") is not None,
        serial_console=devices.get("autoattachSerialConsole", True) is not False,
        grace_period_seconds=_int(
            spec.get("terminationGracePeriodSeconds"),
            "spec.terminationGracePeriodSeconds",
            DEFAULT_GRACE_SECONDS,
            low=0,
            high=24 * 3600,
        ),
        hostname=spec_hostname or None,
        instance_type=instance_type(_obj(meta.get("annotations"), "metadata.annotations")),
        ssh_keys=parse_ssh_keys(spec.get("accessCredentials")),
        start_paused=_start_strategy(spec.get("startStrategy")),
    )


def _start_strategy(value: Any) -> bool:
    """``Paused`` (upstream's only StartStrategy value) or unset."""
    if value is None:
        return False
    if value != "Paused":
        raise DomainError("spec.startStrategy", f"unknown value {value!r}: only Paused")
    return True


def _check_names(disks: tuple[DiskSpec, ...], volumes: tuple[VolumeSpec, ...]) -> None:
    for what, names in (
        ("spec.domain.devices.disks", [d.name for d in disks]),
        ("spec.volumes", [v.name for v in volumes]),
    ):
        dups = sorted({n for n in names if names.count(n) > 1})
        if dups:
            raise DomainError(what, f"duplicate names {dups}")
    vol_names = {v.name for v in volumes}
    for i, disk in enumerate(disks):
        if disk.name not in vol_names:
            raise DomainError(
                f"spec.domain.devices.disks[{i}].name", f"volume {disk.name!r} not found"
            )
