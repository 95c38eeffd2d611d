"""Rules a VMI spec must meet (upstream's VMI create admitter and disk admitters).

Volume names become the launcher pod's volume names and paths in it, so each must be a
DNS-1123 label and none of the pod's own volumes (``vm.vmi.claims.volume_name_problem``);
the machine type becomes QEMU's ``-machine`` option, so only q35's exact names pass
(``vm.domain.vmi.machine_type_problem``). The launcher checks the label rule and the
machine type again, and the API server refuses a pod with such a volume name.

Each problem is a :class:`Problem` naming the field (``spec.domain.devices.disks[1].name``)
and what is wrong with it, so ``kubectl apply`` tells the user where to look. The
same rules check a VM's ``spec.template.spec`` under that prefix.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sizes import parse_bytes
from vm.domain.configurators.disks import SATA_PORTS
from vm.domain.vmi import machine_type_problem
from vm.vmi.claims import volume_name_problem
from vm.vmi.secret_volumes import secret_volumes
from vm.webhooks.device_rules import device_problems
from vm.webhooks.feature_rules import feature_problems
from vm.webhooks.probe_rules import probe_problems
from vm.webhooks.problem import Problem
from vm.webhooks.volume_rules import (
    CLOUD_INIT_SOURCES,
    access_credential_problems,
    volume_source_problems,
)

__all__ = ["Problem", "validate_vmi_spec"]

VOLUME_SOURCES = (
    "persistentVolumeClaim", "dataVolume", "containerDisk", "cloudInitNoCloud",
    "cloudInitConfigDrive", "emptyDisk", "ephemeral", "hostDisk", "configMap", "secret",
    "serviceAccount", "downwardAPI", "downwardMetrics", "sysprep", "memoryDump", "containerPath",
)
DISK_TARGETS = ("disk", "cdrom", "lun")
# the buses the launcher attaches (upstream also has usb, which rootdisk does not)
BUSES = {"disk": ("virtio", "sata", "scsi"), "cdrom": ("sata", "scsi"), "lun": ("scsi",)}
CACHES = ("none", "writethrough", "writeback")
MIN_MEMORY = 1_000_000


def _quantity(value: Any, field: str, out: list[Problem]) -> int | None:
    if value is None:
        return None
    try:
        return parse_bytes(str(value))
    except ValueError as err:
        out.append(Problem(field, str(err)))
        return None


def _memory(domain: Mapping[str, Any], at: str, out: list[Problem]) -> None:
    res = domain.get("resources") or {}
    req = _quantity((res.get("requests") or {}).get("memory"),
                    f"{at}.resources.requests.memory", out)
    lim = _quantity((res.get("limits") or {}).get("memory"),
                    f"{at}.resources.limits.memory", out)
    mem = domain.get("memory") or {}
    guest = _quantity(mem.get("guest"), f"{at}.memory.guest", out)
    hugepages = (mem.get("hugepages") or {}).get("pageSize")
    if req is None and guest is None and not hugepages and lim is None:
        out.append(Problem(f"{at}.resources.requests.memory", (
            "no memory requested, at least one of 'spec.domain.memory.guest', "
            "'spec.domain.memory.hugepages.pageSize' or "
            "'spec.domain.resources.requests.memory' must be set")))
    if req is not None and req < MIN_MEMORY:
        out.append(Problem(f"{at}.resources.requests.memory",
                           f"must be greater than or equal to 1M, got {req} bytes"))
    if guest is not None and guest < MIN_MEMORY:
        out.append(Problem(f"{at}.memory.guest",
                           f"must be greater than or equal to 1M, got {guest} bytes"))
    if req is not None and lim is not None and req > lim:
        out.append(Problem(f"{at}.resources.requests.memory",
                           f"{req} bytes is greater than the limit {lim} bytes"))
    if guest is not None and lim is not None and guest > lim:
        out.append(Problem(f"{at}.memory.guest",
                           f"{guest} bytes is greater than the memory limit {lim} bytes"))


def _firmware(domain: Mapping[str, Any], at: str, out: list[Problem]) -> None:
    loader = ((domain.get("firmware") or {}).get("bootloader")) or {}
    if "bios" in loader and "efi" in loader:
        out.append(Problem(f"{at}.firmware.bootloader",
                           "bios and efi are mutually exclusive, set only one"))
    efi = loader.get("efi")
    if isinstance(efi, Mapping) and efi.get("secureBoot", True) is not False:
        smm = (domain.get("features") or {}).get("smm")
        if isinstance(smm, Mapping) and smm.get("enabled") is False:
            out.append(Problem(f"{at}.firmware.bootloader.efi.secureBoot",
                               "SecureBoot requires SMM, which is disabled in features.smm"))


def _disks(spec: Mapping[str, Any], at: str, volume_names: set[str],
           out: list[Problem]) -> None:
    read_only_volumes = {
        str(v.get("name")) for v in spec.get("volumes") or []
        if isinstance(v, Mapping) and isinstance(v.get("persistentVolumeClaim"), Mapping)
        and v["persistentVolumeClaim"].get("readOnly") is True}
    seen: dict[str, int] = {}
    boot: dict[int, str] = {}
    sata = 0
    disks = ((spec.get("domain") or {}).get("devices") or {}).get("disks") or []
    for i, disk in enumerate(disks):
        f = f"{at}.domain.devices.disks[{i}]"
        if not isinstance(disk, Mapping):
            out.append(Problem(f, "must be an object"))
            continue
        name = str(disk.get("name") or "")
        if name in seen:
            out.append(Problem(f"{f}.name", f"duplicate disk name {name!r} "
                               f"(also disks[{seen[name]}])"))
        seen.setdefault(name, i)
        if name not in volume_names:
            out.append(Problem(f"{f}.name", f"volume {name!r} not found"))
        targets = [t for t in DISK_TARGETS if t in disk]
        if len(targets) > 1:
            out.append(Problem(f, f"only one of {', '.join(DISK_TARGETS)} may be set, "
                               f"got {', '.join(targets)}"))
        if "lun" in disk:
            out.append(Problem(f"{f}.lun", "LUN pass-through is not supported by rootdisk's "
                               "VM runtime (use disk or cdrom)"))
        if not targets or all((disk.get(t) or {}).get("bus") in (None, "sata")
                              for t in targets):
            sata += 1  # the bus left empty is sata, as upstream's defaults on amd64
        cache = disk.get("cache")
        if cache is not None and cache not in CACHES:
            out.append(Problem(f"{f}.cache", f"{cache!r} is not one of {', '.join(CACHES)}"))
        serial = disk.get("serial")
        if serial is not None and (not isinstance(serial, str) or not serial.isprintable()
                                   or len(serial) > 20):
            out.append(Problem(f"{f}.serial", "must be printable text of at most 20 "
                               "characters"))
        for t in targets:
            target = disk.get(t) or {}
            bus = target.get("bus")
            if t == "disk" and bus in (None, "sata") and (
                    target.get("readonly") or name in read_only_volumes):
                # QEMU's ide-hd refuses a read-only drive (the empty bus is sata)
                why = ("a SATA disk cannot be read-only" if target.get("readonly") else
                       f"volume {name!r} is a read-only claim (persistentVolumeClaim."
                       "readOnly) and a SATA disk cannot be read-only: use the virtio or "
                       "scsi bus, or a cdrom")
                out.append(Problem(f"{f}.disk.readonly" if target.get("readonly") else
                                   f"{f}.disk.bus", why))
            if bus is None:
                continue
            if bus == "ide":
                out.append(Problem(f"{f}.{t}.bus", "IDE bus is not supported"))
            elif bus not in BUSES[t]:
                out.append(Problem(f"{f}.{t}.bus", f"{bus!r} is not one of "
                                   f"{', '.join(BUSES[t])}"))
        order = disk.get("bootOrder")
        if order is not None:
            if not isinstance(order, int) or order < 1:
                out.append(Problem(f"{f}.bootOrder", f"must be 1 or more, got {order!r}"))
            elif order in boot:
                out.append(Problem(f"{f}.bootOrder", f"boot order {order} is already set "
                                   f"for disk {boot[order]!r}"))
            else:
                boot[order] = name
    # a volume without a disk is attached as a disk on the default bus (sata)
    sata += len(volume_names - set(seen))
    if sata > SATA_PORTS:
        out.append(Problem(f"{at}.domain.devices.disks", f"{sata} disks on the sata bus "
                           f"(the default), at most {SATA_PORTS} fit on q35's controller"))


def _secret_pod_volumes(spec: Mapping[str, Any], at: str, volume_names: set[str],
                        out: list[Problem]) -> None:
    """The launcher pod mounts each referenced Secret as a volume named after the VMI
    volume (``<volume>-udata``, ``-ndata``) or the Secret (``<secret>-access-cred``):
    that name must be a valid pod volume name and not one of the VMI's own volumes."""
    for pod_volume, _secret, _path in secret_volumes(spec):
        if pod_volume in volume_names:
            out.append(Problem(f"{at}.volumes", f"volume {pod_volume!r} collides with the "
                               "launcher pod's volume for a Secret of the same name"))
        elif not pod_volume.endswith("-access-cred") and (
                problem := volume_name_problem(pod_volume)) is not None:
            out.append(Problem(f"{at}.volumes", f"the launcher pod mounts a Secret as volume "
                               f"{pod_volume!r}: {problem}"))


