"""The host-assisted cloner on real files: only data read, holes kept, the target grown
to its room, a source too large refused before writing, a permissive clone's zero tail
left off, and the progress metric served with the clone's name."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from importer import cloner
from importer.progress import Update

MiB = 2**20


def make_source(path: Path, size: int, runs: list[tuple[int, int]]) -> bytes:
    with open(path, "wb") as f:
        f.truncate(size)
        for offset, length in runs:
            f.seek(offset)
            f.write(os.urandom(length))
    return path.read_bytes()


def config(src: Path, dst: Path, requested: int | None) -> cloner.Config:
    return cloner.Config(source=src, target=dst, requested=requested, overhead="0",
                         owner_uid="u", metrics_addr=None, preallocate=False)


def test_copies_data_only_and_keeps_holes(tmp_path: Path) -> None:
    src = tmp_path / "src.img"
    content = make_source(src, 64 * MiB, [(3 * MiB, MiB), (40 * MiB + 17, 5000)])
    dst = tmp_path / "disk.img"
    seen: list[Update] = []
    read = cloner.clone(config(src, dst, 80 * MiB), listeners=[seen.append])
    assert read <= 2 * MiB + 8192  # only the two data runs (block-rounded) were read
    assert dst.stat().st_size == 80 * MiB  # grown to the usable size of its request
    assert dst.read_bytes()[: 64 * MiB] == content
    assert dst.stat().st_blocks * 512 <= 3 * MiB  # as sparse as the source
    assert seen[-1].percent == 100.0


def test_too_small_is_refused_before_writing(tmp_path: Path) -> None:
    src = tmp_path / "src.img"
    make_source(src, 64 * MiB, [(50 * MiB, MiB)])
    dst = tmp_path / "disk.img"
    with pytest.raises(cloner.TooSmall):
        cloner.clone(config(src, dst, 32 * MiB))
    assert not dst.exists()


def test_permissive_clone_leaves_off_the_zero_tail(tmp_path: Path) -> None:
    src = tmp_path / "src.img"
    content = make_source(src, 64 * MiB, [(MiB, 2 * MiB)])
    dst = tmp_path / "disk.img"
    cloner.clone(config(src, dst, 32 * MiB))
    assert dst.stat().st_size == 32 * MiB
    assert dst.read_bytes() == content[: 32 * MiB]


def test_extents_of_a_file(tmp_path: Path) -> None:
    src = tmp_path / "src.img"
    make_source(src, 16 * MiB, [(4 * MiB, MiB)])
    fd = os.open(src, os.O_RDONLY)
    try:
        runs = list(cloner.extents(fd, 16 * MiB, seekable_holes=True))
    finally:
        os.close(fd)
    assert runs == [(0, 4 * MiB, False), (4 * MiB, MiB, True), (5 * MiB, 11 * MiB, False)]
    assert sum(n for _, n, _ in runs) == 16 * MiB


def test_program_exit_codes_and_termination_message(tmp_path: Path) -> None:
    src = tmp_path / "src.img"
    make_source(src, 8 * MiB, [(6 * MiB, MiB)])
    log = tmp_path / "termination"
    env = {**os.environ, "CLONER_SOURCE": str(src), "CLONER_TARGET": str(tmp_path / "d.img"),
           "IMPORTER_IMAGE_SIZE": "4Mi", "FILESYSTEM_OVERHEAD": "0",
           "IMPORTER_TERMINATION_LOG": str(log)}
    env.pop("POD_IP", None)
    proc = subprocess.run([sys.executable, "-m", "importer.cloner"], env=env, timeout=60,
                          capture_output=True, text=True, check=False)
    assert proc.returncode == 2 and '"reason": "TooSmall"' in log.read_text()
    env["IMPORTER_IMAGE_SIZE"] = "not-a-size"
    proc = subprocess.run([sys.executable, "-m", "importer.cloner"], env=env, timeout=60,
                          capture_output=True, text=True, check=False)
    assert proc.returncode == 2 and "IMPORTER_IMAGE_SIZE" in log.read_text()
    env["IMPORTER_IMAGE_SIZE"] = "16Mi"
    proc = subprocess.run([sys.executable, "-m", "importer.cloner"], env=env, timeout=60,
                          capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "d.img").read_bytes()[: 8 * MiB] == src.read_bytes()
