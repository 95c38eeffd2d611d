"""Resource limits for container processes, with whatever this machine allows.

cgroup v2 (``memory.max``, ``cpu.max``) when the unified hierarchy is mounted at
/sys/fs/cgroup and writable; else cgroup v1's memory and cpu controllers (as on hosts
booted in hybrid mode, like the CI machines here); else no limit, logged once. A limit
is applied to the container's whole process tree: the child joins its cgroup before it
execs anything.

The pod's process limit (the kubelet's ``podPidsLimit``) is one ``pids.max`` for all
the pod's containers: a pod cgroup (:meth:`CgroupManager.pod`) in the pids hierarchy of
cgroup v1, or, under v2, the parent of the pod's container cgroups (which then always
exist, limits or not, as v2 keeps processes in leaves only).
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import time
from dataclasses import dataclass

logger = logging.getLogger(__name__)

CGROUP_ROOT = "/sys/fs/cgroup"
REMOVE_WITHIN = 5.0
"""Seconds a pod cgroup's removal waits for its last processes to be gone."""
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
    """The cgroup(s) of one container; ``procs`` files the child writes itself into.
    ``shared`` are cgroups it joins without owning them (its pod's pids cgroup)."""

    def __init__(self, dirs: list[str], version: int, shared: tuple[str, ...] = ()) -> None:
        self.dirs = dirs
        self.version = version
        self.shared = shared

    @property
    def procs_files(self) -> list[str]:
        return [os.path.join(d, "cgroup.procs") for d in (*self.dirs, *self.shared)]

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


class PodCgroup:
    """The cgroup holding a pod's ``pids.max``: its containers join it (v1) or are made
    under it (v2). Removed once the pod's worker ends."""

    def __init__(self, path: str, version: int) -> None:
        self.path = path
        self.version = version

    def pids_current(self) -> int | None:
        try:
            with open(os.path.join(self.path, "pids.current"), encoding="ascii") as fh:
                return int(fh.read().strip())
        except (OSError, ValueError):
            return None

    def remove(self, within: float = REMOVE_WITHIN) -> None:
        """rmdir, retried for ``within`` seconds while the kernel still counts processes
        of the pod's killed PID namespace in it (EBUSY); else left, logged, for the
        node's sweep."""
        deadline = time.monotonic() + within
        while True:
            try:
                os.rmdir(self.path)
                return
            except FileNotFoundError:
                return
            except OSError as err:
                if err.errno != errno.EBUSY or time.monotonic() >= deadline:
                    logger.debug("could not remove pod cgroup %s: %s", self.path, err)
                    return
            time.sleep(0.05)


class CgroupManager:
    """Creates per-container cgroups under ``<hierarchy>/<prefix>/``."""

    def __init__(self, prefix: str = "localcluster", root: str = CGROUP_ROOT) -> None:
        self.prefix = prefix
        self.root = root
        self.version = self._detect()
        self.pids_version = self._detect_pids()
        """2 or 1: where pod cgroups with ``pids.max`` are made; 0: nowhere."""
        self._warned = False
        self._pids_warned = False

    def _detect_pids(self) -> int:
        if self.version == 2:
            try:
                with open(os.path.join(self.root, "cgroup.controllers"),
                          encoding="ascii") as fh:
                    return 2 if "pids" in fh.read().split() else 0
            except OSError:
                return 0
        return 1 if _writable_dir(os.path.join(self.root, "pids")) else 0

    def pod_path(self, key: str) -> str:
        """Where pod ``key``'s cgroup is (or would be)."""
        if self.pids_version == 2:
            return os.path.join(self.root, self.prefix, f"pod{key}")
        return os.path.join(self.root, "pids", self.prefix, f"pod{key}")

    def pod(self, key: str, pids_max: int | None) -> PodCgroup | None:
        """The pod cgroup of pod ``key`` with ``pids.max`` (None or < 1: no limit, no
        cgroup); None, logged once, where no pids controller can be used."""
        if pids_max is None or pids_max < 1:
            return None
        try:
            if self.pids_version == 2:
                parent = os.path.join(self.root, self.prefix)
                os.makedirs(parent, exist_ok=True)
                with contextlib.suppress(OSError):
                    _write(os.path.join(parent, "cgroup.subtree_control"),
                           "+memory +cpu +pids")
                path = self.pod_path(key)
                os.makedirs(path, exist_ok=True)
                with contextlib.suppress(OSError):
                    _write(os.path.join(path, "cgroup.subtree_control"), "+memory +cpu")
            elif self.pids_version == 1:
                path = self.pod_path(key)
                os.makedirs(path, exist_ok=True)
            else:
                if not self._pids_warned:
                    logger.warning("no pids cgroup controller: the pod pids limit is not "
                                   "enforced")
                    self._pids_warned = True
                return None
            _write(os.path.join(path, "pids.max"), str(pids_max))
        except OSError as err:
            logger.warning("cannot apply the pids limit to pod %s (%s)", key, err)
            return None
        return PodCgroup(path, self.pids_version)

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
        for sub in ("", "memory", "cpu", "pids"):
            parent = os.path.join(self.root, sub, self.prefix)
            if not os.path.isdir(parent):
                continue
            for name in os.listdir(parent):
                path = os.path.join(parent, name)
                if not os.path.isdir(path):
                    continue
                if name.startswith("pod"):  # a pod cgroup: its containers' first (v2)
                    for child in os.listdir(path):
                        if os.path.isdir(os.path.join(path, child)):
                            with contextlib.suppress(OSError):
                                os.rmdir(os.path.join(path, child))
                with contextlib.suppress(OSError):
                    os.rmdir(path)
            if remove_parent:
                with contextlib.suppress(OSError):
                    os.rmdir(parent)

    def create(self, name: str, limits: Limits, pod: PodCgroup | None = None) -> Cgroup | None:
        """A cgroup holding ``limits``, in ``pod``'s pids cgroup too; None when there is
        nothing to limit or no way to."""
        pod_only = None if pod is None or pod.version != 1 else \
            Cgroup([], 1, shared=(pod.path,))
        if limits.memory is None and limits.cpu_millis is None and (
                pod is None or pod.version == 1):
            return pod_only
        try:
            if self.version == 2:
                return self._create_v2(name, limits, pod)
            if self.version == 1:
                made = self._create_v1(name, limits)
                made.shared = pod_only.shared if pod_only is not None else ()
                return made
        except OSError as err:
            logger.warning("cannot apply limits to %s (%s); running it unlimited", name, err)
            return pod_only
        if not self._warned:
            logger.warning("no writable cgroup hierarchy: container limits are not enforced")
            self._warned = True
        return pod_only

    def _create_v2(self, name: str, limits: Limits, pod: PodCgroup | None = None) -> Cgroup:
        parent = os.path.join(self.root, self.prefix) if pod is None else pod.path
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
