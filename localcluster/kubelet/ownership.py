"""Volume ownership for ``fsGroup``, and the per-pod device nodes, as the kubelet does.

With ``fsGroup`` the kubelet hands every file of a volume that supports ownership
management (emptyDir, configMap, secret, downwardAPI, projected, a PVC) to that group:
group ownership, group read (and write unless the volume is read-only), directories
setgid so that new files inherit the group. ``fsGroupChangePolicy: OnRootMismatch``
skips the walk when the volume's root already looks right; ``Always`` (the default)
walks every time.

The walk runs as root over content a pod wrote, so it never follows a symlink: it goes
through ``os.fwalk`` (directory fds), changes group with ``AT_SYMLINK_NOFOLLOW`` and
mode through an ``O_PATH|O_NOFOLLOW`` descriptor of the very file it looked at.

A Block volume reaches the pod as a device node of its own, made in the pod's
directory with the loop device's numbers (``root:fsGroup 0660`` with fsGroup, else the
host node's owner and mode): the pod's uid can use it as on a real node, and the
host's /dev is never changed.
"""

from __future__ import annotations

import contextlib
import logging
import os
import stat

logger = logging.getLogger(__name__)

RW_MASK = 0o660
RO_MASK = 0o440
EXEC_MASK = 0o110
ALWAYS = "Always"
ON_ROOT_MISMATCH = "OnRootMismatch"
POLICIES = (ALWAYS, ON_ROOT_MISMATCH)


def wanted_mode(mode: int, *, is_dir: bool, read_only: bool) -> int:
    """The permission bits a file of mode ``mode`` gets under fsGroup (pure)."""
    mask = RO_MASK if read_only else RW_MASK
    if is_dir:
        mask |= stat.S_ISGID | EXEC_MASK
    return stat.S_IMODE(mode) | mask


def root_matches(st: os.stat_result, *, gid: int, read_only: bool) -> bool:
    """OnRootMismatch: the volume's root already has the group, setgid and the mode
    bits, so the walk is skipped (pure)."""
    return st.st_gid == gid and wanted_mode(st.st_mode, is_dir=True,
                                            read_only=read_only) == stat.S_IMODE(st.st_mode)


def _fix(name: str, dir_fd: int, *, gid: int, read_only: bool) -> None:
    try:
        fd = os.open(name, os.O_PATH | os.O_NOFOLLOW, dir_fd=dir_fd)
    except OSError as err:
        logger.debug("fsGroup: cannot open %s: %s", name, err)
        return
    try:
        st = os.fstat(fd)
        if stat.S_ISLNK(st.st_mode):
            os.chown(name, -1, gid, dir_fd=dir_fd, follow_symlinks=False)
            return
        os.chown(f"/proc/self/fd/{fd}", -1, gid)
        mode = wanted_mode(st.st_mode, is_dir=stat.S_ISDIR(st.st_mode), read_only=read_only)
        if mode != stat.S_IMODE(st.st_mode):
            os.chmod(f"/proc/self/fd/{fd}", mode)
    finally:
        os.close(fd)


def apply_fs_group(path: str, *, gid: int, read_only: bool = False,
                   policy: str = ALWAYS) -> bool:
    """Give the volume at ``path`` to group ``gid``; False when the policy skipped it."""
    st = os.stat(path)
    if policy == ON_ROOT_MISMATCH and root_matches(st, gid=gid, read_only=read_only):
        return False
    root_fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.chown(root_fd, -1, gid)
        os.chmod(root_fd, wanted_mode(st.st_mode, is_dir=True, read_only=read_only))
    finally:
        os.close(root_fd)
    for _dir, dirs, files, dfd in os.fwalk(path, follow_symlinks=False):
        for name in dirs + files:
            _fix(name, dfd, gid=gid, read_only=read_only)
    return True


def device_node(target: str, host_device: str, *, gid: int | None) -> str:
    """A node at ``target`` for the same device as ``host_device``: ``root:gid 0660``
    when ``gid`` is given, else the host node's owner and mode."""
    st = os.stat(host_device)
    if not (stat.S_ISBLK(st.st_mode) or stat.S_ISCHR(st.st_mode)):
        raise OSError(f"{host_device} is not a device")
    kind = stat.S_IFBLK if stat.S_ISBLK(st.st_mode) else stat.S_IFCHR
    with contextlib.suppress(FileNotFoundError):
        os.unlink(target)
    os.makedirs(os.path.dirname(target), mode=0o700, exist_ok=True)
    os.mknod(target, kind | 0o600, st.st_rdev)
    if gid is not None:
        os.chown(target, 0, gid)
        os.chmod(target, 0o660)
    else:
        os.chown(target, st.st_uid, st.st_gid)
        os.chmod(target, stat.S_IMODE(st.st_mode))
    return target
