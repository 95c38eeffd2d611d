"""Fixtures for real launcher runs: a factory that tears every launch down, and guests."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.fixtures.guests import GuestBuilder, LinuxGuest, write_boot_sector_disk
from tests.vm.launcher.harness import Launch


@pytest.fixture
def launch() -> Iterator[Callable[..., Launch]]:
    if not shutil.which("qemu-system-x86_64"):
        pytest.skip("qemu-system-x86_64 not installed")
    runs: list[Launch] = []

    def make(vmi: dict[str, Any], **kwargs: Any) -> Launch:
        run = Launch(vmi, **kwargs)
        runs.append(run)
        return run

    yield make
    for run in runs:
        run.cleanup()


@pytest.fixture(scope="session")
def boot_sectors(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("bootsectors")
    return {
        "poweroff": write_boot_sector_disk(d / "poweroff.img", poweroff=True),
        "halt": write_boot_sector_disk(d / "halt.img", poweroff=False),
    }


@pytest.fixture(scope="session")
def linux_guest() -> LinuxGuest:
    return GuestBuilder().linux(mode="poweroff")


@pytest.fixture(scope="session")
def linux_guest_wait() -> LinuxGuest:
    return GuestBuilder().linux(mode="wait")


@pytest.fixture
def loop_with_boot_sector(boot_sectors: dict[str, Path], tmp_path: Path) -> Iterator[str]:
    backing = tmp_path / "block.img"
    shutil.copyfile(boot_sectors["poweroff"], backing)
    try:
        dev = subprocess.run(
            ["losetup", "--find", "--show", str(backing)],
            check=True,
            capture_output=True,
            text=True,
            timeout=30,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError) as err:
        pytest.skip(f"no loop device: {err}")
    st = os.stat(dev)
    try:
        yield dev
    finally:
        os.chown(dev, st.st_uid, st.st_gid)
        os.chmod(dev, st.st_mode & 0o7777)
        subprocess.run(["losetup", "-d", dev], check=False, timeout=30)


@pytest.fixture(scope="session")
def linux_guest_net() -> LinuxGuest:
    return GuestBuilder().linux(mode="net")
