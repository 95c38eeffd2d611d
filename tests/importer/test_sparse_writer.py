"""The importer's SparseWriter: zero blocks become holes whatever buffer type the data
comes in, and the writeback of a long stream starts while it is written."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest

from importer import writers
from importer.writers import LET_GO_AFTER, WRITE_BEHIND, ZERO_BLOCK_SIZE, SparseWriter

MiB = 2**20


@pytest.mark.parametrize("kind", ["bytes", "bytearray", "whole view", "part view"])
def test_zero_blocks_become_holes_for_every_buffer_type(tmp_path: Path, kind: str) -> None:
    block = ZERO_BLOCK_SIZE
    data = bytes(4 * block) + os.urandom(block) + bytes(3 * block) + b"x" * 100
    backing = bytearray(b"\xff" * 7 + data + b"\xff" * 5)
    chunks: dict[str, bytes | bytearray | memoryview] = {
        "bytes": data, "bytearray": bytearray(data),
        "whole view": memoryview(bytearray(data)),
        "part view": memoryview(backing)[7:7 + len(data)]}
    chunk = chunks[kind]
    path = tmp_path / "disk.img"
    writer = SparseWriter(path)
    writer.write(chunk)
    writer.finish()
    assert path.read_bytes() == data
    assert writer.allocated == block + 100  # only the data blocks were written
    assert os.lseek(os.open(path, os.O_RDONLY), 0, os.SEEK_DATA) == 4 * block


def test_data_known_to_hold_no_zero_block_is_written_whole(tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch,
                                                          ) -> None:
    """find_zeros=False (the clone target: its source already left zero blocks out):
    one pwrite per buffer, nothing looked through."""
    writes: list[int] = []
    real = os.pwrite

    def record(fd: int, data: bytes | memoryview, offset: int) -> int:
        writes.append(len(data))
        return real(fd, data, offset)

    monkeypatch.setattr(os, "pwrite", record)
    data = os.urandom(ZERO_BLOCK_SIZE) + bytes(2 * ZERO_BLOCK_SIZE) + b"x"
    writer = SparseWriter(tmp_path / "disk.img")
    writer.write(data, find_zeros=False)
    writer.finish()
    assert writes == [len(data)]
    assert (tmp_path / "disk.img").read_bytes() == data


def test_writeback_starts_behind_the_stream(tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple[int, int, int]] = []
    real = os.posix_fadvise

    def record(fd: int, offset: int, length: int, advice: int) -> None:
        calls.append((offset, length, advice))
        real(fd, offset, length, advice)

    monkeypatch.setattr(os, "posix_fadvise", record)
    writer = SparseWriter(tmp_path / "disk.img")
    piece = os.urandom(MiB)
    total = 6 * WRITE_BEHIND + 5 * MiB
    for _ in range(total // MiB):
        writer.write(piece)
    writer.finish()
    # each step starts the writeback of what was just written and lets go of the
    # LET_GO_AFTER steps before it (written back by then), so the page cache does not
    # fill with the stream
    step = WRITE_BEHIND
    assert LET_GO_AFTER == 3
    assert calls == [(max(0, (n - 1 - LET_GO_AFTER) * step),
                      (n - max(0, n - 1 - LET_GO_AFTER)) * step, os.POSIX_FADV_DONTNEED)
                     for n in range(1, 7)]
    assert calls[-1] == (2 * step, 4 * step, os.POSIX_FADV_DONTNEED)


def _resident(path: Path) -> int:
    """Bytes of ``path`` in the page cache, as util-linux's fincore counts them."""
    out = subprocess.run(["fincore", "--bytes", "--noheadings", "--output", "RES",
                          str(path)], check=True, capture_output=True, text=True).stdout
    return int(out.strip())


def test_the_page_cache_does_not_fill_with_a_long_stream(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A stream slower than the disk (as a network one is): the pages of the steps
    written back are let go of, so a pod's page cache stays small. Letting go only of
    the step just written (dirty, so nothing was dropped) kept all 96 MiB."""
    if subprocess.run(["stat", "-f", "-c", "%T", str(tmp_path)], capture_output=True,
                      text=True).stdout.strip() == "tmpfs":
        pytest.skip("tmpfs pages cannot be let go of")
    step = 4 * MiB
    monkeypatch.setattr(writers, "WRITE_BEHIND", step)
    path = tmp_path / "disk.img"
    writer = SparseWriter(path)
    piece = os.urandom(step)
    for _ in range(24):
        writer.write(piece)
        time.sleep(0.05)
    resident = _resident(path)
    writer.finish()
    assert resident <= (LET_GO_AFTER + 3) * step, f"{resident >> 20} MiB cached"
