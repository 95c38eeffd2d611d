"""Serving a container's log to ``kubectl logs``: tail, since, timestamps, limit, follow.

The API server's log-provider hook calls the node, which picks the file (current or
previous run) and returns :func:`stream`, an async iterator over the records of
logformat.py rendered as the client asked. Following ends when the container does.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import os
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

from localcluster.kubelet import logformat

if TYPE_CHECKING:
    from localcluster.kubelet.worker import PodWorker


async def stream(
    path: str, worker: PodWorker | None, container: str, *, follow: bool, timestamps: bool,
    tail_lines: int | None, since_seconds: int | None, limit_bytes: int | None,
) -> AsyncIterator[bytes]:
    since = (datetime.datetime.now(datetime.UTC) - datetime.timedelta(seconds=since_seconds)
             if since_seconds is not None else None)
    budget = limit_bytes if limit_bytes is not None else -1

    def cut(data: bytes) -> bytes:
        nonlocal budget
        if budget < 0:
            return data
        data, budget = data[:budget], max(0, budget - len(data))
        return data

    fh = open(path, "rb")  # noqa: SIM115 - reopened when the log rotates
    try:
        rotated = b""
        with contextlib.suppress(FileNotFoundError), open(path + ".1", "rb") as old:
            rotated = old.read()
        data = rotated + fh.read()
        complete = data[: data.rfind(b"\n") + 1]
        carry = data[len(complete):]
        records = logformat.select(logformat.parse(complete), tail_lines=tail_lines,
                                   since=since)
        out = cut(b"".join(r.render(timestamps=timestamps) for r in records))
        if out:
            yield out
        while follow and budget != 0:
            chunk = fh.read(65536)
            if not chunk:
                if _rotated(fh, path):
                    fh.close()
                    fh = open(path, "rb")  # noqa: SIM115
                    continue
                if worker is None or worker.finished.is_set() or not _running(
                        worker, container, path):
                    chunk = fh.read()
                    if not chunk:
                        return
                else:
                    await asyncio.sleep(0.2)
                    continue
            carry += chunk
            complete = carry[: carry.rfind(b"\n") + 1]
            carry = carry[len(complete):]
            out = cut(b"".join(r.render(timestamps=timestamps)
                               for r in logformat.parse(complete)))
            if out:
                yield out
    finally:
        fh.close()


def _rotated(fh: Any, path: str) -> bool:
    try:
        return os.stat(path).st_ino != os.fstat(fh.fileno()).st_ino
    except FileNotFoundError:
        return False


def _running(worker: PodWorker, container: str, path: str) -> bool:
    for slot in worker.init_slots + worker.slots:
        if slot.spec["name"] == container:
            return slot.process is not None and bool(slot.log_paths) and slot.log_paths[-1] == path
    return False
