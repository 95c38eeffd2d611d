"""Local ephemeral storage limits: what the kubelet's eviction manager enforces, on one
node, in upstream's order: an emptyDir's ``sizeLimit``, then the pod's total against the
sum of its containers' ``limits.ephemeral-storage``, then each container against its own.

An emptyDir here is a directory on the node's disk, as on a real node; a container's
writable layer is the tmpfs mounts its sandbox writes into (its root unless read-only,
its private /tmp, a system directory made a tmpfs to hold a volume), which live in the
node's memory. Without this, a pod could fill the disk through an emptyDir whatever its
``sizeLimit``, and the node's memory through its own root or /tmp whatever its
``ephemeral-storage`` limit (a memory limit bounds that too, when the pod has one). As
upstream's kubelet does, the usage is measured every few seconds and a pod over a limit
is evicted: its containers are killed at once, it ends ``Failed`` with reason
``Evicted`` and the kubelet's message, and it is not restarted (its controller, if any,
makes a new pod). What counts: a container's writable layer and its log; for the pod,
every container's and every emptyDir (here all of them are on the node's disk, the
``Memory`` medium too, so all count).

The decisions are pure; :func:`usage` is the one walk of the disk and
:func:`mounts_usage` the one look into a sandbox's mounts.

What a process inside the pod can do against the walk, and what it gains: the walk stops
after :data:`MAX_ENTRIES` entries, so a pod that first makes that many empty files can
hide a large one behind them from the count (the bound is for the kubelet's CPU, an
exact count would need a filesystem quota); a directory swapped for a symlink between its
stat and its scan is walked through (by path), which can only count more and so evict the
pod itself, within the same bound. A writable layer is counted from its file systems'
own block counts, so nothing in it can hide; its mount points are opened without
following a symlink, through the sandbox's process as it runs (a process that has ended,
or a pid taken by another, counts nothing).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import sizes
from localcluster.kubelet import memstats

CHECK_EVERY = 2.0
"""Seconds between two measurements of a pod's limited emptyDirs (upstream's housekeeping
is 10 s; a walk that stops at the limit is cheap)."""
MAX_ENTRIES = 100_000
"""Directory entries one measurement looks at, at most (the walk's bound)."""
REASON = "Evicted"


EMPTY_DIR, POD, CONTAINER = "emptyDir", "pod", "container"
RESOURCE = "ephemeral-storage"


@dataclass(frozen=True)
class Limit:
    name: str
    """The emptyDir volume's, or the container's ("" for the pod's)."""
    text: str
    """The quantity as the API server prints it back ("16Mi"), for the message."""
    bytes: int
    kind: str = EMPTY_DIR


@dataclass(frozen=True)
class Limits:
    """Everything of the pod's local storage that is limited."""
    empty_dirs: tuple[Limit, ...] = ()
    pod: Limit | None = None
    containers: tuple[Limit, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.empty_dirs or self.pod or self.containers)


def _limit(name: str, raw: Any, kind: str) -> Limit | None:
    """A limit from a quantity of the spec; None for one that does not parse (admission
    already rejected it) or is zero (upstream takes a zero limit for none)."""
    if raw in (None, ""):
        return None
    try:
        n = sizes.parse_bytes(raw)
    except ValueError:
        return None
    if not n:
        return None
    return Limit(name, sizes.format_quantity(n, binary=sizes.is_binary(raw)), n, kind)


def limits(pod: Mapping[str, Any]) -> list[Limit]:
    """The pod's emptyDirs that have a ``sizeLimit``."""
    out = []
    for vol in (pod.get("spec") or {}).get("volumes") or []:
        empty = vol.get("emptyDir")
        if isinstance(empty, Mapping):
            found = _limit(str(vol.get("name")), empty.get("sizeLimit"), EMPTY_DIR)
            if found is not None:
                out.append(found)
    return out


def _container_limit(container: Mapping[str, Any]) -> Any:
    return ((container.get("resources") or {}).get("limits") or {}).get(RESOURCE)


def container_limits(pod: Mapping[str, Any]) -> list[Limit]:
    """The pod's (regular) containers that have an ``ephemeral-storage`` limit."""
    out = []
    for c in (pod.get("spec") or {}).get("containers") or []:
        found = _limit(str(c.get("name")), _container_limit(c), CONTAINER)
        if found is not None:
            out.append(found)
    return out


def pod_limit(pod: Mapping[str, Any]) -> Limit | None:
    """The pod's ``ephemeral-storage`` limit as upstream's ``PodLimits`` adds it up: the
    sum over the containers that set one (and restartable init containers, sidecars,
    which run beside them), at least any other init container's, plus the pod's
    ``overhead``; None when no container sets one. Printed in the first one's form."""
    spec = pod.get("spec") or {}
    total, form = 0, None
    inits = spec.get("initContainers") or []
    sidecars = [c for c in inits if c.get("restartPolicy") == "Always"]
    for c in [*(spec.get("containers") or []), *sidecars]:
        raw = _container_limit(c)
        found = _limit("", raw, POD)
        if found is not None:
            total += found.bytes
            form = form if form is not None else sizes.is_binary(raw)
    for c in inits:
        if c.get("restartPolicy") != "Always":
            raw = _container_limit(c)
            found = _limit("", raw, POD)
            if found is not None and found.bytes > total:
                total = found.bytes
                form = form if form is not None else sizes.is_binary(raw)
    if form is None:
        return None
    overhead = _limit("", (spec.get("overhead") or {}).get(RESOURCE), POD)
    total += overhead.bytes if overhead is not None else 0
    return Limit("", sizes.format_quantity(total, binary=form), total, POD)


def all_limits(pod: Mapping[str, Any]) -> Limits:
    return Limits(empty_dirs=tuple(limits(pod)), pod=pod_limit(pod),
                  containers=tuple(container_limits(pod)))


def over(limit: Limit, used: int) -> str | None:
    """The kubelet's eviction message when ``used`` bytes exceed the limit, else None."""
    if used <= limit.bytes:
        return None
    if limit.kind == POD:
        return ("Pod ephemeral local storage usage exceeds the total limit of containers"
                f" {limit.text}. ")
    if limit.kind == CONTAINER:
        return (f'Container {limit.name} exceeded its local ephemeral storage limit'
                f' "{limit.text}". ')
    return f'Usage of EmptyDir volume "{limit.name}" exceeds the limit "{limit.text}". '


def usage(path: str, *, stop_above: int) -> int:
    """Bytes allocated under ``path`` (files, directories, symlinks themselves; never
    followed), counted until the total passes ``stop_above`` or :data:`MAX_ENTRIES`
    entries were seen. A file linked twice inside counts twice (a bound, not a du)."""
    total, seen = 0, 0
    stack = [path]
    while stack and total <= stop_above and seen < MAX_ENTRIES:
        try:
            entries = os.scandir(stack.pop())
        except OSError:  # gone, or not a directory any more
            continue
        with entries:
            for entry in entries:
                seen += 1
                try:
                    st = entry.stat(follow_symlinks=False)
                except OSError:
                    continue
                total += st.st_blocks * 512
                if entry.is_dir(follow_symlinks=False):
                    stack.append(entry.path)
                if total > stop_above or seen >= MAX_ENTRIES:
                    break
    return total


def mounts_usage(pid: int, *, parent: int, paths: Sequence[str]) -> int:
    """Bytes in use on the file systems mounted at ``paths`` (absolute, in the sandbox)
    as the sandbox process ``pid`` sees them, each file system counted once; 0 unless
    ``pid`` is still a child of ``parent`` (the sandbox's bwrap: a pid that ended, or was
    taken by another process since, shows nothing). Each mount point is opened without
    following a symlink; one that cannot be opened counts nothing."""
    try:
        proc = os.open(f"/proc/{pid}", os.O_PATH | os.O_DIRECTORY)
    except OSError:
        return 0
    try:
        # Entries opened through this descriptor belong to the process it was opened
        # for, or fail once it is gone: the pid is checked once, here.
        with open("stat", encoding="ascii", errors="replace",
                  opener=lambda name, flags: os.open(name, flags, dir_fd=proc)) as fh:
            if memstats.parent_in_stat(fh.read()) != parent:
                return 0
        root = os.open("root", os.O_PATH | os.O_DIRECTORY, dir_fd=proc)
    except OSError:
        return 0
    finally:
        os.close(proc)
    total, seen = 0, set()
    try:
        for path in paths:
            fd = _open_below(root, path)
            if fd is None:
                continue
            try:
                dev = os.fstat(fd).st_dev
                if dev in seen:
                    continue
                seen.add(dev)
                st = os.fstatvfs(fd)
                total += (st.f_blocks - st.f_bfree) * st.f_frsize
            except OSError:
                continue
            finally:
                os.close(fd)
    finally:
        os.close(root)
    return total


def _open_below(root: int, path: str) -> int | None:
    """``path`` below the directory ``root``, one component at a time, no symlink
    followed (an absolute one would lead out of the sandbox); None if it cannot be."""
    fd = os.dup(root)
    for part in [p for p in path.split("/") if p not in ("", ".")]:
        if part == "..":
            os.close(fd)
            return None
        try:
            nxt = os.open(part, os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
        except OSError:
            os.close(fd)
            return None
        os.close(fd)
        fd = nxt
    return fd
