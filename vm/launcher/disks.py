"""Find and prepare the VMI's disks in the pod before the domain is built.

Why it exists: the configurators are pure, so the facts that need the file system are
learned here: which volumes are block devices (``/dev/<volume>``), which live on a file
system that takes O_DIRECT (cache ``none``) and which images are fully allocated
(``io=native``). An empty Filesystem PVC gets its sparse ``disk.img`` now, sized as
upstream's HostDisk (:mod:`vm.domain.hostdisk`).
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import stat
from dataclasses import dataclass
from typing import Any

from sizes import parse_bytes
from vm.domain.errors import DomainError
from vm.domain.hostdisk import disk_image_size
from vm.domain.vmi import VmiSpec
from vm.launcher.errors import DiskError

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class DiskFacts:
    block_volumes: frozenset[str]
    direct_io: frozenset[str]
    preallocated: frozenset[str]
    created: tuple[str, ...]  # disk.img files this launcher created
    tolerated: tuple[str, ...]  # volumes whose image shrank to the free space


def supports_direct_io(path: str) -> bool:
    """Whether ``path`` opens with O_DIRECT (tmpfs and some FUSE file systems refuse)."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECT", 0))
    except OSError as err:
        if err.errno == errno.EINVAL:
            return False
        raise
    os.close(fd)
    return True


def _claim_sizes(vmi: dict[str, Any], volume: str) -> tuple[int | None, int | None]:
    """requests.storage and capacity.storage from status.volumeStatus, when present."""
    statuses = (vmi.get("status") or {}).get("volumeStatus") or []
    for entry in statuses if isinstance(statuses, list) else []:
        if not isinstance(entry, dict) or entry.get("name") != volume:
            continue
        info = entry.get("persistentVolumeClaimInfo") or {}
        out: list[int | None] = []
        for key in ("requests", "capacity"):
            value = (info.get(key) or {}).get("storage") if isinstance(info, dict) else None
            try:
                out.append(parse_bytes(str(value)) if value is not None else None)
            except ValueError:
                out.append(None)
        return out[0], out[1]
    return None, None


def _create_image(path: str, size: int) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o660)
    try:
        os.ftruncate(fd, size)
    except BaseException:
        os.close(fd)
        with contextlib.suppress(OSError):
            os.unlink(path)
        raise
    os.close(fd)


def prepare(*, spec: VmiSpec, vmi: dict[str, Any], private_dir: str, dev_dir: str) -> DiskFacts:
    """:raise DiskError: a volume is missing or its image cannot be made."""
    block, direct, prealloc, created, tolerated = set(), set(), set(), [], []
    disk_names = {d.name for d in spec.disks}
    for index, volume in enumerate(spec.volumes):
        if volume.name not in disk_names or volume.kind != "claim":
            continue  # the others are images the launcher makes (scratch, cloudinit)
        field = f"spec.volumes[{index}]"
        dev = os.path.join(dev_dir, volume.name)
        try:
            st = os.stat(dev)
        except FileNotFoundError:
            st = None
        if st is not None and stat.S_ISBLK(st.st_mode):
            block.add(volume.name)
            try:
                if supports_direct_io(dev):
                    direct.add(volume.name)
                mode = os.O_RDONLY if volume.read_only else os.O_RDWR
                os.close(os.open(dev, mode | os.O_CLOEXEC))
            except OSError as err:
                raise DiskError(
                    f"{field}: cannot open the block device {dev} of claim "
                    f"{volume.claim_name!r} for "
                    f"{'reading' if volume.read_only else 'writing'}: {err.strerror} "
                    f"(uid {os.geteuid()})",
                    reason="DiskError",
                ) from err
            continue
        directory = os.path.join(private_dir, "vmi-disks", volume.name)
        image = os.path.join(directory, "disk.img")
        if not os.path.isdir(directory):
            raise DiskError(
                f"{field}: volume {volume.name!r} (claim {volume.claim_name!r}) is "
                f"neither mounted at {directory} nor a block device at {dev}",
                reason="VolumeNotFound",
            )
        try:
            if not os.path.lexists(image) and volume.read_only:
                raise DiskError(f"{field}: the read-only claim {volume.claim_name!r} has "
                                f"no disk image ({image})", reason="VolumeNotFound")
            if not os.path.lexists(image):
                vfs = os.statvfs(directory)
                requested, capacity = _claim_sizes(vmi, volume.name)
                plan = disk_image_size(
                    path=image,
                    field=field,
                    requested=requested,
                    capacity=capacity,
                    available=vfs.f_bavail * vfs.f_frsize,
                )
                _create_image(image, plan.size)
                created.append(image)
                if plan.tolerated:
                    tolerated.append(volume.name)
                logger.info("created sparse %s of %d bytes", image, plan.size)
            img = os.stat(image, follow_symlinks=False)
            if not stat.S_ISREG(img.st_mode):
                raise DiskError(f"{field}: {image} is not a regular file", reason="InvalidDisk")
            if supports_direct_io(image):
                direct.add(volume.name)
            if img.st_size and img.st_blocks * 512 >= img.st_size:
                prealloc.add(volume.name)
        except DomainError as err:
            raise DiskError(str(err), reason="InsufficientSpace") from err
        except OSError as err:
            raise DiskError(
                f"{field}: cannot use {image}: {err.strerror}", reason="DiskError"
            ) from err
    return DiskFacts(
        frozenset(block), frozenset(direct), frozenset(prealloc), tuple(created), tuple(tolerated)
    )
