"""The cloud guest's recipe (pure) and the build's refusals: what enters the cache key,
how apt's answer is read, the boot configuration, and a failed build leaving nothing."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from rootdisk.cloudguest import CloudGuestError, build_cloud_guest, recipe
from rootdisk.cloudguest.aptstate import AptState
from rootdisk.cloudguest.build import _sweep_dead_builds

SIMULATION = """NOTE: This is only a simulation!
Inst gcc-12-base (12.2.0-14+deb12u1 Debian:12.15/oldstable [amd64])
Inst libc6 (2.36-9+deb12u14 Debian:12.15/oldstable [amd64]) []
Inst tzdata [2024a-0] (2025b-0+deb12u2 Debian:12.15/oldstable [all])
Inst python3-six (1:1.16.0-4 Debian:12.15/oldstable [all])
Conf libc6 (2.36-9+deb12u14 Debian:12.15/oldstable [amd64])
"""


def test_simulated_installs_reads_every_inst_line_and_no_conf_line() -> None:
    assert recipe.simulated_installs(SIMULATION) == {
        "gcc-12-base": "12.2.0-14+deb12u1",
        "libc6": "2.36-9+deb12u14",
        "tzdata": "2025b-0+deb12u2",  # the version to install, not the one replaced
        "python3-six": "1:1.16.0-4",
    }


def test_essential_packages_are_those_marked_essential() -> None:
    index = (
        "Package: bash\nEssential: yes\nVersion: 5.2\n\n"
        "Package: sudo\nVersion: 1.9\n\n"
        "Package: dpkg\nPriority: required\nEssential: yes\n"
    )
    assert recipe.essential_packages(index) == ["bash", "dpkg"]


def test_the_cache_key_follows_every_package_version_and_the_recipe(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    versions = {"cloud-init": "22.4.2-1+deb12u4", "libc6": "2.36-9+deb12u14"}
    key = recipe.cache_key(versions)
    assert key == recipe.cache_key(dict(reversed(versions.items())))  # order-free
    assert key != recipe.cache_key({**versions, "libc6": "2.36-9+deb12u15"})
    assert key != recipe.cache_key({**versions, "sudo": "1.9.13p3-1+deb12u1"})
    monkeypatch.setattr(recipe, "KERNEL_ARGS", (*recipe.KERNEL_ARGS, "debug"))
    assert key != recipe.cache_key(versions)
    monkeypatch.undo()
    monkeypatch.setitem(recipe.CLOUD_CFG, "ssh_pwauth", True)
    assert key != recipe.cache_key(versions)


def test_cloud_cfg_keeps_datasource_list_on_one_line_for_ds_identify() -> None:
    text = recipe.cloud_cfg()
    [line] = [x for x in text.splitlines() if x.startswith("datasource_list:")]
    assert line == 'datasource_list: ["NoCloud", "ConfigDrive", "None"]'
    assert "users: []" in text.splitlines()  # no default user
    assert "ssh_pwauth: false" in text.splitlines()


def test_boot_configuration_points_at_the_root_partition_on_the_serial_console() -> None:
    cfg = recipe.syslinux_cfg("vmlinuz", "initrd.img")
    assert "TIMEOUT 0" in cfg and "PROMPT 0" in cfg
    append = next(x for x in cfg.splitlines() if "APPEND" in x).split()
    assert "root=PARTUUID=52d15c01-02" in append
    assert append.index("console=ttyS0,115200") > append.index("console=tty0")
    assert recipe.fstab().startswith("PARTUUID=52d15c01-02 / ext4 ")
    script = recipe.sfdisk_script()
    assert "label-id: 0x52d15c01" in script
    assert "start=2048, size=131072, type=6, bootable" in script
    assert "start=133120, type=83" in script
    assert recipe.root_size() % 4096 == 0


def test_a_build_that_fails_leaves_no_image_and_no_work_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """mmdebstrap fails (a stand-in on PATH that exits 1; everything before it is real):
    the error names it and the cache holds no entry, no half image, no build directory."""
    cache = tmp_path / "cache"
    # The guest's apt state: seeded from the host's lists of the same sources when it has
    # them (no download), else fetched from Debian's mirror as a build does.
    apt = AptState(cache / f"apt-{recipe.SUITE}")
    (apt.lists / "partial").mkdir(parents=True)
    host = list(Path("/var/lib/apt/lists").glob("deb.debian.org_debian*_dists_bookworm*"))
    for f in host:
        (apt.lists / f.name).write_bytes(f.read_bytes())
    if not apt.index_files():
        apt.update()
    bindir = tmp_path / "bin"
    bindir.mkdir()
    fake = bindir / "mmdebstrap"
    fake.write_text("#!/bin/sh\necho 'E: stand-in mmdebstrap refuses' >&2\nexit 1\n")
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", f"{bindir}:{os.environ['PATH']}")
    with pytest.raises(CloudGuestError, match=r"mmdebstrap failed: .*stand-in mmdebstrap refuses"):
        build_cloud_guest(cache)
    assert not list(cache.glob("debian12-cloud-*")), "no cache entry after a failed build"
    assert not list(cache.glob(".build-*")), "the build's work directory is removed"


def test_sweep_removes_only_build_directories_of_dead_processes(tmp_path: Path) -> None:
    dead = tmp_path / ".build-999999999-abc"  # above pid_max: no such process
    alive = tmp_path / f".build-{os.getppid()}-abc"
    other = tmp_path / "debian12-cloud-0123"
    for d in (dead, alive, other):
        d.mkdir()
    _sweep_dead_builds(tmp_path)
    assert not dead.exists() and alive.exists() and other.exists()
