"""The snapshot store: point-in-time copies of volume images, next to the volumes.

A snapshot is a copy of its volume's image taken by :meth:`VolumeManager.copy_out` (the
filesystem frozen or the device flushed while it runs), kept in the source volume's pool:
in the reflink pool it is a reflink (instant, blocks shared until either side writes),
in the standard pool a sparse copy. Restoring is ``VolumeManager.create(image=...)``.

Layout under ``<data dir>/storage``::

    snapshots/<handle>.json          what the snapshot is (pool, mode, capacity, source)
    snapshots/<handle>.img           standard pool images
    reflink/snapshots/<handle>.img   reflink pool images

The store creates and removes only files named after a handle in those two directories.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os

from localcluster.storage.errors import InvalidRequest
from localcluster.storage.volumes import REFLINK, Image, VolumeManager

logger = logging.getLogger(__name__)


class SnapshotStore:
    def __init__(self, volumes: VolumeManager) -> None:
        self.volumes = volumes
        self.root = os.path.join(volumes.root, "snapshots")
        os.makedirs(self.root, exist_ok=True)

    def _meta_path(self, handle: str) -> str:
        if not handle or "/" in handle or handle.startswith("."):
            raise InvalidRequest(f"invalid snapshot handle {handle!r}")
        return os.path.join(self.root, handle + ".json")

    def _dir(self, pool: str) -> str:
        if pool == REFLINK:
            return os.path.join(self.volumes.pool_dir(REFLINK), "snapshots")
        return self.root

    def get(self, handle: str) -> Image | None:
        """The stored image of ``handle``, or None when the store has none."""
        try:
            with open(self._meta_path(handle), encoding="utf-8") as fh:
                meta = json.load(fh)
        except FileNotFoundError:
            return None
        return Image(path=os.path.join(self._dir(meta["pool"]), handle + ".img"),
                     pool=meta["pool"], mode=meta["mode"], capacity=meta["capacity"])

    def handles(self) -> list[str]:
        return sorted(f[:-5] for f in os.listdir(self.root) if f.endswith(".json"))

    def take(self, handle: str, volume: str) -> Image:
        """Copy volume ``volume`` now as ``handle``; an existing ``handle`` is returned as
        it is (a snapshot is taken once)."""
        meta_path = self._meta_path(handle)
        existing = self.get(handle)
        if existing is not None:
            return existing
        directory = self._dir(self.volumes.get(volume).pool)
        os.makedirs(directory, exist_ok=True)
        target = os.path.join(directory, handle + ".img")
        tmp = target + ".new"
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)  # a copy a killed run left half-way
        try:
            copied = self.volumes.copy_out(volume, tmp)
            os.replace(tmp, target)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
            raise
        with open(meta_path + ".tmp", "w", encoding="utf-8") as fh:
            json.dump({"pool": copied.pool, "mode": copied.mode, "capacity": copied.capacity,
                       "source": volume}, fh)
        os.replace(meta_path + ".tmp", meta_path)
        logger.info("took snapshot %s of volume %s (%d bytes, %s pool)", handle, volume,
                    copied.capacity, copied.pool)
        return Image(path=target, pool=copied.pool, mode=copied.mode, capacity=copied.capacity)

    def delete(self, handle: str) -> None:
        """Remove ``handle``'s image and record; nothing else. Idempotent."""
        meta_path = self._meta_path(handle)
        for directory in (self.root, self._dir(REFLINK)):
            for suffix in (".img", ".img.new"):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(os.path.join(directory, handle + suffix))
        for path in (meta_path + ".tmp", meta_path):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)
        logger.info("deleted snapshot %s", handle)
