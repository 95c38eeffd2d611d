"""glibc's heaps under the importer's own large reads (the nbd route's rate samples and
range blocks), read by several threads.

glibc maps an allocation of 128 KiB or more on its own and unmaps it when freed, until
the first such free: then it raises that threshold to the freed size, and its trim
threshold (a heap's free top is handed back only past it) to twice that. The reads that
follow land in the reading threads' heaps, and what is freed there stays counted against
the pod. The import measured the server's rates with 2 MiB reads (``plan.RATE_SAMPLE``),
the first one in the main thread: the next two, one in each of two threads, stayed
resident in their heaps for the whole import, 4 MiB of the importer's peak (round 25).
"""

from __future__ import annotations

import ctypes

from sizes import MIB

_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
RETURNED = MIB
"""Both thresholds, fixed: a read of a megabyte or more is a mapping of its own, and a
heap's free top of a megabyte or more goes back."""


def hand_back_large_frees() -> None:
    """Fix glibc's mmap and trim thresholds at :data:`RETURNED` (no longer raised by a
    free), before the threads' large reads."""
    # libc is among the process's own symbols: no `ldconfig -p` run to find it. A libc
    # without mallopt (musl) has no such thresholds to fix.
    mallopt = getattr(ctypes.CDLL(None), "mallopt", None)
    if mallopt is not None:
        mallopt(_M_MMAP_THRESHOLD, RETURNED)
        mallopt(_M_TRIM_THRESHOLD, RETURNED)
