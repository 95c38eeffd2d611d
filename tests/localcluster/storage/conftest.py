"""Fixtures for the volume layer: a data dir whose mounts and loop devices are always
undone, even when a test fails half-way.

The fixtures skip where volumes cannot be made (not root, no losetup/mkfs): a
``pytestmark`` here would do nothing, pytest reads it only in test modules."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Iterator

import pytest

from localcluster.storage import system
from localcluster.storage.volumes import GiB, VolumeManager

TOOLS = ("losetup", "mkfs.ext4", "mount")


def skip_unless_volumes_can_be_made() -> None:
    if os.geteuid() != 0:
        pytest.skip("volumes need root (mount, losetup)")
    missing = [t for t in TOOLS if shutil.which(t) is None]
    if missing:
        pytest.skip(f"volumes need {', '.join(missing)} (util-linux, e2fsprogs)")


def leftovers(root: str) -> tuple[list[str], list[str]]:
    """Mounts and loop devices that still point into ``root``."""
    root = os.path.realpath(root) + os.sep
    mounts = [p for p in system.mounted_paths() if p.startswith(root)]
    loops = [d.name for d in system.list_loop_devices() if d.backing_file.startswith(root)]
    return mounts, loops


def settled_leftovers(root: str, *, timeout: float = 10.0) -> tuple[list[str], list[str]]:
    """:func:`leftovers` once none are left or ``timeout`` has passed. The kernel clears an
    auto-clear loop device after its last close, asynchronously: on a busy machine that
    can trail the umount by a moment."""
    deadline = time.monotonic() + timeout
    found = leftovers(root)
    while found != ([], []) and time.monotonic() < deadline:
        time.sleep(0.2)
        found = leftovers(root)
    return found


def namespace_holder(propagation: str) -> subprocess.Popen[bytes]:
    """A process in a mount namespace of its own, made now (``unshare``), whose copies
    of this namespace's mounts have ``propagation``."""
    holder = subprocess.Popen(["unshare", "--mount", "--propagation", propagation, "--",
                               "sleep", "60"])
    deadline = time.monotonic() + 10
    while os.readlink(f"/proc/{holder.pid}/ns/mnt") == os.readlink("/proc/self/ns/mnt"):
        assert time.monotonic() < deadline, "unshare did not enter its namespace"
        time.sleep(0.01)
    return holder


@pytest.fixture
def data_dir(tmp_path: os.PathLike[str]) -> Iterator[str]:
    skip_unless_volumes_can_be_made()
    path = str(tmp_path)
    yield path
    VolumeManager(path).cleanup()
    assert settled_leftovers(path) == ([], [])


@pytest.fixture
def volumes(data_dir: str) -> Iterator[VolumeManager]:
    mgr = VolumeManager(data_dir, reflink_pool_size=4 * GiB)
    mgr.start()
    try:
        yield mgr
    finally:
        mgr.stop()
