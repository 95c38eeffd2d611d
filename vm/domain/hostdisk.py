"""The size of the sparse ``disk.img`` created on an empty Filesystem PVC.

Why it exists: upstream's HostDisk sizes the image from the claim, not from the file
system, and tolerates a volume up to 10% smaller than asked (file-system overhead eats
into small volumes): size = align_down_1MiB(min(request, capacity)); the space free is
statfs' available bytes less a 128 KiB reserve; a size over that but within 10% shrinks
to what is free (upstream emits ``ToleratedSmallPV``); beyond it the launch fails with
upstream's message. Without claim figures (no ``status.volumeStatus``), the free space is
the size.
"""

from __future__ import annotations

from dataclasses import dataclass

from sizes import align_down
from vm.domain.errors import DomainError

MINIMUM_RESERVE_BYTES = 131072
TOLERATE_LESS_SPACE_PERCENT = 10


@dataclass(frozen=True)
class HostDiskSize:
    size: int
    tolerated: bool  # shrunk to the free space, within the tolerance


def disk_image_size(
    *, path: str, field: str, requested: int | None, capacity: int | None, available: int
) -> HostDiskSize:
    """:raise DomainError: when the volume is too small even with the tolerance."""
    free = max(0, available - MINIMUM_RESERVE_BYTES)
    wanted = [v for v in (requested, capacity) if v is not None]
    if not wanted:
        size = align_down(free)
        if size <= 0:
            raise DomainError(field, f"unable to create {path}, no space left on the volume")
        return HostDiskSize(size=size, tolerated=False)
    size = align_down(min(wanted))
    if size <= free:
        return HostDiskSize(size=size, tolerated=False)
    if (size - free) * 100 <= size * TOLERATE_LESS_SPACE_PERCENT:
        return HostDiskSize(size=align_down(free), tolerated=True)
    raise DomainError(
        field,
        f"unable to create {path}, not enough space, demanded size {size} B "
        f"is bigger than available space {free} B, also after taking "
        f"{TOLERATE_LESS_SPACE_PERCENT} % toleration into account",
    )
