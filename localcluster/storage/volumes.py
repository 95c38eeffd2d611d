"""Real, sized volumes under the data dir: the disks behind the local PersistentVolumes.

A Filesystem volume is its own ext4 on a sparse image of exactly the requested capacity,
loop-mounted, so ``statfs`` inside a pod reports what a real PVC of that size would.
A Block volume is a loop device over a sparse file. Both live in one of two pools:

- ``standard``: image files on the data dir's own filesystem; a clone is a sparse copy.
- ``reflink``: image files inside an XFS (``-m reflink=1``) image that is itself
  loop-mounted under the data dir; a clone is ``cp --reflink=always``, instant whatever
  the size — the local stand-in for a CSI driver with volume cloning.

Layout under ``<data dir>/storage``::

    volumes/<name>.json   what the volume is (pool, mode, capacity): the source of truth
    images/<name>.img     standard pool images
    reflink.img           the XFS pool image, mounted at reflink/
    reflink/<name>.img    reflink pool images
    mnt/<name>/           where a Filesystem volume is mounted
    dev/<name>            symlink to the loop device of a Block volume
    ledger.json           every mount and loop device made (see state.py)

Everything is re-attached by :meth:`VolumeManager.start` (data survives down/up), after
undoing whatever a killed process left behind.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from typing import Any

from localcluster.storage import system
from localcluster.storage.errors import (
    CommandError,
    InvalidRequest,
    StillInUse,
    VolumeExists,
    VolumeNotFound,
)
from localcluster.storage.state import Ledger

logger = logging.getLogger(__name__)

MiB = 1024 * 1024
GiB = 1024 * MiB

FILESYSTEM = "Filesystem"
BLOCK = "Block"
MODES = (FILESYSTEM, BLOCK)
STANDARD = "standard"
REFLINK = "reflink"
POOLS = (STANDARD, REFLINK)

MIN_CAPACITY = 8 * MiB
"""Smallest volume made; smaller requests are rounded up (as cloud disks round to GiB)."""
DEFAULT_REFLINK_POOL_SIZE = 256 * GiB
RELEASE_TIMEOUT = 120.0
"""Seconds start() waits for a killed run's loop devices to go (their last users exit)."""
"""Apparent size of the sparse XFS pool image; only what volumes write is allocated."""


