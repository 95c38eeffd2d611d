"""The snapshot store on real volumes: point in time, the pool's copy, only its own files."""

from __future__ import annotations

import os

import pytest

from localcluster.storage.errors import InvalidRequest, VolumeNotFound
from localcluster.storage.snapshots import SnapshotStore
from localcluster.storage.volumes import BLOCK, FILESYSTEM, REFLINK, STANDARD, MiB, VolumeManager


def write(path: str, data: bytes, offset: int = 0) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT)
    try:
        os.pwrite(fd, data, offset)
        os.fsync(fd)
    finally:
        os.close(fd)


def read(path: str, size: int, offset: int = 0) -> bytes:
    fd = os.open(path, os.O_RDONLY)
    try:
        return os.pread(fd, size, offset)
    finally:
        os.close(fd)


@pytest.mark.parametrize("pool", [STANDARD, REFLINK])
def test_block_snapshot_is_point_in_time_and_restores(volumes: VolumeManager,
                                                      pool: str) -> None:
    store = SnapshotStore(volumes)
    src = volumes.create("src", capacity=16 * MiB, mode=BLOCK, pool=pool)
    write(src.path, b"one" * 100)
    image = store.take("h1", "src")
    assert (image.pool, image.mode, image.capacity) == (pool, BLOCK, 16 * MiB)
    where = os.path.join(volumes.pool_dir(REFLINK), "snapshots") if pool == REFLINK \
        else store.root
    assert image.path == os.path.join(where, "h1.img")
    write(src.path, b"two" * 100)
    assert store.take("h1", "src") == image  # taken once: not a second, later copy
    copy = volumes.create("copy", capacity=32 * MiB, mode=BLOCK, pool=pool, image=image)
    assert read(copy.path, 300) == b"one" * 100
    assert os.path.getsize(copy.image) == 32 * MiB
    assert read(src.path, 300) == b"two" * 100


def test_standard_snapshot_stays_sparse(volumes: VolumeManager) -> None:
    store = SnapshotStore(volumes)
    src = volumes.create("src", capacity=64 * MiB, mode=BLOCK)
    write(src.path, b"x" * 4096, 48 * MiB)
    image = store.take("h", "src")
    st = os.stat(image.path)
    assert st.st_size == 64 * MiB and st.st_blocks * 512 < 2 * MiB


def test_filesystem_restore_into_a_larger_volume_grows_it(volumes: VolumeManager) -> None:
    store = SnapshotStore(volumes)
    src = volumes.create("src", capacity=32 * MiB, mode=FILESYSTEM, pool=REFLINK)
    write(os.path.join(src.path, "f"), b"data")
    image = store.take("h", "src")
    copy = volumes.create("copy", capacity=96 * MiB, mode=FILESYSTEM, image=image)
    assert read(os.path.join(copy.path, "f"), 4) == b"data"
    st = os.statvfs(copy.path)
    assert st.f_blocks * st.f_frsize > 90 * MiB
    with pytest.raises(InvalidRequest, match="larger than the requested capacity"):
        volumes.create("small", capacity=16 * MiB, mode=FILESYSTEM, image=image)
    with pytest.raises(InvalidRequest, match="is Filesystem, the claim asks Block"):
        volumes.create("blk", capacity=32 * MiB, mode=BLOCK, image=image)


def test_delete_removes_only_its_own_files(volumes: VolumeManager) -> None:
    store = SnapshotStore(volumes)
    volumes.create("a", capacity=8 * MiB, mode=BLOCK, pool=REFLINK)
    volumes.create("b", capacity=8 * MiB, mode=BLOCK)
    kept, gone = store.take("keep", "a"), store.take("gone", "b")
    stranger = os.path.join(store.root, "gone-not.img")
    write(stranger, b"not the store's")
    store.delete("gone")
    store.delete("gone")  # idempotent
    assert store.get("gone") is None and not os.path.exists(gone.path)
    assert store.handles() == ["keep"] and os.path.exists(kept.path)
    assert os.path.exists(stranger)
    assert volumes.exists("a") and volumes.exists("b")


def test_a_missing_volume_or_bad_handle_is_refused(volumes: VolumeManager) -> None:
    store = SnapshotStore(volumes)
    with pytest.raises(VolumeNotFound):
        store.take("h", "nothing")
    with pytest.raises(InvalidRequest):
        store.take("../escape", "nothing")
    assert store.handles() == []
