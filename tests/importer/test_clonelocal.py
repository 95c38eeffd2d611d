"""The host-assisted clone's local copy (``python -m importer.clonetarget`` with
``CLONER_SOURCE``: the source claim mounted in the target pod too), on real files, real
loop devices and the real program: the copy is exact and as sparse as the source, zero
blocks are not written, the room is checked as on a stream's hello before a byte is
written, a source that is not a disk is refused at once, a failed copy leaves nothing,
and the exit codes and termination messages are the stream's."""

from __future__ import annotations

import contextlib
import hashlib
import json
import mmap
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from importer import clonelocal, cloner, clonetarget, clonewire
from importer.errors import ConfigError, ImporterError, NotADiskImage, TooSmall
from importer.progress import Update
from importer.writers import data_runs
from tests.importer.loopdev import loop_device
from tests.importer.pagecache import direct_io_or_skip, resident
from tests.importer.test_cloner import KINDS, make_source, refused_at_once, scraped, special

MiB = 2**20


def config(dst: Path, src: Path, requested: int | None, **kw: Any) -> clonetarget.Config:
    return clonetarget.Config(target=dst, requested=requested, overhead="0",
                              tls_dir=Path(""), source=src, **kw)


def sha256(path: Path, size: int) -> str:
    """The digest of the first ``size`` bytes of a file or device."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        left = size
        while left:
            chunk = f.read(min(left, 4 * MiB))
            assert chunk, f"{path} ended {left} bytes short"
            h.update(chunk)
            left -= len(chunk)
    return h.hexdigest()


def allocated(path: Path) -> int:
    return os.stat(path).st_blocks * 512


def data_of(path: Path, size: int) -> list[tuple[int, int]]:
    fd = os.open(path, os.O_RDONLY)
    try:
        return [(o, n) for o, n, d in cloner.extents(fd, size, seekable_holes=True) if d]
    finally:
        os.close(fd)


def test_the_copy_is_exact_and_as_sparse_as_the_source(tmp_path: Path) -> None:
    """Data at odd places (not block-aligned, at the very end of a size that is not a
    multiple of 4096): the bytes are the source's, the holes stay holes, and the
    Filesystem disk.img is grown to its room, with progress to 100 %."""
    size = 64 * MiB + 1234
    src = tmp_path / "src.img"
    content = make_source(src, size, [(17, 100), (3 * MiB + 4095, MiB + 3),
                                      (40 * MiB + 17, 5000), (size - 700, 700)])
    dst = tmp_path / "disk.img"
    seen: list[Update] = []
    written = clonetarget.copy_local(config(dst, src, 80 * MiB), listeners=[seen.append])
    assert dst.stat().st_size == 80 * MiB  # grown to the usable size of its request
    assert sha256(dst, size) == hashlib.sha256(content).hexdigest()
    assert sha256(dst, 80 * MiB) == hashlib.sha256(content + bytes(80 * MiB - size)).hexdigest()
    # as sparse as the source: its data blocks (the file system's extent tree aside)
    assert allocated(dst) <= allocated(src) + 64 * 1024
    assert data_of(dst, size) == data_of(src, size)
    assert written <= allocated(src)
    assert seen[-1].percent == 100.0 and any(0 < u.percent < 100 for u in seen)


def test_zero_blocks_inside_the_data_are_not_written(tmp_path: Path) -> None:
    """A source whose allocated blocks are mostly zeros (written out): the target holds
    only the blocks with data."""
    src = tmp_path / "src.img"
    with open(src, "wb") as f:
        f.write(bytes(8 * MiB) + os.urandom(MiB) + bytes(4 * MiB) + b"x" + bytes(MiB))
        f.flush()
        os.fsync(f.fileno())
    size = src.stat().st_size
    assert allocated(src) >= size - 64 * 1024  # the zeros are allocated blocks
    dst = tmp_path / "disk.img"
    clonetarget.copy_local(config(dst, src, 16 * MiB))
    assert sha256(dst, size) == sha256(src, size)
    assert allocated(dst) <= MiB + 2 * 32 * 1024 + 64 * 1024


def test_too_small_is_refused_before_a_byte_is_written(tmp_path: Path) -> None:
    """A source with data beyond the room: TooSmall, the reason and message the stream's
    target gives, and the disk.img an earlier run left is untouched (not truncated)."""
    src = tmp_path / "src.img"
    make_source(src, 64 * MiB, [(50 * MiB, MiB)])
    dst = tmp_path / "disk.img"
    before = make_source(dst, MiB, [(0, MiB)])
    with pytest.raises(TooSmall) as refused:
        clonetarget.copy_local(config(dst, src, 32 * MiB))
    assert not refused.value.retryable
    with pytest.raises(TooSmall) as streamed:  # what the stream target decides on a hello
        clonetarget.admit(config(dst, src, 32 * MiB), clonewire.Hello(
            size=64 * MiB, data_end=51 * MiB))
    assert refused.value.message == streamed.value.message
    assert dst.read_bytes() == before


def test_only_holes_beyond_the_room_fit(tmp_path: Path) -> None:
    """A permissive clone: a source larger than the room whose data ends within it."""
    src = tmp_path / "src.img"
    content = make_source(src, 64 * MiB, [(MiB, 2 * MiB), (31 * MiB, MiB)])
    dst = tmp_path / "disk.img"
    clonetarget.copy_local(config(dst, src, 32 * MiB))
    assert dst.stat().st_size == 32 * MiB
    assert dst.read_bytes() == content[: 32 * MiB]


@pytest.mark.parametrize("kind", list(KINDS))
def test_a_source_that_is_not_a_disk_is_refused_at_once(tmp_path: Path, kind: str) -> None:
    """The source claim's disk.img is whatever its user put there: a symlink is not
    followed (to a file of this pod's), a FIFO not waited on; nothing is written."""
    outside = tmp_path / "outside"
    make_source(outside, MiB, [(0, MiB)])
    src = tmp_path / "source-disk.img"
    special(src, kind, outside)
    dst = tmp_path / "disk.img"
    errors, took = refused_at_once(
        lambda: clonetarget.copy_local(config(dst, src, 8 * MiB)), src, kind)
    assert len(errors) == 1 and isinstance(errors[0], NotADiskImage), errors
    assert errors[0].message == (f"clone source {src} is {KINDS[kind]}, not a regular file"
                                 " or a block device")
    assert took < 2
    assert not dst.exists()


def test_the_source_itself_is_no_target(tmp_path: Path) -> None:
    """A target that is the source under another name (a hard link; the same device
    under two names below) would be truncated or discarded before it is read."""
    src = tmp_path / "src.img"
    before = make_source(src, 8 * MiB, [(MiB, MiB)])
    os.link(src, tmp_path / "disk.img")
    with pytest.raises(ConfigError, match=f"CLONER_SOURCE {src} and CLONER_TARGET "
                       f"{tmp_path / 'disk.img'} are the same file"):
        clonetarget.copy_local(config(tmp_path / "disk.img", src, 16 * MiB))
    assert src.read_bytes() == before


def test_a_copy_that_fails_midway_leaves_nothing(tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """The source cut short under the copy (its data runs were found, then it shrank):
    the error says where, and the partly written disk.img is removed."""
    src = tmp_path / "src.img"
    make_source(src, 32 * MiB, [(0, 32 * MiB)])
    real = cloner.open_source

    def shrinking(path: Path) -> cloner.Source:
        source = real(path)
        os.truncate(path, 20 * MiB)
        return source

    monkeypatch.setattr(clonetarget, "open_source", shrinking)
    dst = tmp_path / "disk.img"
    with pytest.raises(ImporterError, match=f"the source ended at {20 * MiB} of "):
        clonetarget.copy_local(config(dst, src, 32 * MiB))
    assert not dst.exists()


def test_the_copy_goes_past_the_page_cache_in_reused_buffers(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Written with O_DIRECT from page-aligned buffers: none of the target's pages is in
    the page cache afterwards. A handful of buffers serve the whole copy, and chunks
    split into many extents by zero blocks (each buffer lent to several writes) keep
    every byte where it belongs."""
    direct_io_or_skip(tmp_path)
    made: list[mmap.mmap] = []
    real = clonelocal.Pool.take

    def take(self: clonelocal.Pool, n: int) -> memoryview:
        view = real(self, n)
        if not any(view.obj is m for m in made):
            assert isinstance(view.obj, mmap.mmap)
            made.append(view.obj)
        return view

    monkeypatch.setattr(clonelocal.Pool, "take", take)
    monkeypatch.setattr(clonelocal, "CHUNK", 256 * 1024)  # 96 reads, 4 extents each
    src = tmp_path / "src.img"
    block = 32 * 1024
    with open(src, "wb") as f:  # 24 MiB: in each 64 KiB one zero block, one of data
        for _ in range(24 * MiB // (2 * block)):
            f.write(bytes(block) + os.urandom(block))
    size = src.stat().st_size
    dst = tmp_path / "disk.img"
    clonetarget.copy_local(config(dst, src, size))
    assert resident(dst) == 0
    assert sha256(dst, size) == sha256(src, size)
    assert len(made) <= clonelocal.Pool.KEEP + 1


def test_the_progress_metric(tmp_path: Path) -> None:
    from importer.metrics import ProgressMetric

    src = tmp_path / "src.img"
    make_source(src, 16 * MiB, [(0, 4 * MiB), (12 * MiB, MiB)])
    metric = ProgressMetric(owner_uid="target-uid", port=0, addr="127.0.0.1",
                            name=clonetarget.METRIC)
    try:
        clonetarget.copy_local(config(tmp_path / "disk.img", src, 16 * MiB),
                               listeners=[metric])
        text = scraped(metric)
    finally:
        metric.close()
    assert 'kubevirt_cdi_clone_progress_total{ownerUID="target-uid"} 100.0' in text


def test_data_runs_of_an_mmap_buffer() -> None:
    """The local copy's buffers (part of an mmap) are scanned in place, as bytes are."""
    block = 32 * 1024
    buf = mmap.mmap(-1, 8 * block)
    buf[block:2 * block] = b"a" * block
    buf[4 * block:4 * block + 10] = b"b" * 10
    view = memoryview(buf)[: 4 * block + 10]
    runs = [(o, bytes(d)) for o, d in data_runs(view)]
    assert runs == [(block, b"a" * block), (4 * block, b"b" * 10)]
    assert all(d.obj is buf for _, d in data_runs(view))


# -- Block sources and targets (loop devices) ----------------------------------------------


SOURCE_RUNS = [(MiB, 2 * MiB), (9 * MiB + 4096, 100 * 1024), (15 * MiB, MiB)]


@pytest.mark.parametrize("modes", ["Block-Filesystem", "Filesystem-Block", "Block-Block"])
def test_block_sources_and_targets(tmp_path: Path, modes: str) -> None:
    """A device source is read whole, its zero blocks left out; a device target gets
    only the data (it is discarded first, garbage on it does not survive as zeros)."""
    src_mode, dst_mode = modes.split("-")
    size = 16 * MiB
    src_file = tmp_path / "src.img"
    content = make_source(src_file, size, SOURCE_RUNS)
    data = sum(n for _, n in SOURCE_RUNS)
    dst_file = tmp_path / ("target-backing.img" if dst_mode == "Block" else "disk.img")
    if dst_mode == "Block":
        dst_file.write_bytes(b"\xee" * (24 * MiB))
    with contextlib.ExitStack() as stack:
        src = stack.enter_context(loop_device(src_file)) if src_mode == "Block" else src_file
        dst = stack.enter_context(loop_device(dst_file)) if dst_mode == "Block" else dst_file
        written = clonetarget.copy_local(config(dst, src, None if dst_mode == "Block"
                                                else 20 * MiB))
        assert written <= data + 2 * 32 * 1024
        assert sha256(dst, size) == hashlib.sha256(content).hexdigest()
        end = 24 * MiB if dst_mode == "Block" else 20 * MiB
        assert sha256(dst, end) == hashlib.sha256(content + bytes(end - size)).hexdigest()
    # only the data was written (the loop device passes the discard on as holes)
    assert allocated(dst_file) <= data + 4 * 32 * 1024 + 64 * 1024


def test_a_device_is_not_copied_onto_itself(tmp_path: Path) -> None:
    backing = tmp_path / "backing.img"
    before = make_source(backing, 8 * MiB, [(MiB, MiB)])
    with loop_device(backing) as dev:
        other = tmp_path / "same-device"
        st = os.stat(dev)
        os.mknod(other, st.st_mode, st.st_rdev)
        with pytest.raises(ConfigError, match="are the same device"):
            clonetarget.copy_local(config(other, dev, None))
    assert backing.read_bytes() == before


def test_a_block_target_too_small_is_untouched(tmp_path: Path) -> None:
    """The device is discarded when the writer opens it: the room is checked first."""
    src = tmp_path / "src.img"
    make_source(src, 16 * MiB, [(12 * MiB, MiB)])
    backing = tmp_path / "target-backing.img"
    backing.write_bytes(b"\xee" * (8 * MiB))
    with loop_device(backing) as dst, pytest.raises(TooSmall):
        clonetarget.copy_local(config(dst, src, None))
    assert backing.read_bytes() == b"\xee" * (8 * MiB)


# -- the program -----------------------------------------------------------------------


def test_the_environment() -> None:
    cfg = clonetarget.from_env({"CLONER_TARGET": "/data/disk.img",
                                "CLONER_SOURCE": "/source/disk.img"})
    assert cfg.source == Path("/source/disk.img") and not cfg.grow_only
    assert clonetarget.from_env({"CLONER_TARGET": "/d", "CLONE_TLS_DIR": "/t"}).source is None
    with pytest.raises(ConfigError, match="CLONE_TLS_DIR is required"):
        clonetarget.from_env({"CLONER_TARGET": "/data/disk.img"})
    with pytest.raises(ConfigError) as both:
        clonetarget.from_env({"CLONER_TARGET": "/data/disk.img", "CLONE_GROW_ONLY": "true",
                              "CLONER_SOURCE": "/source/disk.img"})
    assert "CLONE_GROW_ONLY" in both.value.message and "CLONER_SOURCE" in both.value.message


def run_target(env: dict[str, str], *, timeout: float = 60) -> int:
    base = {k: v for k, v in os.environ.items()
            if k not in ("POD_IP", "CLONE_TLS_DIR", "CLONE_PORT")}
    done = subprocess.run([sys.executable, "-m", "importer.clonetarget"],
                          env={**base, **env}, capture_output=True, timeout=timeout)
    return done.returncode


def test_the_program_copies_locally_and_reports_failures(tmp_path: Path) -> None:
    src = tmp_path / "src.img"
    content = make_source(src, 8 * MiB, [(6 * MiB, MiB)])
    log = tmp_path / "termination.log"
    dst = tmp_path / "disk.img"
    env = {"CLONER_SOURCE": str(src), "CLONER_TARGET": str(dst), "IMPORTER_IMAGE_SIZE": "4Mi",
           "FILESYSTEM_OVERHEAD": "0", "IMPORTER_TERMINATION_LOG": str(log)}

    def message() -> dict[str, Any]:
        body: dict[str, Any] = json.loads(log.read_text())
        return body

    # too small: for good, the reason, nothing written
    assert run_target(env) == 2
    assert message()["reason"] == "TooSmall" and not message()["retryable"]
    assert not dst.exists()
    # a FIFO for a source: refused at once, naming it
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    assert run_target({**env, "CLONER_SOURCE": str(fifo)}, timeout=30) == 2
    assert message()["reason"] == "NotADiskImage" and str(fifo) in message()["message"]
    # both modes at once: a configuration error naming both
    assert run_target({**env, "CLONE_GROW_ONLY": "true"}) == 2
    assert "CLONE_GROW_ONLY" in message()["message"] and "CLONER_SOURCE" in message()["message"]
    log.unlink()
    # and a good one
    assert run_target({**env, "IMPORTER_IMAGE_SIZE": "16Mi"}) == 0
    assert dst.stat().st_size == 16 * MiB
    assert dst.read_bytes()[: 8 * MiB] == content
    assert allocated(dst) <= allocated(src) + 64 * 1024
    assert not log.exists()
