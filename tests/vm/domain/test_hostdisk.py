"""disk.img sizing for an empty Filesystem PVC, as upstream's HostDisk."""

from __future__ import annotations

import pytest

from vm.domain.errors import DomainError
from vm.domain.hostdisk import MINIMUM_RESERVE_BYTES, HostDiskSize, disk_image_size

MIB = 1024 * 1024
R = MINIMUM_RESERVE_BYTES


@pytest.mark.parametrize(
    ("requested", "capacity", "available", "expected"),
    [
        (100 * MIB, 200 * MIB, 500 * MIB, HostDiskSize(100 * MIB, False)),  # min(request, capacity)
        (300 * MIB, 200 * MIB, 500 * MIB, HostDiskSize(200 * MIB, False)),
        (100 * MIB + 5, None, 500 * MIB, HostDiskSize(100 * MIB, False)),  # aligned down
        (100 * MIB, None, 95 * MIB + R, HostDiskSize(95 * MIB, True)),  # 5% short: tolerated
        (100 * MIB, None, 90 * MIB + R, HostDiskSize(90 * MIB, True)),  # exactly 10%
        (None, None, 50 * MIB + R + 7, HostDiskSize(50 * MIB, False)),  # no claim figures
    ],
)
def test_sizes(
    requested: int | None, capacity: int | None, available: int, expected: HostDiskSize
) -> None:
    assert (
        disk_image_size(
            path="/d/disk.img",
            field="spec.volumes[0]",
            requested=requested,
            capacity=capacity,
            available=available,
        )
        == expected
    )


def test_more_than_ten_percent_short_fails_with_upstreams_message() -> None:
    with pytest.raises(DomainError) as err:
        disk_image_size(
            path="/d/disk.img",
            field="spec.volumes[1]",
            requested=100 * MIB,
            capacity=None,
            available=89 * MIB + R,
        )
    assert err.value.field == "spec.volumes[1]"
    assert err.value.message == (
        f"unable to create /d/disk.img, not enough space, demanded size {100 * MIB} B is bigger "
        f"than available space {89 * MIB} B, also after taking 10 % toleration into account"
    )


def test_full_volume_fails() -> None:
    with pytest.raises(DomainError, match="no space left"):
        disk_image_size(path="/d/disk.img", field="f", requested=None, capacity=None, available=R)