def validate_vmi_spec(spec: Any, *, at: str = "spec") -> list[Problem]:
    out: list[Problem] = []
    if not isinstance(spec, Mapping):
        return [Problem(at, "must be an object")]
    domain = spec.get("domain")
    if not isinstance(domain, Mapping):
        return [Problem(f"{at}.domain", "required")]
    volume_names: set[str] = set()
    cloud_init: str | None = None
    for i, vol in enumerate(spec.get("volumes") or []):
        f = f"{at}.volumes[{i}]"
        if not isinstance(vol, Mapping):
            out.append(Problem(f, "must be an object"))
            continue
        raw = vol.get("name")
        name = raw if isinstance(raw, str) else ""
        if not name:
            out.append(Problem(f"{f}.name", "required" if raw in (None, "") else
                               "must be a string"))
        elif name in volume_names:
            out.append(Problem(f"{f}.name", f"duplicate volume name {name!r}"))
        elif (problem := volume_name_problem(name)) is not None:
            out.append(Problem(f"{f}.name", problem))
        volume_names.add(name)
        sources = [s for s in VOLUME_SOURCES if vol.get(s) is not None]
        if len(sources) != 1:
            got = ", ".join(sources) if sources else "none"
            out.append(Problem(f, f"must have exactly one source type set, got {got}"))
        out.extend(volume_source_problems(vol, f))
        if any(vol.get(s) is not None for s in CLOUD_INIT_SOURCES):
            if cloud_init is not None:
                out.append(Problem(f, f"a second cloud-init volume (the first is "
                                   f"{cloud_init!r}): the runtime builds one cloud-init disk"))
            cloud_init = cloud_init or name
    _disks(spec, at, volume_names, out)
    out.extend(device_problems(domain.get("devices"), f"{at}.domain.devices"))
    out.extend(feature_problems(spec, at))
    out.extend(access_credential_problems(spec, at))
    _secret_pod_volumes(spec, at, volume_names, out)
    machine = domain.get("machine")
    mtype = machine.get("type") if isinstance(machine, Mapping) else None
    if mtype not in (None, ""):  # unset: upstream's default (q35)
        problem = machine_type_problem(mtype)
        if problem is not None:
            out.append(Problem(f"{at}.domain.machine.type", problem))
    _memory(domain, f"{at}.domain", out)
    _firmware(domain, f"{at}.domain", out)
    out.extend(probe_problems(spec, at))
    _start_strategy(spec, at, out)
    return out


def _start_strategy(spec: Mapping[str, Any], at: str, out: list[Problem]) -> None:
    """Upstream's validateStartStrategy, its words."""
    strategy = spec.get("startStrategy")
    if strategy is None:
        return
    f = f"{at}.startStrategy"
    if strategy != "Paused":
        out.append(Problem(f, f"{f} is set with an unrecognized option: {strategy}",
                           verbatim=True))
    elif spec.get("livenessProbe") is not None:
        out.append(Problem(f, f"either {f} or {at}.livenessProbe should be provided.Pausing "
                              "VMI with LivenessProbe is not supported", verbatim=True))
