"""Scratch disks the launcher makes with ``qemu-img``: emptyDisk and ephemeral volumes.

Why it exists: both live only as long as the pod (upstream's ``pkg/emptydisk`` and
``pkg/ephemeral-disk``, KubeVirt d923fdb815cd):

- emptyDisk: a sparse qcow2 of the capacity (rounded down to 1 MiB when parsed) at
  ``<runtime dir>/empty-disks/<volume>.qcow2`` (the pod's ``libvirt-runtime`` emptyDir),
  made only when missing;
- ephemeral: a qcow2 overlay ``<ephemeral dir>/disk-data/<volume>/disk.qcow2`` (0640)
  over the claim's raw image (``vmi-disks/<volume>/disk.img``, or the block device
  ``/dev/<volume>``), created with ``-b <backing> -F raw``. The claim is mounted
  read-only, so the guest's writes go to the overlay alone and go with the pod; the
  golden image is never written, and several VMs can share it.

Each ``qemu-img`` run is bounded by :data:`QEMU_IMG_TIMEOUT`.
"""

from __future__ import annotations

import json
import logging
import os
import stat
import subprocess

from vm.domain.model import Backing
from vm.domain.options import PreparedDisk
from vm.domain.vmi import VmiSpec
from vm.launcher.errors import DiskError

logger = logging.getLogger(__name__)

QEMU_IMG = "qemu-img"
QEMU_IMG_TIMEOUT = 60.0


