"""Fixtures for real launcher runs: a factory that tears every launch down, and guests."""

from __future__ import annotations

import shutil
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


@pytest.fixture(scope="session")
def linux_guest_net() -> LinuxGuest:
    return GuestBuilder().linux(mode="net")
