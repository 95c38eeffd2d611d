"""What the page cache holds of a file, for tests that check writes go past it or that
a stream lets go of its pages."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from importer import writers


def resident(path: Path) -> int:
    """Bytes of ``path`` in the page cache, as util-linux's fincore counts them."""
    out = subprocess.run(["fincore", "--bytes", "--noheadings", "--output", "RES",
                          str(path)], check=True, capture_output=True, text=True).stdout
    return int(out.strip())


def filesystem(path: Path) -> str:
    return subprocess.run(["stat", "-f", "-c", "%T", str(path)], capture_output=True,
                          text=True, check=True).stdout.strip()


def direct_io_or_skip(directory: Path, *, past_the_cache: bool = True) -> None:
    """Skip where O_DIRECT is refused, or (``past_the_cache``) where it cannot go past
    the page cache: a tmpfs (Linux 6.6 and later take O_DIRECT there, into the page cache
    that tmpfs is)."""
    if not writers.supports_direct_io(directory / "probe"):
        pytest.skip(f"{directory} does not take O_DIRECT writes")
    if past_the_cache and filesystem(directory) == "tmpfs":
        pytest.skip(f"{directory} is a tmpfs: its pages are the page cache")