def _qemu_img(argv: list[str], what: str, qemu_img: str) -> None:
    try:
        done = subprocess.run([qemu_img, *argv], capture_output=True, check=False,
                              timeout=QEMU_IMG_TIMEOUT, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired as err:
        raise DiskError(f"{what}: qemu-img ran over {QEMU_IMG_TIMEOUT:g} s") from err
    except OSError as err:
        raise DiskError(f"{what}: cannot run {qemu_img}: {err.strerror}") from err
    if done.returncode != 0:
        tail = done.stderr.decode(errors="replace").strip()[-500:]
        raise DiskError(f"{what}: qemu-img failed: {tail}")


def empty_disk_path(runtime_dir: str, volume: str) -> str:
    return os.path.join(runtime_dir, "empty-disks", f"{volume}.qcow2")


def overlay_path(ephemeral_dir: str, volume: str) -> str:
    return os.path.join(ephemeral_dir, "disk-data", volume, "disk.qcow2")


def _backing(vmi: VmiSpec, index: int, *, private_dir: str, dev_dir: str) -> Backing:
    volume = vmi.volumes[index]
    field = f"spec.volumes[{index}].ephemeral"
    dev = os.path.join(dev_dir, volume.name)
    try:
        if stat.S_ISBLK(os.stat(dev).st_mode):
            return Backing(path=dev, source_kind="block")
    except FileNotFoundError:
        pass
    image = os.path.join(private_dir, "vmi-disks", volume.name, "disk.img")
    try:
        st = os.stat(image, follow_symlinks=False)
    except FileNotFoundError:
        raise DiskError(f"{field}: claim {volume.claim_name!r} has no disk image ({image} "
                        f"or the block device {dev})", reason="VolumeNotFound") from None
    if not stat.S_ISREG(st.st_mode):
        raise DiskError(f"{field}: {image} is not a regular file", reason="InvalidDisk")
    return Backing(path=image)


MAX_INFO_BYTES = 1024 * 1024


def container_disk_file(root: str, path: str, field: str) -> str:
    """The disk of a containerDisk image volume mounted at ``root``: ``path`` when the
    VMI names one, else the one regular file under ``/disk`` (upstream's rule), never
    outside ``root`` (symbolic links are not followed out of it)."""
    if path:
        candidate = os.path.realpath(os.path.join(root, path.lstrip("/")))
        if os.path.commonpath([candidate, os.path.realpath(root)]) != os.path.realpath(root):
            raise DiskError(f"{field}.path: {path} leads out of the image", reason="InvalidDisk")
    else:
        disk_dir = os.path.join(root, "disk")
        try:
            names = sorted(n for n in os.listdir(disk_dir)
                           if os.path.isfile(os.path.join(disk_dir, n))
                           and not os.path.islink(os.path.join(disk_dir, n)))
        except FileNotFoundError:
            raise DiskError(f"{field}: the image has no /disk directory",
                            reason="InvalidDisk") from None
        if not names:
            raise DiskError(f"{field}: no disk file under /disk in the image",
                            reason="InvalidDisk")
        candidate = os.path.join(disk_dir, names[0])
    try:
        st = os.stat(candidate, follow_symlinks=False)
    except FileNotFoundError:
        raise DiskError(f"{field}: {path or candidate} is not in the image",
                        reason="InvalidDisk") from None
    if not stat.S_ISREG(st.st_mode):
        raise DiskError(f"{field}: {path or candidate} is not a regular file",
                        reason="InvalidDisk")
    return candidate


def _container_disk(vmi: VmiSpec, index: int, image_volume_dir: str, qemu_img: str) -> Backing:
    """The image's disk as a read-only backing: qcow2 or raw (``qemu-img info`` says which,
    the format probed once, never trusted further); one naming a backing or data file of
    its own is refused (the image is not trusted: it could name a host file)."""
    volume = vmi.volumes[index]
    field = f"spec.volumes[{index}].containerDisk"
    disk = container_disk_file(os.path.join(image_volume_dir, f"disk_{index}"), volume.path,
                               field)
    try:
        done = subprocess.run([qemu_img, "info", "--output=json", disk], capture_output=True,
                              check=False, timeout=QEMU_IMG_TIMEOUT, stdin=subprocess.DEVNULL)
    except (subprocess.TimeoutExpired, OSError) as err:
        raise DiskError(f"{field}: qemu-img info: {err}") from err
    if done.returncode != 0:
        raise DiskError(f"{field}: qemu-img info: "
                        f"{done.stderr.decode(errors='replace').strip()[-300:]}",
                        reason="InvalidDisk")
    try:
        info = json.loads(done.stdout[:MAX_INFO_BYTES])
    except ValueError as err:
        raise DiskError(f"{field}: qemu-img info gave no JSON", reason="InvalidDisk") from err
    fmt = info.get("format")
    if fmt not in ("raw", "qcow2"):
        raise DiskError(f"{field}: the disk is {fmt!r}, not qcow2 or raw",
                        reason="InvalidDisk")
    specific = ((info.get("format-specific") or {}).get("data") or {})
    if info.get("backing-filename") or info.get("full-backing-filename") \
            or specific.get("data-file"):
        raise DiskError(f"{field}: the image's disk names a backing or data file of its own",
                        reason="InvalidDisk")
    return Backing(path=disk, format=fmt)


def prepare(vmi: VmiSpec, *, private_dir: str, dev_dir: str, runtime_dir: str,
            ephemeral_dir: str, image_volume_dir: str = "/var/run/kubevirt-image-volume",
            qemu_img: str = QEMU_IMG) -> tuple[PreparedDisk, ...]:
    """Make the emptyDisk images and ephemeral overlays of ``vmi``.

    :raise DiskError: naming the volume.
    """
    out = []
    for index, volume in enumerate(vmi.volumes):
        what = f"spec.volumes[{index}] ({volume.name})"
        try:
            disk = _prepare_one(vmi, index, what, private_dir=private_dir, dev_dir=dev_dir,
                                runtime_dir=runtime_dir, ephemeral_dir=ephemeral_dir,
                                image_volume_dir=image_volume_dir, qemu_img=qemu_img)
        except OSError as err:
            raise DiskError(f"{what}: {err.strerror}: {err.filename}") from err
        if disk is not None:
            out.append(disk)
    return tuple(out)


def _prepare_one(vmi: VmiSpec, index: int, what: str, *, private_dir: str, dev_dir: str,
                 runtime_dir: str, ephemeral_dir: str, image_volume_dir: str,
                 qemu_img: str) -> PreparedDisk | None:
    volume = vmi.volumes[index]
    if volume.kind == "emptyDisk":
        path = empty_disk_path(runtime_dir, volume.name)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        if not os.path.lexists(path):
            _qemu_img(["create", "-f", "qcow2", path, str(volume.capacity)], what,
                      qemu_img)
            logger.info("created emptyDisk %s of %d bytes", path, volume.capacity)
        return PreparedDisk(volume=volume.name, path=path, format="qcow2")
    if volume.kind in ("ephemeral", "containerDisk"):
        backing = (_container_disk(vmi, index, image_volume_dir, qemu_img)
                   if volume.kind == "containerDisk"
                   else _backing(vmi, index, private_dir=private_dir, dev_dir=dev_dir))
        path = overlay_path(ephemeral_dir, volume.name)
        os.makedirs(os.path.dirname(path), mode=0o750, exist_ok=True)
        if not os.path.lexists(path):
            _qemu_img(["create", "-f", "qcow2", "-b", backing.path, "-F", backing.format,
                       path], what, qemu_img)
            os.chmod(path, 0o640)
            logger.info("created overlay %s over %s", path, backing.path)
        return PreparedDisk(volume=volume.name, path=path, format="qcow2",
                            backing=backing)
    return None
