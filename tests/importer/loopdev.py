"""A loop device over a file, for the tests that write to a block device (root and
losetup, else skipped)."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest


@contextlib.contextmanager
def loop_device(backing: Path) -> Iterator[Path]:
    if os.geteuid() != 0 or shutil.which("losetup") is None:
        pytest.skip("block device tests need root and losetup")
    try:
        device = subprocess.run(["losetup", "--find", "--show", str(backing)], check=True,
                                capture_output=True, text=True).stdout.strip()
    except subprocess.CalledProcessError as err:
        pytest.skip(f"no loop device available: {err.stderr.strip()}")
    try:
        yield Path(device)
    finally:
        subprocess.run(["losetup", "-d", device], check=False)
