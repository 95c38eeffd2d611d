"""Thin wrappers over the system tools the volumes are made of.

Loop devices, mounts and filesystems are created by the same tools an administrator
would use (``losetup``, ``mount``, ``mkfs.*``, ``resize2fs``), so what the provisioner
does can be inspected and undone by hand. This module only runs them and parses their
output; it decides nothing.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass

from localcluster.storage.errors import CommandError

logger = logging.getLogger(__name__)

COMMAND_TIMEOUT = 120.0
"""Seconds any single tool may take; mkfs of a large sparse image takes well under 10."""


def run(argv: Sequence[str], *, ok: tuple[int, ...] = (0,)) -> str:
    """Run ``argv``, return its stdout, raise :class:`CommandError` unless it exits
    with one of ``ok``."""
    logger.debug("running %s", " ".join(argv))
    proc = subprocess.run(
        list(argv), capture_output=True, text=True, timeout=COMMAND_TIMEOUT, check=False
    )
    if proc.returncode not in ok:
        raise CommandError(argv, proc.returncode, proc.stderr or proc.stdout)
    return proc.stdout


@dataclass(frozen=True)
class LoopDevice:
    name: str
    """The device node, e.g. ``/dev/loop3``."""
    backing_file: str
    """The file it serves, as the kernel reports it (a removed file loses its name)."""


def list_loop_devices() -> list[LoopDevice]:
    """Every attached loop device on the machine."""
    out = run(["losetup", "--json", "--list", "--output", "NAME,BACK-FILE"])
    if not out.strip():
        return []
    devices = json.loads(out).get("loopdevices", [])
    result = []
    for dev in devices:
        back = dev.get("back-file") or ""
        back = back.removesuffix(" (deleted)")
        result.append(LoopDevice(name=dev["name"], backing_file=back))
    return result


def attach_loop(path: str) -> str:
    """Attach ``path`` to a free loop device and return the device node.

    Direct I/O: the device reads and writes its backing file without a second page cache
    under the one of the filesystem (or the VM) on top. Buffered, every write was copied
    twice and flushed twice; an import into a volume took 6-7 % longer than into a file
    of the host's filesystem (bench/datavolume.py). Where the backing filesystem refuses
    O_DIRECT, the device stays buffered (a separate step, so a refusal never leaves an
    attached device behind an error)."""
    device = run(["losetup", "--find", "--show", path]).strip()
    try:
        run(["losetup", "--direct-io=on", device])
    except CommandError as err:
        logger.info("loop device %s stays buffered: %s", device, err)
    return device


def detach_loop(device: str) -> None:
    """Detach a loop device; a busy one is detached when its last user goes away."""
    run(["losetup", "--detach", device])


def refresh_loop_size(device: str) -> None:
    """Make the loop device see its backing file's new size."""
    run(["losetup", "--set-capacity", device])


def mounted_paths() -> list[str]:
    """Mount points in this mount namespace, from /proc/self/mountinfo."""
    paths = []
    with open("/proc/self/mountinfo", encoding="utf-8") as fh:
        for line in fh:
            fields = line.split()
            # Field 5 is the mount point, with spaces etc. octal-escaped.
            paths.append(fields[4].encode().decode("unicode_escape"))
    return paths


def is_mounted(path: str) -> bool:
    return os.path.realpath(path) in mounted_paths()


def mount(source: str, target: str, *, fstype: str | None = None) -> None:
    argv = ["mount"]
    if fstype:
        argv += ["-t", fstype]
    run([*argv, source, target])


def umount(target: str) -> None:
    run(["umount", target])


def make_shared(target: str) -> None:
    """Make the mount at ``target`` a shared one, so that a mount namespace made from
    this one later (a pod's sandbox, which then turns its copies into slaves) receives
    the unmounts made here instead of keeping a private copy that holds the filesystem.
    A directory that is not a mount point yet is bound onto itself first."""
    if not os.path.ismount(target):
        run(["mount", "--bind", target, target])
    run(["mount", "--make-shared", target])


def sparse_file(path: str, size: int) -> None:
    """Create or grow ``path`` to ``size`` bytes without allocating them."""
    with open(path, "ab") as fh:
        fh.truncate(size)


def mkfs_ext4(target: str) -> None:
    """An ext4 whose overhead is small and nearly constant (see classes.py)."""
    run(["mkfs.ext4", "-q", "-F", "-m", "0", "-O", "^has_journal", "-T", "largefile",
         "-E", "nodiscard", target])


def mkfs_xfs_reflink(target: str) -> None:
    run(["mkfs.xfs", "-q", "-f", "-m", "reflink=1", target])


def grow_ext4(device: str) -> None:
    """Grow a (mounted or not) ext4 to fill its device."""
    run(["resize2fs", device])


def grow_ext4_offline(target: str) -> None:
    """Grow an unmounted ext4 (image file or device) to fill it; resize2fs wants a
    freshly checked filesystem first. A copy of a mounted journal-less ext4 is marked
    unclean, so e2fsck's "errors corrected" (1) is success here."""
    run(["e2fsck", "-f", "-y", target], ok=(0, 1))
    run(["resize2fs", target])


def reflink_copy(source: str, target: str) -> None:
    """An instant copy-on-write copy; fails where the filesystem cannot reflink."""
    run(["cp", "--reflink=always", source, target])


def sparse_copy(source: str, target: str) -> None:
    run(["cp", "--sparse=always", source, target])


def freeze(mountpoint: str) -> None:
    run(["fsfreeze", "--freeze", mountpoint])


def thaw(mountpoint: str) -> None:
    run(["fsfreeze", "--unfreeze", mountpoint])
