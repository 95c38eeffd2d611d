"""Helpers for importer tests: run one import in-process with fast retries."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from importer.config import ContentType, ImporterConfig
from importer.progress import Listener
from importer.run import Outcome, run
from vocab import sources

ImportFn = Callable[..., Outcome]


@pytest.fixture
def do_import(tmp_path: Path) -> ImportFn:
    """``do_import(url, dest, **config fields)``: an import with retries 10 ms apart."""

    def go(url: str, dest: Path, *, listeners: list[Listener] | None = None,
           **fields: Any) -> Outcome:
        fields.setdefault("source", sources.S3 if url.startswith("s3:") else sources.HTTP)
        fields.setdefault("retry_delay", 0.01)
        fields.setdefault("metrics_port", None)
        fields.setdefault("termination_log", tmp_path / "termination-log")
        fields.setdefault("content_type", ContentType.KUBEVIRT)
        return run(ImporterConfig(endpoint=url, dest=dest, **fields), listeners=listeners)

    return go


def open_connections_to(port: int) -> list[str]:
    """This process's established TCP connections to ``port`` (IPv4)."""
    inodes = set()
    for fd in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):
            link = os.readlink(f"/proc/self/fd/{fd}")
            if link.startswith("socket:["):
                inodes.add(link[len("socket:["):-1])
    found = []
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        if int(fields[2].split(":")[1], 16) == port and fields[3] == "01" \
                and fields[9] in inodes:
            found.append(line)
    return found
