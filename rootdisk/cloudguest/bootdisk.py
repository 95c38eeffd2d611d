"""Partitioned, BIOS-bootable disk images written with no loop device and no mount.

A DOS partition table (sfdisk on the file), a FAT16 boot partition made in place
(``mkfs.vfat --offset``) and filled with mtools, syslinux installed into it
(``syslinux --offset``) with syslinux's MBR code, and optionally an ext4 partition made
from a directory tree (``mkfs.ext4 -d`` at ``-E offset=``). Host tools: fdisk, dosfstools,
mtools, syslinux, syslinux-common, e2fsprogs (the Makefile's APT_PACKAGES).
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterable
from pathlib import Path

SYSLINUX_MBR = Path("/usr/lib/syslinux/mbr/mbr.bin")
TOOLS_HINT = "install fdisk dosfstools mtools syslinux syslinux-common e2fsprogs (make setup)"


class DiskBuildError(RuntimeError):
    """A disk could not be written: the message names the tool and its error."""


def run(
    argv: list[str],
    *,
    stdin: bytes | None = None,
    env: dict[str, str] | None = None,
    cwd: Path | None = None,
    timeout: float = 600,
    hint: str = TOOLS_HINT,
) -> bytes:
    """Run a tool (bounded); its stdout, or a :class:`DiskBuildError` with its stderr."""
    try:
        done = subprocess.run(
            argv,
            input=stdin,
            env=env,
            cwd=cwd,
            check=True,
            capture_output=True,
            timeout=timeout,
        )
    except FileNotFoundError as err:
        raise DiskBuildError(f"{argv[0]} not found: {hint}") from err
    except subprocess.TimeoutExpired as err:
        raise DiskBuildError(f"{' '.join(argv[:3])}… did not finish in {timeout:.0f}s") from err
    except subprocess.CalledProcessError as err:
        tail = err.stderr.decode(errors="replace")[-1500:]
        raise DiskBuildError(f"{' '.join(argv[:3])}… failed: {tail}") from err
    return done.stdout


def partition(disk: Path, size: int, script: str) -> None:
    """A new sparse file of ``size`` bytes holding the partition table ``script`` (sfdisk)."""
    with open(disk, "wb") as f:
        f.truncate(size)
    run(["sfdisk", "--no-reread", "--no-tell-kernel", str(disk)], stdin=script.encode())


def fat_boot_partition(disk: Path, offset: int, size: int, files: Iterable[Path]) -> None:
    """A FAT16 file system at ``offset`` holding ``files``, made bootable by syslinux, and
    syslinux's MBR code in the disk's first 440 bytes (the partition table stays)."""
    if offset % 512 or size % 1024:
        raise ValueError("the FAT partition's offset and size must be whole sectors / KiB")
    sector = offset // 512
    run(
        [
            "mkfs.vfat",
            "-F",
            "16",
            "-h",
            str(sector),
            "--offset",
            str(sector),
            str(disk),
            str(size // 1024),
        ]
    )
    env = {**os.environ, "MTOOLS_SKIP_CHECK": "1"}
    image = f"{disk}@@{offset}"
    for path in files:
        run(["mcopy", "-i", image, str(path), f"::{path.name}"], env=env)
    run(["syslinux", "--offset", str(offset), "--install", str(disk)])
    mbr = SYSLINUX_MBR.read_bytes()[:440]
    with open(disk, "r+b") as f:
        f.write(mbr)


def ext4_partition(disk: Path, offset: int, size: int, tree: Path, label: str) -> None:
    """An ext4 file system at ``offset`` of ``size`` bytes with ``tree``'s files (owners,
    modes, links and device nodes kept); inode tables written now, not at first mount."""
    if offset % 4096 or size % 4096:
        raise ValueError("the ext4 partition's offset and size must be whole 4 KiB blocks")
    run(
        [
            "mkfs.ext4",
            "-q",
            "-F",
            "-b",
            "4096",
            "-L",
            label,
            "-d",
            str(tree),
            "-E",
            f"offset={offset},lazy_itable_init=0,lazy_journal_init=0",
            str(disk),
            str(size // 4096),
        ]
    )
