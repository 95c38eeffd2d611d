"""The ledger of every mount and loop device the volume layer made.

A killed ``rootdisk up`` leaves its loop devices and mounts behind. At the next start
they are undone from this ledger, and only those: an entry is written *before* the
mount/attach it describes completes (so a crash in between leaves an entry, never an
untracked object) and removed after the undo. Loop devices are recorded by the file
they serve, not by their number: cleanup detaches a device only while it serves a
recorded file, so a device number reused by someone else since is never touched.
"""

from __future__ import annotations

import json
import os
import threading
from typing import Any


class Ledger:
    """A small JSON file: ``{"mounts": [path…], "loops": [backing file…]}``."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._lock = threading.Lock()

    def _load(self) -> dict[str, Any]:
        try:
            with open(self.path, encoding="utf-8") as fh:
                data: dict[str, Any] = json.load(fh)
        except FileNotFoundError:
            data = {}
        data.setdefault("mounts", [])
        data.setdefault("loops", [])
        return data

    def _save(self, data: dict[str, Any]) -> None:
        tmp = self.path + ".tmp"
        with open(tmp, "w", encoding="utf-8") as fh:
            json.dump(data, fh, indent=1, sort_keys=True)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, self.path)

    def mounts(self) -> list[str]:
        with self._lock:
            return list(self._load()["mounts"])

    def loops(self) -> list[str]:
        with self._lock:
            return list(self._load()["loops"])

    def add_mount(self, path: str) -> None:
        with self._lock:
            data = self._load()
            if path not in data["mounts"]:
                data["mounts"].append(path)
                self._save(data)

    def remove_mount(self, path: str) -> None:
        with self._lock:
            data = self._load()
            if path in data["mounts"]:
                data["mounts"].remove(path)
                self._save(data)

    def add_loop(self, backing_file: str) -> None:
        with self._lock:
            data = self._load()
            if backing_file not in data["loops"]:
                data["loops"].append(backing_file)
                self._save(data)

    def remove_loop(self, backing_file: str) -> None:
        with self._lock:
            data = self._load()
            if backing_file in data["loops"]:
                data["loops"].remove(backing_file)
                self._save(data)
