"""The volume layer against the real tools: sizes, modes, expansion, clones, restarts."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from localcluster.storage import classes
from localcluster.storage.errors import (
    CommandError,
    InvalidRequest,
    StillInUse,
    VolumeExists,
    VolumeNotFound,
)
from localcluster.storage.volumes import (
    BLOCK,
    FILESYSTEM,
    REFLINK,
    STANDARD,
    GiB,
    MiB,
    VolumeManager,
    round_capacity,
)
from tests.localcluster.storage.conftest import (
    leftovers,
    namespace_holder,
    settled_leftovers,
)


def avail_fraction(path: str, size: int) -> float:
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize / size


def test_round_capacity() -> None:
    assert round_capacity(1) == 8 * MiB
    assert round_capacity(100 * MiB + 1) == 101 * MiB
    with pytest.raises(InvalidRequest, match="capacity must be positive"):
        round_capacity(0)


@pytest.mark.parametrize("pool", [STANDARD, REFLINK])
def test_filesystem_volume_is_its_own_sized_filesystem(volumes: VolumeManager, pool: str) -> None:
    vol = volumes.create("fs1", capacity=64 * MiB, mode=FILESYSTEM, pool=pool)
    assert os.path.ismount(vol.path)
    st = os.statvfs(vol.path)
    assert st.f_blocks * st.f_frsize <= 64 * MiB
    # The overhead the storage class advertises holds for this size.
    assert 1 - avail_fraction(vol.path, 64 * MiB) <= float(classes.FILESYSTEM_OVERHEAD)
    with open(os.path.join(vol.path, "hello"), "w") as fh:
        fh.write("hi")
    # Sparse: the image allocates far less than its size.
    assert os.stat(vol.image).st_blocks * 512 < 16 * MiB


@pytest.mark.slow
@pytest.mark.parametrize("size", [64 * MiB, 256 * MiB, GiB, 10 * GiB])
def test_filesystem_overhead_is_bounded(volumes: VolumeManager, size: int) -> None:
    vol = volumes.create("ovh", capacity=size, mode=FILESYSTEM)
    assert 1 - avail_fraction(vol.path, size) <= float(classes.FILESYSTEM_OVERHEAD)


@pytest.mark.parametrize("pool", [STANDARD, REFLINK])
def test_block_volume_is_a_loop_device(volumes: VolumeManager, pool: str) -> None:
    vol = volumes.create("blk1", capacity=32 * MiB, mode=BLOCK, pool=pool)
    dev = os.path.realpath(vol.path)
    assert dev.startswith("/dev/loop")
    size = int(subprocess.check_output(["blockdev", "--getsize64", dev]))
    assert size == 32 * MiB


def _direct_io_possible(directory: str) -> bool:
    probe = os.path.join(directory, ".dio-probe")
    try:
        fd = os.open(probe, os.O_CREAT | os.O_WRONLY | os.O_DIRECT, 0o600)
    except OSError:
        return False
    os.close(fd)
    os.unlink(probe)
    return True


def _loop_dio(device: str) -> str:
    name = os.path.basename(os.path.realpath(device))
    with open(f"/sys/block/{name}/loop/dio", encoding="ascii") as fh:
        return fh.read().strip()


def test_loop_devices_use_direct_io(volumes: VolumeManager) -> None:
    """No second page cache under the volume's own (an import into a buffered loop
    device took 6-7 % longer than into a host file)."""
    fs = volumes.create("dio-fs", capacity=32 * MiB, mode=FILESYSTEM)
    blk = volumes.create("dio-blk", capacity=32 * MiB, mode=BLOCK)
    fs_device = subprocess.check_output(["findmnt", "-n", "-o", "SOURCE", fs.path],
                                        text=True).strip()
    if not _direct_io_possible(os.path.dirname(fs.image)):
        pytest.skip("the backing filesystem refuses O_DIRECT: the devices stay buffered")
    assert _loop_dio(fs_device) == "1"
    assert _loop_dio(blk.path) == "1"


def test_expand_grows_filesystem_and_block_online(volumes: VolumeManager) -> None:
    fs = volumes.create("fs", capacity=64 * MiB, mode=FILESYSTEM)
    blk = volumes.create("blk", capacity=16 * MiB, mode=BLOCK)
    before = os.statvfs(fs.path).f_blocks * os.statvfs(fs.path).f_frsize
    volumes.expand("fs", 128 * MiB)
    volumes.expand("blk", 48 * MiB)
    after = os.statvfs(fs.path).f_blocks * os.statvfs(fs.path).f_frsize
    assert after > before + 60 * MiB
    dev = os.path.realpath(blk.path)
    assert int(subprocess.check_output(["blockdev", "--getsize64", dev])) == 48 * MiB
    assert volumes.get("fs").capacity == 128 * MiB
    assert not volumes.resize_pending("fs")
    with pytest.raises(InvalidRequest, match="shrinking"):
        volumes.expand("fs", 64 * MiB)


def fs_size(path: str) -> int:
    st = os.statvfs(path)
    return st.f_blocks * st.f_frsize


def test_expand_of_a_volume_in_use_waits_for_it_to_be_free(data_dir: str) -> None:
    busy = {"fs"}
    mgr = VolumeManager(data_dir, reflink_pool_size=4 * GiB, in_use=lambda n: n in busy)
    mgr.start()
    try:
        fs = mgr.create("fs", capacity=64 * MiB, mode=FILESYSTEM)
        with open(os.path.join(fs.path, "keep"), "w") as fh:
            fh.write("x")
        before = fs_size(fs.path)
        mgr.expand("fs", 128 * MiB)
        # Either the kernel allowed an online resize, or the resize waits for the pod.
        if mgr.resize_pending("fs"):
            assert fs_size(fs.path) == before
            busy.clear()
            mgr.finish_resize("fs")
        assert not mgr.resize_pending("fs")
        assert fs_size(fs.path) > before + 60 * MiB
        with open(os.path.join(fs.path, "keep")) as fh:
            assert fh.read() == "x"
    finally:
        mgr.stop()


def test_a_sandbox_made_while_a_volume_is_mounted_does_not_hold_it(
        volumes: VolumeManager) -> None:
    """A pod sandbox (bubblewrap) turns its copies of the host's mounts into slaves. On a
    host whose mounts are private (this container, CI's), a slave of a private mount is
    private: the copy kept the volume's filesystem after the unmount here, and the
    offline grow's e2fsck was refused. Volumes live under a shared mount now."""
    fs = volumes.create("fs", capacity=64 * MiB, mode=FILESYSTEM)
    before = fs_size(fs.path)
    holder = namespace_holder("slave")
    try:
        volumes.expand("fs", 128 * MiB)
        assert not volumes.resize_pending("fs")
        assert fs_size(fs.path) > before + 60 * MiB
    finally:
        holder.kill()
        holder.wait()


def test_a_grow_that_failed_half_way_is_finished_by_the_next_expand(
        volumes: VolumeManager) -> None:
    """The CI failure of round 17: the offline grow unmounted the volume, but another
    mount namespace still held its filesystem, so e2fsck could not have the device alone
    and failed; every later expand saw the new size already recorded and returned, so
    the filesystem never grew. A private namespace made while the volume is mounted is
    such a holder, for real (util-linux's unshare makes private copies by default)."""
    fs = volumes.create("fs", capacity=64 * MiB, mode=FILESYSTEM)
    before = fs_size(fs.path)
    holder = namespace_holder("private")  # keeps its own copy whatever we do
    try:
        with pytest.raises(CommandError, match="e2fsck"):
            volumes.expand("fs", 128 * MiB)
        assert volumes.resize_pending("fs")
        assert os.path.ismount(fs.path), "the failed grow must mount the volume again"
        assert fs_size(fs.path) == before
    finally:
        holder.kill()
        holder.wait()
    volumes.expand("fs", 128 * MiB)
    assert not volumes.resize_pending("fs")
    assert fs_size(fs.path) > before + 60 * MiB


def pool_used(image: str) -> int:
    st = os.statvfs(os.path.dirname(image))
    return (st.f_blocks - st.f_bfree) * st.f_frsize


def test_reflink_clone_is_instant_and_independent(volumes: VolumeManager) -> None:
    src = volumes.create("src", capacity=512 * MiB, mode=FILESYSTEM, pool=REFLINK)
    with open(os.path.join(src.path, "data"), "wb") as fh:
        fh.write(os.urandom(1024) * 20 * 1024)  # 20 MiB
    os.sync()
    before = pool_used(src.image)
    clone = volumes.create("dst", capacity=GiB, mode=FILESYSTEM, pool=REFLINK, source="src")
    with open(os.path.join(clone.path, "data"), "rb") as fh:
        assert len(fh.read()) == 20 * MiB
    # Grown to the requested size, and independent of its source.
    st = os.statvfs(clone.path)
    assert st.f_blocks * st.f_frsize > 900 * MiB
    os.unlink(os.path.join(clone.path, "data"))
    assert os.path.exists(os.path.join(src.path, "data"))
    # Reflinked: the clone shares the source's blocks instead of copying 20 MiB.
    assert pool_used(src.image) - before < 8 * MiB


def test_clone_block_standard_pool_copies(volumes: VolumeManager) -> None:
    src = volumes.create("bsrc", capacity=16 * MiB, mode=BLOCK)
    with open(os.path.realpath(src.path), "r+b") as fh:
        fh.write(b"marker")
    dst = volumes.create("bdst", capacity=16 * MiB, mode=BLOCK, source="bsrc")
    with open(os.path.realpath(dst.path), "rb") as fh:
        assert fh.read(6) == b"marker"


def test_bad_requests_name_what_is_wrong(volumes: VolumeManager) -> None:
    volumes.create("a", capacity=16 * MiB, mode=BLOCK)
    with pytest.raises(VolumeExists):
        volumes.create("a", capacity=16 * MiB, mode=BLOCK)
    with pytest.raises(InvalidRequest, match="volumeMode"):
        volumes.create("b", capacity=16 * MiB, mode="Tape")
    with pytest.raises(InvalidRequest, match="is Block, the claim asks Filesystem"):
        volumes.create("c", capacity=16 * MiB, mode=FILESYSTEM, source="a")
    with pytest.raises(InvalidRequest, match="larger than"):
        volumes.create("d", capacity=8 * MiB, mode=BLOCK, source="a")
    with pytest.raises(VolumeNotFound):
        volumes.create("e", capacity=16 * MiB, mode=BLOCK, source="nope")
    assert not volumes.exists("c") and not volumes.exists("d") and not volumes.exists("e")
    with pytest.raises(InvalidRequest, match="invalid volume name"):
        volumes.get("../x")


def test_delete_removes_everything(volumes: VolumeManager, data_dir: str) -> None:
    fs = volumes.create("gone", capacity=16 * MiB, mode=FILESYSTEM, pool=REFLINK)
    volumes.delete("gone")
    assert not os.path.exists(fs.image) and not os.path.exists(fs.path)
    mounts, loops = leftovers(data_dir)
    assert [m for m in mounts if "gone" in m] == []
    assert len(loops) == 1  # only the reflink pool's
    with pytest.raises(VolumeNotFound):
        volumes.get("gone")


def test_data_survives_stop_and_start(data_dir: str) -> None:
    mgr = VolumeManager(data_dir, reflink_pool_size=4 * GiB)
    mgr.start()
    try:
        fs = mgr.create("keep", capacity=32 * MiB, mode=FILESYSTEM, pool=REFLINK)
        blk = mgr.create("keepb", capacity=16 * MiB, mode=BLOCK)
        with open(os.path.join(fs.path, "f"), "w") as fh:
            fh.write("persisted")
        with open(os.path.realpath(blk.path), "r+b") as fh:
            fh.write(b"blockdata")
    finally:
        mgr.stop()
    assert settled_leftovers(data_dir) == ([], [])
    again = VolumeManager(data_dir, reflink_pool_size=4 * GiB)
    again.start()
    try:
        with open(os.path.join(again.get("keep").path, "f")) as fh:
            assert fh.read() == "persisted"
        with open(os.path.realpath(again.get("keepb").path), "rb") as fh:
            assert fh.read(9) == b"blockdata"
    finally:
        again.stop()


KILLED_CHILD = """
import os, sys
from localcluster.storage.volumes import VolumeManager, GiB, MiB
mgr = VolumeManager(sys.argv[1], reflink_pool_size=4 * GiB)
mgr.start()
mgr.create("a", capacity=16 * MiB, mode="Filesystem", pool="reflink")
mgr.create("b", capacity=16 * MiB, mode="Block")
mgr.create("c", capacity=16 * MiB, mode="Filesystem")
print("ready", flush=True)
os.kill(os.getpid(), 9)
"""


def test_killed_process_leaves_nothing_after_next_start(data_dir: str) -> None:
    proc = subprocess.run([sys.executable, "-c", KILLED_CHILD, data_dir], capture_output=True,
                          text=True, timeout=120, cwd=os.getcwd(), check=False)
    assert proc.returncode == -9 and "ready" in proc.stdout, proc.stderr
    mounts, loops = leftovers(data_dir)
    # the pool, the shared mount the volumes live under, a and c; loops: pool, a, b, c
    assert len(mounts) == 4 and len(loops) == 4
    mgr = VolumeManager(data_dir, reflink_pool_size=4 * GiB)
    mgr.start()
    try:
        mounts, loops = leftovers(data_dir)
        assert len(mounts) == 4 and len(loops) == 4  # re-attached once, not twice
        assert {v.name for v in mgr.list()} == {"a", "b", "c"}
    finally:
        mgr.stop()
    assert settled_leftovers(data_dir) == ([], [])


def _held_loop(data_dir: str) -> tuple[str, int]:
    """A loop device over a file of the data dir's storage, kept open: what a killed run's
    surviving process leaves (detaching it only marks it to go at its last close)."""
    root = os.path.join(os.path.realpath(data_dir), "storage")
    os.makedirs(root, exist_ok=True)
    image = os.path.join(root, "held.img")
    with open(image, "wb") as f:
        f.truncate(8 * MiB)
    device = subprocess.run(["losetup", "--find", "--show", image], check=True,
                            capture_output=True, text=True).stdout.strip()
    return device, os.open(device, os.O_RDONLY)


def test_start_waits_for_a_held_loop_device_to_go_before_attaching(data_dir: str) -> None:
    """A filesystem is never attached twice: start() waits until the loop devices it
    detached are gone (their last user exits), then attaches."""
    device, fd = _held_loop(data_dir)
    mgr = VolumeManager(data_dir, reflink_pool_size=4 * GiB)
    waited: list[float] = []

    def sleep(seconds: float) -> None:  # the held device's last user exits while we wait
        waited.append(seconds)
        if len(waited) == 1:
            os.close(fd)
        settled_leftovers(data_dir, timeout=10)
    mgr._sleep = sleep
    try:
        mgr.start()
    finally:
        mgr.stop()
    assert waited  # it did wait
    assert device not in [d for d in leftovers(data_dir)[1]]


def test_start_refuses_when_a_held_loop_device_does_not_go(data_dir: str) -> None:
    device, fd = _held_loop(data_dir)
    mgr = VolumeManager(data_dir, reflink_pool_size=4 * GiB)
    now = [0.0]
    mgr._clock = lambda: now[0]

    def sleep(seconds: float) -> None:
        now[0] += seconds * 1000  # the deadline passes at once: no real waiting
    mgr._sleep = sleep
    try:
        with pytest.raises(StillInUse, match=rf"still in use after 120s .*{device} "):
            mgr.start()
        assert not leftovers(data_dir)[0]  # nothing mounted over the held image's data dir
    finally:
        os.close(fd)
        mgr.stop()
    assert settled_leftovers(data_dir) == ([], [])
