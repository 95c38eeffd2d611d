"""Resource limits for container processes, with whatever this machine allows.

cgroup v2 (``memory.max``, ``cpu.max``) when the unified hierarchy is mounted at
/sys/fs/cgroup and writable; else cgroup v1's memory and cpu controllers (as on hosts
booted in hybrid mode, like the CI machines here); else no limit, logged once. A limit
is applied to the container's whole process tree: the child joins its cgroup before it
execs anything.
"""

from __future__ import annotations

import contextlib
import logging
import os
from dataclasses import dataclass

logger = logging.getLogger(__name__)

CGROUP_ROOT = "/sys/fs/cgroup"
CFS_PERIOD_US = 100_000


@dataclass(frozen=True)
class Limits:
    memory: int | None = None
    """Bytes."""
    cpu_millis: int | None = None
    """Thousandths of a CPU."""


def _writable_dir(path: str) -> bool:
    return os.path.isdir(path) and os.access(path, os.W_OK)


def _write(path: str, value: str) -> None:
    with open(path, "w", encoding="ascii") as fh:
        fh.write(value)


class Cgroup:
    """The cgroup(s) of one container; ``procs`` files the child writes itself into."""

    def __init__(self, dirs: list[str], version: int) -> None:
        self.dirs = dirs
        self.version = version

    @property
    def procs_files(self) -> list[str]:
        return [os.path.join(d, "cgroup.procs") for d in self.dirs]

    def join(self) -> None:
        """Called in the child between fork and exec."""
        for f in self.procs_files:
            _write(f, "0")

    def oom_killed(self) -> bool:
        for d in self.dirs:
            for name, key in (("memory.events", "oom_kill"), ("memory.oom_control", "oom_kill")):
                with contextlib.suppress(OSError), open(
                    os.path.join(d, name), encoding="ascii"
                ) as fh:
                    for line in fh:
                        k, _, v = line.partition(" ")
                        if k == key and int(v) > 0:
                            return True
        return False

    def remove(self) -> None:
        for d in self.dirs:
            try:
                os.rmdir(d)
            except OSError as err:
                logger.debug("could not remove cgroup %s: %s", d, err)


class CgroupManager:
    """Creates per-container cgroups under ``<hierarchy>/<prefix>/``."""

    def __init__(self, prefix: str = "localcluster", root: str = CGROUP_ROOT) -> None:
        self.prefix = prefix
        self.root = root
        self.version = self._detect()
        self._warned = False

    def _detect(self) -> int:
        if os.path.exists(os.path.join(self.root, "cgroup.controllers")) and _writable_dir(
            self.root
        ):
            return 2
        if _writable_dir(os.path.join(self.root, "memory")):
            return 1
        return 0

    def cleanup(self, *, remove_parent: bool = False) -> None:
        """Remove the empty cgroups under this manager's parent (left by containers of a
        killed run, or of this run once stopped), and the parent too if asked; a cgroup
        still holding a process stays (rmdir refuses it)."""
        for sub in ("", "memory", "cpu"):
            parent = os.path.join(self.root, sub, self.prefix)
            if not os.path.isdir(parent):
                continue
            for name in os.listdir(parent):
                path = os.path.join(parent, name)
                if os.path.isdir(path):
                    with contextlib.suppress(OSError):
                        os.rmdir(path)
            if remove_parent:
                with contextlib.suppress(OSError):
                    os.rmdir(parent)

    def create(self, name: str, limits: Limits) -> Cgroup | None:
        """A cgroup holding ``limits``; None when there is nothing to limit or no way to."""
        if limits.memory is None and limits.cpu_millis is None:
            return None
        try:
            if self.version == 2:
                return self._create_v2(name, limits)
            if self.version == 1:
                return self._create_v1(name, limits)
        except OSError as err:
            logger.warning("cannot apply limits to %s (%s); running it unlimited", name, err)
            return None
        if not self._warned:
            logger.warning("no writable cgroup hierarchy: container limits are not enforced")
            self._warned = True
        return None

    def _create_v2(self, name: str, limits: Limits) -> Cgroup:
        parent = os.path.join(self.root, self.prefix)
        os.makedirs(parent, exist_ok=True)
        with contextlib.suppress(OSError):
            _write(os.path.join(parent, "cgroup.subtree_control"), "+memory +cpu")
        d = os.path.join(parent, name)
        os.makedirs(d, exist_ok=True)
        if limits.memory is not None:
            _write(os.path.join(d, "memory.max"), str(limits.memory))
        if limits.cpu_millis is not None:
            quota = max(1000, limits.cpu_millis * CFS_PERIOD_US // 1000)
            _write(os.path.join(d, "cpu.max"), f"{quota} {CFS_PERIOD_US}")
        return Cgroup([d], 2)

    def _create_v1(self, name: str, limits: Limits) -> Cgroup:
        dirs = []
        if limits.memory is not None:
            d = os.path.join(self.root, "memory", self.prefix, name)
            os.makedirs(d, exist_ok=True)
            _write(os.path.join(d, "memory.limit_in_bytes"), str(limits.memory))
            dirs.append(d)
        cpu_root = os.path.join(self.root, "cpu")
        if limits.cpu_millis is not None and _writable_dir(cpu_root):
            d = os.path.join(cpu_root, self.prefix, name)
            os.makedirs(d, exist_ok=True)
            quota = max(1000, limits.cpu_millis * CFS_PERIOD_US // 1000)
            _write(os.path.join(d, "cpu.cfs_period_us"), str(CFS_PERIOD_US))
            _write(os.path.join(d, "cpu.cfs_quota_us"), str(quota))
            dirs.append(d)
        return Cgroup(dirs, 1)
