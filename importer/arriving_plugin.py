"""nbdkit Python plugin: a file that is still arriving, served read-only at its final size.

The upload server appends an upload's body to its scratch file in order, once; this
plugin (``nbdkit python arriving_plugin.py file=… size=… stopped=… timeout=…``) lets
qemu-img read that file through NBD while it grows: a read of bytes not yet in the file
waits until they are (the file's length is how many bytes have arrived), so qemu-img
converts as the body arrives instead of after its last byte.

Every wait is bounded: a read fails (EIO to qemu-img) as soon as the ``stopped`` file
exists (the upload server creates it when the upload is aborted or ends short), or when
the file has not grown for ``timeout`` seconds. nbdkit runs with ``--exit-with-parent``.

It runs in nbdkit's embedded interpreter (the system's python3), loaded as a script, not
as part of the ``importer`` package: the standard library only.
"""

from __future__ import annotations

import os
import time
from typing import Any

API_VERSION = 2

POLL_FIRST = 0.0005
"""Seconds of the first wait for bytes not yet arrived; each next wait doubles it…"""
POLL_MOST = 0.01
"""…up to this: a read waits at most this long after its bytes arrived."""

_config: dict[str, str] = {}
KEYS = ("file", "size", "stopped", "timeout")


def config(key: str, value: str) -> None:
    if key not in KEYS:
        raise ValueError(f"unknown parameter {key!r}")
    _config[key] = value


def config_complete() -> None:
    missing = [k for k in KEYS if k not in _config]
    if missing:
        raise ValueError(f"missing parameters: {', '.join(missing)}")
    if int(_config["size"]) < 0 or float(_config["timeout"]) <= 0:
        raise ValueError("size must be >= 0 and timeout > 0")


def thread_model() -> int:
    import nbdkit  # type: ignore[import-not-found]  # nbdkit's embedded module

    return int(nbdkit.THREAD_MODEL_PARALLEL)  # a waiting read holds no other read up


def open(readonly: bool) -> int:  # nbdkit calls it by this name (shadows the builtin)
    return os.open(_config["file"], os.O_RDONLY | os.O_CLOEXEC)


def close(fd: int) -> None:
    os.close(fd)


def get_size(fd: int) -> int:
    return int(_config["size"])


def can_multi_conn(fd: int) -> bool:
    return True  # read-only, and every connection sees the same bytes


def pread(fd: int, buf: Any, offset: int, flags: int) -> None:
    end = offset + len(buf)
    _wait_for(fd, end)
    view = memoryview(buf)
    while view:
        got = os.preadv(fd, [view], offset)
        if got <= 0:
            raise OSError(f"the upload's file ended at {offset} bytes; {end} were needed")
        view, offset = view[got:], offset + got


def _wait_for(fd: int, end: int) -> None:
    """Until the file holds ``end`` bytes; raises once the upload stopped, or when the
    file did not grow for the timeout."""
    timeout = float(_config["timeout"])
    pause = POLL_FIRST
    arrived = os.fstat(fd).st_size
    last_growth = time.monotonic()
    while arrived < end:
        if os.path.exists(_config["stopped"]):
            raise OSError(f"the upload stopped after {arrived} bytes; {end} were needed")
        now = time.monotonic()
        if now - last_growth > timeout:
            raise OSError(f"no upload data for {timeout:.0f} s")
        time.sleep(pause)
        pause = min(pause * 2, POLL_MOST)
        size = os.fstat(fd).st_size
        if size != arrived:
            arrived, last_growth = size, time.monotonic()
