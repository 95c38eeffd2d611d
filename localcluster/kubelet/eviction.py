"""emptyDir ``sizeLimit``: what the kubelet's eviction manager enforces, on one node.

An emptyDir here is a directory on the node's disk, as on a real node; without this, a pod
could fill the disk through one whatever its ``sizeLimit``. As upstream's kubelet does, the
usage is measured every few seconds and a pod over a limit is evicted: its containers are
killed at once, it ends ``Failed`` with reason ``Evicted`` and the kubelet's message, and
it is not restarted (its controller, if any, makes a new pod).

The decisions are pure; :func:`usage` is the one walk of the disk.

What a process inside the pod can do against the walk, and what it gains: the walk stops
after :data:`MAX_ENTRIES` entries, so a pod that first makes that many empty files can
hide a large one behind them from the count (the bound is for the kubelet's CPU, an
exact count would need a filesystem quota); a directory swapped for a symlink between its
stat and its scan is walked through (by path), which can only count more and so evict the
pod itself, within the same bound.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import sizes

CHECK_EVERY = 2.0
"""Seconds between two measurements of a pod's limited emptyDirs (upstream's housekeeping
is 10 s; a walk that stops at the limit is cheap)."""
MAX_ENTRIES = 100_000
"""Directory entries one measurement looks at, at most (the walk's bound)."""
REASON = "Evicted"


@dataclass(frozen=True)
class Limit:
    volume: str
    text: str
    """As the pod spec says it ("16Mi"), for the message."""
    bytes: int


def limits(pod: Mapping[str, Any]) -> list[Limit]:
    """The pod's emptyDirs that have a ``sizeLimit`` (one that does not parse is left out:
    admission already rejected it)."""
    out = []
    for vol in (pod.get("spec") or {}).get("volumes") or []:
        empty = vol.get("emptyDir")
        if not isinstance(empty, Mapping) or empty.get("sizeLimit") in (None, ""):
            continue
        text = str(empty["sizeLimit"])
        try:
            out.append(Limit(volume=str(vol.get("name")), text=text,
                             bytes=sizes.parse_bytes(text)))
        except ValueError:
            continue
    return out


def over(limit: Limit, used: int) -> str | None:
    """The eviction message when ``used`` bytes exceed the limit, else None."""
    if used <= limit.bytes:
        return None
    return f'Usage of EmptyDir volume "{limit.volume}" exceeds the limit "{limit.text}". '


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
