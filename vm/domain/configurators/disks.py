"""Disks: bus, device name, source path, cache and I/O mode, boot order, alias.

Upstream's rules, followed here:
- a Filesystem PVC is ``<private-dir>/vmi-disks/<volume>/disk.img`` (raw), a Block PVC
  is ``/dev/<volume>``; a dataVolume volume is its PVC of the same name;
- device names are ``vd*`` for virtio and ``sd*`` for SATA and SCSI, given in disk order
  per prefix; SCSI disks sit on controller 0 at unit N; SATA disks on the q35 AHCI
  controller's ports (six of them);
- cache ``none`` where the storage takes O_DIRECT, else ``writethrough``; asking for
  ``none`` where it cannot work is an error, as upstream; ``io=native`` only with
  cache ``none`` on a block device or a preallocated image;
- aliases are ``ua-<disk name>`` (libvirt keeps user aliases only with that prefix);
- emptyDisk and ephemeral volumes are qcow2 files the launcher made (the latter an
  overlay whose backing is the claim's raw image, opened read-only); a cloud-init volume
  is its raw ISO, read-only (a SATA ``disk`` cannot be, QEMU's ide-hd refuses a
  read-only drive: the guest then writes its own copy, made anew at each start).
"""

from __future__ import annotations

import dataclasses
import posixpath
import string

from vm.domain.errors import DomainError
from vm.domain.model import Disk, Domain, ScsiController
from vm.domain.options import BuildOptions
from vm.domain.vmi import DiskSpec, VmiSpec

SATA_PORTS = 6


def device_name(prefix: str, index: int) -> str:
    """``vda``…``vdz``, ``vdaa``…: the kernel's (and libvirt's) naming."""
    letters = ""
    index += 1
    while index:
        index, rem = divmod(index - 1, 26)
        letters = string.ascii_lowercase[rem] + letters
    return prefix + letters


def disk_path(*, volume: str, block: bool, private_dir: str, dev_dir: str = "/dev") -> str:
    if block:
        return posixpath.join(dev_dir, volume)
    return posixpath.join(private_dir, "vmi-disks", volume, "disk.img")


def _cache(spec: DiskSpec, *, direct: bool, path: str, field: str) -> str:
    if spec.cache == "none" and not direct:
        raise DomainError(
            field,
            "Unable to use 'none' cache mode, file system where "
            f"{path} is stored does not support direct I/O",
        )
    if spec.cache is not None:
        return spec.cache
    return "none" if direct else "writethrough"


def configure(*, vmi: VmiSpec, options: BuildOptions, domain: Domain) -> Domain:
    counters: dict[str, int] = {}
    disks: list[Disk] = []
    cloud_init_volumes = {v.name for v in vmi.volumes if v.kind == "cloudInit"}
    read_only_claims = {v.name for v in vmi.volumes if v.read_only}
    for i, spec in enumerate(vmi.disks):
        field = f"spec.domain.devices.disks[{i}]"
        prefix = "vd" if spec.bus == "virtio" else "sd"
        name_index = counters.get(prefix, 0)
        counters[prefix] = name_index + 1
        unit = counters.get(spec.bus + "-unit", 0)
        counters[spec.bus + "-unit"] = unit + 1
        if spec.bus == "sata" and unit >= SATA_PORTS:
            raise DomainError(f"{field}.{spec.kind}.bus", f"at most {SATA_PORTS} SATA disks fit")
        prepared = next((p for p in options.prepared if p.volume == spec.name), None)
        block = prepared is None and spec.name in options.block_volumes
        path = prepared.path if prepared is not None else disk_path(
            volume=spec.name, block=block, private_dir=options.private_dir, dev_dir=options.dev_dir
        )
        cloud_init = spec.name in cloud_init_volumes
        read_only = spec.read_only or spec.name in read_only_claims or (
            cloud_init and (spec.kind == "cdrom" or spec.bus != "sata"))
        if read_only and spec.kind == "disk" and spec.bus == "sata" and not cloud_init:
            raise DomainError(f"{field}.disk.bus", "a SATA disk cannot be read-only "
                              "(a read-only claim needs virtio, scsi or a cdrom)")
        cache = _cache(
            spec, direct=spec.name in options.direct_io, path=path, field=f"{field}.cache"
        )
        native = cache == "none" and (block or spec.name in options.preallocated)
        disks.append(
            Disk(
                alias=f"ua-{spec.name}",
                device="cdrom" if spec.kind == "cdrom" else "disk",
                bus=spec.bus,
                target=device_name(prefix, name_index),
                source_kind="block" if block else "file",
                path=path,
                cache=cache,  # type: ignore[arg-type]
                io="native" if native else None,
                boot_order=spec.boot_order,
                read_only=read_only,
                serial=spec.serial,
                unit=unit,
                discard=None if spec.kind == "cdrom" or cloud_init else "unmap",
                format=prepared.format if prepared is not None else "raw",
                backing=prepared.backing if prepared is not None else None,
            )
        )
    controllers = (ScsiController(),) if any(d.bus == "scsi" for d in disks) else ()
    return dataclasses.replace(domain, disks=tuple(disks), controllers=controllers)
