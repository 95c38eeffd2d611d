"""Memory measurements for node-pressure eviction (the decisions are in pressure.py):
the node's available memory, a container cgroup's working set, and the anonymous
memory of a sandbox's process tree. Each is a few small reads of /proc or the cgroup
file system; the tree walk is bounded (:data:`MAX_PROCESSES`).

What a process in a pod can do against the walk: fork more than
:data:`MAX_PROCESSES` processes so that those beyond are not counted (a container with
a memory limit has a cgroup, and its cgroup's count is used instead, which nothing in it
can hide from); a pid that ends and is reused by another process between two reads is
counted as the other's, which can only make its own pod look larger.
"""

from __future__ import annotations

import contextlib
import os

MEMINFO = "/proc/meminfo"
MAX_PROCESSES = 1024
"""Processes of one sandbox whose memory is counted, at most (the walk's bound)."""
_PAGE = os.sysconf("SC_PAGE_SIZE")


def available(path: str = MEMINFO) -> int | None:
    """The node's available memory in bytes (``MemAvailable``), None if unknown."""
    try:
        with open(path, encoding="ascii") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def cgroup_working_set(dirs: list[str], version: int) -> int | None:
    """Bytes in use by a memory cgroup less its inactive file cache (upstream's
    working set); None when none of ``dirs`` is a memory cgroup that can be read."""
    current, stat = (("memory.current", "inactive_file") if version == 2
                     else ("memory.usage_in_bytes", "total_inactive_file"))
    for d in dirs:
        try:
            with open(os.path.join(d, current), encoding="ascii") as fh:
                used = int(fh.read().strip())
        except (OSError, ValueError):
            continue
        inactive = 0
        with contextlib.suppress(OSError, ValueError), open(
                os.path.join(d, "memory.stat"), encoding="ascii") as fh:
            for line in fh:
                key, _, value = line.partition(" ")
                if key == stat:
                    inactive = int(value)
                    break
        return max(0, used - inactive)
    return None


def _children(pid: int) -> list[int]:
    out: list[int] = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return out
    for tid in tasks[:MAX_PROCESSES]:
        with contextlib.suppress(OSError, ValueError), open(
                f"/proc/{pid}/task/{tid}/children", encoding="ascii") as fh:
            out.extend(int(c) for c in fh.read().split())
    return out


def _anon_rss(pid: int) -> int:
    """Resident anonymous memory (statm's resident less its shared, file and shmem,
    pages: a tmpfs file is counted in its writable layer, not again here)."""
    try:
        with open(f"/proc/{pid}/statm", encoding="ascii") as fh:
            fields = fh.read().split()
        return max(0, int(fields[1]) - int(fields[2])) * _PAGE
    except (OSError, ValueError, IndexError):
        return 0


def parent_in_stat(text: str) -> int | None:
    """The parent pid in the text of ``/proc/PID/stat`` (after the command's closing
    parenthesis, which the command itself may contain), None if unreadable."""
    fields = text.rpartition(")")[2].split()
    try:
        return int(fields[1])
    except (ValueError, IndexError):
        return None


def _parent(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as fh:
            return parent_in_stat(fh.read())
    except OSError:
        return None


def tree_anon_rss(pid: int, *, parent: int) -> int:
    """The anonymous memory of ``pid`` and its descendants, at most
    :data:`MAX_PROCESSES` of them; 0 unless ``pid`` is still a child of ``parent`` (the
    sandbox's bwrap)."""
    if _parent(pid) != parent:
        return 0
    total, stack = 0, [pid]
    seen: set[int] = set()
    while stack and len(seen) < MAX_PROCESSES:
        p = stack.pop()
        if p in seen:
            continue
        seen.add(p)
        total += _anon_rss(p)
        stack.extend(_children(p))
    return total