def round_capacity(requested: int) -> int:
    """Requested bytes rounded up to whole MiB, at least :data:`MIN_CAPACITY`."""
    if requested <= 0:
        raise InvalidRequest(f"capacity must be positive, got {requested}")
    return max(MIN_CAPACITY, -(-requested // MiB) * MiB)


@dataclass(frozen=True)
class Volume:
    name: str
    pool: str
    mode: str
    capacity: int
    """Bytes; the image file's size and so the block device's size."""
    path: str
    """Where the kubelet finds it: the mount dir (Filesystem) or the device symlink (Block)."""
    image: str


@dataclass(frozen=True)
class Image:
    """A disk image a new volume can start from (a snapshot's, see snapshots.py)."""

    path: str
    pool: str
    """The pool it lives in: a reflink-pool image restores into that pool instantly."""
    mode: str
    capacity: int


class VolumeManager:
    """Creates, attaches, grows, clones and deletes the volumes of one data dir."""

    def __init__(
        self, data_dir: str, *, reflink_pool_size: int = DEFAULT_REFLINK_POOL_SIZE,
        in_use: Callable[[str], bool] = lambda name: False,
    ) -> None:
        self.root = os.path.join(os.path.realpath(data_dir), "storage")
        self.reflink_pool_size = reflink_pool_size
        self._in_use = in_use
        """Whether a pod uses a volume now; the kubelet supplies it."""
        self._meta_dir = os.path.join(self.root, "volumes")
        self._images = os.path.join(self.root, "images")
        self._pool_image = os.path.join(self.root, "reflink.img")
        self._pool_mnt = os.path.join(self.root, "reflink")
        self._mnt = os.path.join(self.root, "mnt")
        self._dev = os.path.join(self.root, "dev")
        self._lock = threading.RLock()
        self._clock: Callable[[], float] = time.monotonic
        self._sleep: Callable[[float], None] = time.sleep
        self._devices: dict[str, str] = {}  # image path -> loop device, for attached images
        for d in (self.root, self._meta_dir, self._images, self._pool_mnt, self._mnt, self._dev):
            os.makedirs(d, exist_ok=True)
        self.ledger = Ledger(os.path.join(self.root, "ledger.json"))

    # -- lifecycle -----------------------------------------------------------------

    def start(self) -> None:
        """Undo leftovers of a killed run, mount the reflink pool, attach every volume."""
        with self._lock:
            self.cleanup()
            self._wait_released()
            self._ensure_pool()
            # Volumes are mounted under a shared mount: on a host whose mounts are all
            # private (a container), every mount namespace made while a volume is
            # mounted (each pod sandbox while it sets up) would otherwise keep a private
            # copy of it, and the volume's filesystem would outlive its unmount here
            # (an offline resize's e2fsck refused: "device in use").
            self.ledger.add_mount(self._mnt)
            system.make_shared(self._mnt)
            for name in self._names():
                try:
                    self._attach(self._load(name))
                except Exception:
                    logger.exception("could not attach volume %s", name)
            self._remove_orphan_images()

    def stop(self) -> None:
        """Detach every volume and the pool; the images (the data) stay."""
        with self._lock:
            self.cleanup()

    def cleanup(self) -> None:
        """Unmount and detach everything this data dir has mounted or attached.

        Volume mounts first, then loop devices over volume images, then the pool: a
        loop device over a file inside the pool keeps the pool busy until it is gone.
        """
        with self._lock:
            under = self.root + os.sep
            mounted = set(system.mounted_paths())
            ours = {p for p in self.ledger.mounts()} | {p for p in mounted if p.startswith(under)}
            for path in sorted(ours - {self._pool_mnt}, key=len, reverse=True):
                self._umount(path, mounted)
            pool_loops = {self._pool_image}
            recorded = set(self.ledger.loops())
            loops = system.list_loop_devices()
            for dev in loops:
                owned = dev.backing_file in recorded or dev.backing_file.startswith(under)
                if owned and dev.backing_file not in pool_loops:
                    self._detach(dev)
            if self._pool_mnt in ours:
                self._umount(self._pool_mnt, mounted)
            for dev in system.list_loop_devices():
                if dev.backing_file in pool_loops:
                    self._detach(dev)
            for backing in recorded:
                self.ledger.remove_loop(backing)
            self._devices.clear()
            for name in os.listdir(self._dev):
                os.unlink(os.path.join(self._dev, name))

    def _wait_released(self) -> None:
        """Wait until no loop device serves an image of this data dir. A device detached
        while in use (a lazily unmounted filesystem whose files a killed run's processes
        still hold) goes only when its last user does; attaching the image again before
        that would mount the same filesystem twice (XFS refuses its duplicate UUID, ext4
        would be corrupted)."""
        under = self.root + os.sep
        deadline = self._clock() + RELEASE_TIMEOUT
        while True:
            held = [d for d in system.list_loop_devices() if d.backing_file.startswith(under)]
            if not held:
                return
            if self._clock() >= deadline:
                raise StillInUse(
                    "loop devices over this data dir's images are still in use after "
                    f"{RELEASE_TIMEOUT:.0f}s (processes of an earlier run hold them): "
                    + ", ".join(f"{d.name} ({d.backing_file})" for d in held))
            self._sleep(0.1)

    def _umount(self, path: str, mounted: set[str]) -> None:
        if path in mounted:
            try:
                system.umount(path)
            except CommandError as err:
                logger.warning("umount %s failed (%s); detaching lazily", path, err.stderr)
                system.run(["umount", "--lazy", path])
            logger.info("unmounted %s", path)
        self.ledger.remove_mount(path)

    def _detach(self, dev: system.LoopDevice) -> None:
        try:
            system.detach_loop(dev.name)
            logger.info("detached %s (%s)", dev.name, dev.backing_file)
        except CommandError as err:
            logger.warning("could not detach %s: %s", dev.name, err.stderr)

    def _ensure_pool(self) -> None:
        if not os.path.exists(self._pool_image):
            tmp = self._pool_image + ".new"
            system.sparse_file(tmp, self.reflink_pool_size)
            system.mkfs_xfs_reflink(tmp)
            os.replace(tmp, self._pool_image)
        self.ledger.add_loop(self._pool_image)
        device = system.attach_loop(self._pool_image)
        self.ledger.add_mount(self._pool_mnt)
        system.mount(device, self._pool_mnt, fstype="xfs")
        system.make_shared(self._pool_mnt)

    # -- metadata ------------------------------------------------------------------

    def _meta_path(self, name: str) -> str:
        if not name or "/" in name or name.startswith("."):
            raise InvalidRequest(f"invalid volume name {name!r}")
        return os.path.join(self._meta_dir, name + ".json")

    def _names(self) -> list[str]:
        return sorted(f[:-5] for f in os.listdir(self._meta_dir) if f.endswith(".json"))

    def _image_path(self, name: str, pool: str) -> str:
        base = self._pool_mnt if pool == REFLINK else self._images
        return os.path.join(base, name + ".img")

    def _path(self, name: str, mode: str) -> str:
        return os.path.join(self._mnt if mode == FILESYSTEM else self._dev, name)

    def _meta(self, name: str) -> dict[str, Any]:
        try:
            with open(self._meta_path(name), encoding="utf-8") as fh:
                meta: dict[str, Any] = json.load(fh)
        except FileNotFoundError:
            raise VolumeNotFound(f"no volume {name!r}") from None
        return meta

    def _load(self, name: str) -> Volume:
        meta = self._meta(name)
        return Volume(
            name=name,
            pool=meta["pool"],
            mode=meta["mode"],
            capacity=meta["capacity"],
            path=self._path(name, meta["mode"]),
            image=self._image_path(name, meta["pool"]),
        )

    def _save(self, vol: Volume, *, resize_pending: bool = False) -> None:
        path = self._meta_path(vol.name)
        meta = {"pool": vol.pool, "mode": vol.mode, "capacity": vol.capacity,
                "resizePending": resize_pending}
        with open(path + ".tmp", "w", encoding="utf-8") as fh:
            json.dump(meta, fh)
        os.replace(path + ".tmp", path)

    def _remove_orphan_images(self) -> None:
        """Images whose create() never finished (no metadata) are deleted."""
        known = {self._load(n).image for n in self._names()}
        for base in (self._images, self._pool_mnt):
            for f in os.listdir(base):
                path = os.path.join(base, f)
                if f.endswith((".img", ".img.new")) and path not in known:
                    logger.info("removing orphan image %s", path)
                    os.unlink(path)

    # -- attach/detach -------------------------------------------------------------

    def _attach(self, vol: Volume) -> None:
        if vol.image in self._devices:
            return
        self.ledger.add_loop(vol.image)
        device = system.attach_loop(vol.image)
        self._devices[vol.image] = device
        if vol.mode == FILESYSTEM:
            os.makedirs(vol.path, exist_ok=True)
            self.ledger.add_mount(vol.path)
            system.mount(device, vol.path, fstype="ext4")
        else:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(vol.path)
            os.symlink(device, vol.path)

    def _detach_volume(self, vol: Volume) -> None:
        device = self._devices.pop(vol.image, None)
        if vol.mode == FILESYSTEM:
            if system.is_mounted(vol.path):
                system.umount(vol.path)
            self.ledger.remove_mount(vol.path)
            with contextlib.suppress(FileNotFoundError):
                os.rmdir(vol.path)
        else:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(vol.path)
        for dev in system.list_loop_devices():
            if dev.backing_file == vol.image or dev.name == device:
                self._detach(dev)
        self.ledger.remove_loop(vol.image)

    # -- the API ---------------------------------------------------------------------

    def get(self, name: str) -> Volume:
        with self._lock:
            return self._load(name)

    def exists(self, name: str) -> bool:
        return os.path.exists(self._meta_path(name))

    def list(self) -> list[Volume]:
        with self._lock:
            return [self._load(n) for n in self._names()]

    def device(self, name: str) -> str:
        """The loop device currently serving a volume."""
        vol = self.get(name)
        try:
            return self._devices[vol.image]
        except KeyError:
            raise InvalidRequest(f"volume {name!r} is not attached") from None

    def create(
        self, name: str, *, capacity: int, mode: str, pool: str = STANDARD,
        source: str | None = None, image: Image | None = None,
    ) -> Volume:
        """Make and attach a volume; with ``source``, start from a copy of that volume,
        with ``image``, from a copy of that image (a snapshot). A larger volume than its
        origin is grown, its filesystem too."""
        if mode not in MODES:
            raise InvalidRequest(f"volumeMode must be one of {MODES}, got {mode!r}")
        if pool not in POOLS:
            raise InvalidRequest(f"pool must be one of {POOLS}, got {pool!r}")
        capacity = round_capacity(capacity)
        with self._lock:
            if self.exists(name):
                raise VolumeExists(f"volume {name!r} already exists")
            vol = Volume(name=name, pool=pool, mode=mode, capacity=capacity,
                         path=self._path(name, mode), image=self._image_path(name, pool))
            tmp = vol.image + ".new"
            try:
                if source is None and image is None:
                    system.sparse_file(tmp, capacity)
                    if mode == FILESYSTEM:
                        system.mkfs_ext4(tmp)
                else:
                    origin = self._origin(source, image)
                    what = f"clone source {source!r}" if source else f"image {origin.path}"
                    if origin.mode != mode:
                        raise InvalidRequest(f"{what} is {origin.mode}, the claim asks {mode}")
                    if origin.capacity > capacity:
                        raise InvalidRequest(
                            f"{what} ({origin.capacity} bytes) is larger than"
                            f" the requested capacity ({capacity} bytes)")
                    if source is not None:
                        self._copy(self._load(source), tmp,
                                   reflink=pool == REFLINK and origin.pool == REFLINK)
                    else:
                        self._copy_file(origin.path, tmp,
                                        reflink=pool == REFLINK and origin.pool == REFLINK)
                    system.sparse_file(tmp, capacity)
                    if mode == FILESYSTEM and capacity > origin.capacity:
                        system.grow_ext4_offline(tmp)
                os.replace(tmp, vol.image)
            except BaseException:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(tmp)
                raise
            self._save(vol)
            self._attach(vol)
            origin_name = source or (image.path if image else None)
            logger.info("created %s volume %s (%d bytes, %s pool%s)", mode, name, capacity,
                        pool, f", from {origin_name}" if origin_name else "")
            return vol

    def _origin(self, source: str | None, image: Image | None) -> Image:
        if image is None:
            src = self._load(str(source))
            return Image(path=src.image, pool=src.pool, mode=src.mode, capacity=src.capacity)
        if source is not None:
            raise InvalidRequest("a volume starts from a source volume or an image, not both")
        return image

    def copy_out(self, name: str, target: str) -> Image:
        """A point-in-time copy of volume ``name``'s image at ``target``: quiesced as a
        clone is, and a reflink when ``target`` is in the volume's pool (:meth:`pool_dir`).
        """
        with self._lock:
            src = self._load(name)
            reflink = src.pool == REFLINK and target.startswith(self._pool_mnt + os.sep)
            self._copy(src, target, reflink=reflink)
            return Image(path=target, pool=src.pool, mode=src.mode, capacity=src.capacity)

    def pool_dir(self, pool: str) -> str:
        """Where a pool's files live: a copy made there of an image of that pool can share
        its blocks (a reflink)."""
        return self._pool_mnt if pool == REFLINK else self._images

    def _copy(self, src: Volume, target: str, *, reflink: bool) -> None:
        with self._quiesced(src):
            self._copy_file(src.image, target, reflink=reflink)

    @staticmethod
    def _copy_file(source: str, target: str, *, reflink: bool) -> None:
        if reflink:
            system.reflink_copy(source, target)
        else:
            system.sparse_copy(source, target)

    @contextlib.contextmanager
    def _quiesced(self, vol: Volume) -> Iterator[None]:
        """A consistent image while copying: freeze a mounted filesystem, flush a device."""
        device = self._devices.get(vol.image)
        if vol.mode == FILESYSTEM and device:
            system.freeze(vol.path)
            try:
                yield
            finally:
                system.thaw(vol.path)
            return
        if device:
            system.run(["blockdev", "--flushbufs", device])
        yield

    def expand(self, name: str, capacity: int) -> Volume:
        """Grow a volume to at least ``capacity``; shrinking is refused.

        A Block volume grows at once. A Filesystem volume's filesystem grows online where
        the kernel lets us (``resize2fs`` on the mounted fs needs CAP_SYS_RESOURCE, which
        containers often lack), else offline right away when no pod uses it, else it is
        left *pending* until :meth:`finish_resize` runs (the kubelet calls it before the
        next pod starts), as a real node expands a filesystem on the next mount.
        """
        capacity = round_capacity(capacity)
        with self._lock:
            vol = self._load(name)
            if capacity < vol.capacity:
                raise InvalidRequest(
                    f"volume {name!r} is {vol.capacity} bytes; shrinking to {capacity} is"
                    " not supported")
            if capacity == vol.capacity:
                if (vol.mode == FILESYSTEM and self.resize_pending(name)
                        and not self._in_use(name)):
                    # An earlier grow failed half-way (say the device was still held
                    # when e2fsck wanted it alone): try again now that nothing uses it.
                    self._grow_filesystem(vol, online_only=False)
                return vol
            system.sparse_file(vol.image, capacity)
            grown = replace(vol, capacity=capacity)
            self._save(grown, resize_pending=vol.mode == FILESYSTEM)
            device = self._devices.get(vol.image)
            if device:
                system.refresh_loop_size(device)
            logger.info("expanded volume %s to %d bytes", name, capacity)
            if vol.mode == FILESYSTEM:
                self._grow_filesystem(grown, online_only=self._in_use(name))
            return grown

    def resize_pending(self, name: str) -> bool:
        """Whether the filesystem of a grown volume has yet to fill its device."""
        with self._lock:
            return bool(self._meta(name).get("resizePending"))

    def finish_resize(self, name: str) -> None:
        """Grow a pending filesystem now; the caller guarantees no pod uses it."""
        with self._lock:
            if self.resize_pending(name):
                self._grow_filesystem(self._load(name), online_only=False)

    def _grow_filesystem(self, vol: Volume, *, online_only: bool) -> None:
        device = self._devices.get(vol.image)
        if device:
            try:
                system.grow_ext4(device)
            except CommandError as err:
                if online_only:
                    logger.info("volume %s in use and online resize refused (%s): pending",
                                vol.name, err.stderr.splitlines()[-1:])
                    return
                system.umount(vol.path)
                try:
                    system.grow_ext4_offline(device)
                finally:
                    system.mount(device, vol.path, fstype="ext4")
        else:
            system.grow_ext4_offline(vol.image)
        self._save(vol, resize_pending=False)
        logger.info("filesystem of volume %s now fills %d bytes", vol.name, vol.capacity)

    def delete(self, name: str) -> None:
        """Detach and remove a volume and its data."""
        with self._lock:
            vol = self._load(name)
            self._detach_volume(vol)
            with contextlib.suppress(FileNotFoundError):
                os.unlink(vol.image)
            os.unlink(self._meta_path(name))
            logger.info("deleted volume %s", name)
