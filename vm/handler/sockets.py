"""The launchers' socket directories on the node: ``<root>/<vmi uid>/``, one per VMI, each
mounted alone into its launcher pod (at ``/var/run/kubevirt/sockets``), where the launcher
listens on ``<vmi uid>.sock``. A launcher sees no other VMI's directory, so it can neither
find, reach nor replace another launcher's socket.

The handler makes these directories (mode 0700, its own uid 107, the launchers' too) for
the VMIs that may start on its node: those on it and those not on any node yet (a launcher
pod's node is not known before its VMI says so, and the pod waits for its directory).
It removes a directory it made once its VMI is neither and the directory has not changed
for :data:`GRACE`, when it is empty or holds only the launcher's socket and nothing listens
on it any more (a launcher killed without its cleanup). A directory holding anything else
is left alone, and nothing here follows a symlink."""

from __future__ import annotations

import contextlib
import logging
import os
import re
import stat
import time
from collections.abc import Iterable
from pathlib import Path

from vm.launcher import client

logger = logging.getLogger(__name__)
UID = re.compile(r"[0-9A-Za-z][0-9A-Za-z-]{0,62}")
"""What a directory name must look like: a uid the API server gave, never a path."""
GRACE = 600.0
"""Seconds a directory of a VMI the handler does not know stays unchanged before it goes.
The handler touches its VMIs' directories on each pass, so another handler that shares
the node's directory (two localclusters on one machine) never removes one of them, even
while its launcher is about to listen there."""


def directory(root: str | Path, uid: str) -> Path:
    if not UID.fullmatch(uid):
        raise ValueError(f"not a VMI uid: {uid!r}")
    return Path(root) / uid


def socket_of(root: str | Path, uid: str) -> Path:
    return client.socket_path(socket_dir=directory(root, uid), vmi_uid=uid)


def ensure(root: Path, uids: Iterable[str]) -> int:
    """Make the directory of each VMI ``uids`` names where it is missing, touch it where
    it is there."""
    made = 0
    for uid in uids:
        try:
            path = directory(root, uid)
            os.mkdir(path, 0o700)  # an existing name, even a symlink, stays
            made += 1
        except FileExistsError:
            with contextlib.suppress(OSError):
                os.utime(path, follow_symlinks=False)
        except (OSError, ValueError) as err:
            logger.warning("cannot make the socket directory of VMI %s: %s", uid, err)
    return made


def _removable(path: Path, uid: str) -> bool:
    try:
        names = os.listdir(path)
        if not names:
            return True
        if names != [f"{uid}.sock"] or not stat.S_ISSOCK(os.lstat(path / names[0]).st_mode):
            return False
    except OSError:
        return False
    try:
        client.connect(path / names[0], timeout=1.0).close()
    except client.ControlError as err:
        return isinstance(err.__cause__, ConnectionRefusedError)
    return False  # something listens: not dead yet


def stale(root: Path, live_uids: Iterable[str], *, grace: float = GRACE) -> list[Path]:
    """The VMI directories in ``root`` that :func:`collect` would remove."""
    live = set(live_uids)
    out = []
    old = time.time() - grace
    with os.scandir(root) as entries:
        for entry in sorted(entries, key=lambda e: e.name):
            if (entry.name in live or not UID.fullmatch(entry.name)
                    or not entry.is_dir(follow_symlinks=False)
                    or entry.stat(follow_symlinks=False).st_mtime > old):
                continue
            if _removable(Path(entry.path), entry.name):
                out.append(Path(entry.path))
    return out


def collect(root: Path, live_uids: Iterable[str], *, grace: float = GRACE) -> int:
    """Remove the directories of VMIs not in ``live_uids`` (with a dead socket in them)."""
    removed = 0
    for path in stale(root, live_uids, grace=grace):
        sock = client.socket_path(socket_dir=path, vmi_uid=path.name)
        try:
            with contextlib.suppress(FileNotFoundError):
                if stat.S_ISSOCK(os.lstat(sock).st_mode):
                    os.unlink(sock)
            os.rmdir(path)  # only when nothing else is in it
            removed += 1
            logger.info("removed the socket directory of gone VMI %s", path.name)
        except OSError as err:
            logger.warning("cannot remove socket directory %s: %s", path, err)
    return removed
