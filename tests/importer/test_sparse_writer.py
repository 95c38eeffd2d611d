"""The importer's SparseWriter: zero blocks become holes whatever buffer type the data
comes in, and the writeback of a long stream starts while it is written."""

from __future__ import annotations

import errno
import mmap
import os
import time
from pathlib import Path

import pytest

from importer import writers
from importer.writers import LET_GO_AFTER, WRITE_BEHIND, ZERO_BLOCK_SIZE, SparseWriter
from tests.importer.pagecache import direct_io_or_skip, filesystem, resident

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


def test_the_page_cache_does_not_fill_with_a_long_stream(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A stream slower than the disk (as a network one is): the pages of the steps
    written back are let go of, so a pod's page cache stays small. Letting go only of
    the step just written (dirty, so nothing was dropped) kept all 96 MiB."""
    if filesystem(tmp_path) == "tmpfs":
        pytest.skip("tmpfs pages cannot be let go of")
    step = 4 * MiB
    monkeypatch.setattr(writers, "WRITE_BEHIND", step)
    path = tmp_path / "disk.img"
    writer = SparseWriter(path)
    piece = os.urandom(step)
    for _ in range(24):
        writer.write(piece)
        time.sleep(0.05)
    cached = resident(path)
    writer.finish()
    assert cached <= (LET_GO_AFTER + 3) * step, f"{cached >> 20} MiB cached"


def _aligned(data: bytes) -> memoryview:
    """``data`` in page-aligned memory (an anonymous map), as the clone target keeps it."""
    buf = mmap.mmap(-1, len(data))
    buf.write(data)
    return memoryview(buf)


@pytest.mark.parametrize("direct", [True, False])
def test_direct_writes_go_past_the_page_cache(tmp_path: Path, direct: bool) -> None:
    """direct=True: aligned data reaches the file without a page of it in the page cache
    (util-linux's fincore counts them); the same writes without it leave every page
    cached. A hole between the pieces stays a hole."""
    direct_io_or_skip(tmp_path)
    path = tmp_path / "disk.img"
    pieces = [os.urandom(2 * MiB), os.urandom(MiB)]
    writer = SparseWriter(path, direct=direct)
    writer.write(_aligned(pieces[0]), find_zeros=False)
    writer.skip(3 * MiB)
    writer.write(_aligned(pieces[1]), find_zeros=False)
    cached = resident(path)
    assert writer.finish(8 * MiB) == 8 * MiB
    assert cached == (0 if direct else 3 * MiB)
    assert path.read_bytes() == pieces[0] + bytes(3 * MiB) + pieces[1] + bytes(2 * MiB)
    assert path.stat().st_blocks * 512 == 3 * MiB


def test_unaligned_data_goes_through_the_page_cache_whole(tmp_path: Path) -> None:
    """What O_DIRECT cannot take is still written, byte for byte, through the page
    cache: ``bytes`` (no address to check), an offset off the 4 KiB grid, and the
    unaligned tail of an aligned buffer, whose aligned head goes direct: of the file's
    eight pages, only the tail's three whole ones are not cached."""
    direct_io_or_skip(tmp_path)
    path = tmp_path / "disk.img"
    head = os.urandom(writers.DIRECT_ALIGN + 100)  # bytes
    off_grid = os.urandom(2 * writers.DIRECT_ALIGN)  # aligned memory, unaligned offset
    writer = SparseWriter(path, direct=True)
    writer.write(head, find_zeros=False)
    writer.write(_aligned(off_grid), find_zeros=False)
    writer.skip(writers.DIRECT_ALIGN - 100)  # back on the grid
    tail = os.urandom(3 * writers.DIRECT_ALIGN + 5)
    writer.write(_aligned(tail), find_zeros=False)
    cached = resident(path)
    writer.finish()
    assert writers.DIRECT_ALIGN == 4096 and os.sysconf("SC_PAGE_SIZE") == 4096
    assert cached == 5 * 4096  # pages 0-3 and 7; the tail's head (pages 4-6) went direct
    assert path.read_bytes() == head + off_grid + bytes(writers.DIRECT_ALIGN - 100) + tail


def test_a_disk_that_refuses_direct_writes_gets_them_through_the_page_cache(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A disk whose blocks are larger than DIRECT_ALIGN answers EINVAL to an aligned
    write. That disk is a mock here (os.pwrite refuses on the direct descriptor): the
    write is made again through the page cache and the rest of the stream follows it."""
    direct_io_or_skip(tmp_path, past_the_cache=False)
    real = os.pwrite
    refused: list[int] = []
    path = tmp_path / "disk.img"
    writer = SparseWriter(path, direct=True)

    def pwrite(fd: int, data: memoryview, offset: int) -> int:
        if fd == writer._direct:
            refused.append(offset)
            raise OSError(errno.EINVAL, os.strerror(errno.EINVAL))
        return real(fd, data, offset)

    monkeypatch.setattr(os, "pwrite", pwrite)
    pieces = [os.urandom(MiB), os.urandom(MiB)]
    for piece in pieces:
        writer.write(_aligned(piece), find_zeros=False)
    writer.finish()
    assert refused == [0]
    assert path.read_bytes() == b"".join(pieces)



def test_a_symbolic_link_is_not_followed_nor_its_target_truncated(tmp_path: Path) -> None:
    """The processor refuses such a destination first; the writer's own open refuses it
    too (a link swapped in after that check): no O_TRUNC through it."""
    from importer.errors import NotADiskImage

    victim = tmp_path / "victim"
    victim.write_bytes(b"keep me\n")
    dest = tmp_path / "disk.img"
    dest.symlink_to(victim)
    with pytest.raises(NotADiskImage, match="is a symbolic link"):
        SparseWriter(dest, direct=True)
    assert victim.read_bytes() == b"keep me\n"
    assert dest.is_symlink()
