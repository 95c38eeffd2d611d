"""Writing raw bytes into a volume: sparse, and never looking good when it failed.

A Filesystem volume gets a fresh file whose zero runs stay holes; a Block volume is
zeroed once up front (a discard on devices that can, such as loop devices over sparse
files) so only data is written. On failure the destination is wiped: a half-written or
unverified disk must not look like a good one.
"""

from __future__ import annotations

import ctypes
import errno
import logging
import os
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path

from importer.errors import NotADiskImage, NotFound

logger = logging.getLogger(__name__)

ZEROS = 1024 * 1024
"""Bytes of zeros written per call where zeros must be written (not holes)."""
ZERO_BLOCK_SIZE = 32 * 1024
_ZERO = bytes(ZERO_BLOCK_SIZE)
WRITE_BEHIND = 32 * 2**20
"""Bytes written between two starts of their writeback: the disk works while the stream
goes on, and the final fsync waits only for the tail (it waited for all of it: 0.9 s per
GiB on this machine, after the stream)."""
LET_GO_AFTER = 3
"""Steps of WRITE_BEHIND bytes looked back at, to let go of their written-back pages."""
DIRECT_ALIGN = 4096
"""Alignment of a write that bypasses the page cache: its offset, its length and its
buffer's address (the largest logical block size of the disks written to)."""
_FALLOC_FL_KEEP_SIZE = 0x01
_FALLOC_FL_PUNCH_HOLE = 0x02
# The process's own symbols (libc among them): find_library("c") would run
# `ldconfig -p` in a child at every importer start.
_libc = ctypes.CDLL(None, use_errno=True)
_libc.fallocate.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_longlong, ctypes.c_longlong]


def describe(mode: int) -> str:
    """What a file of this ``st_mode`` is, for an error message."""
    for test, what in ((stat.S_ISLNK, "a symbolic link"), (stat.S_ISFIFO, "a FIFO"),
                       (stat.S_ISDIR, "a directory"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISSOCK, "a socket"), (stat.S_ISBLK, "a block device"),
                       (stat.S_ISREG, "a regular file")):
        if test(mode):
            return what
    return f"a file of type {stat.S_IFMT(mode):#o}"


def open_disk(path: Path, flags: int, *, what: str, block: bool = True,
              mode: int = 0o660) -> int:
    """A descriptor on the disk at ``path``: a regular file, or a block device when
    ``block``. Never follows a symbolic link (the last component is the volume's: a
    clone copies whatever its user put there) and never waits on a FIFO (opened
    non-blocking, blocking again once it is known to be a disk). Anything else is
    ``NotADiskImage`` naming the path and what it is; a missing one is ``NotFound``.
    ``mode``: a file ``O_CREAT`` makes."""
    wanted = "a regular file or a block device" if block else "a regular file"
    try:
        fd = os.open(path, flags | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, mode)
    except FileNotFoundError:
        raise NotFound(f"{what} {path} not found") from None
    except OSError as err:
        # ELOOP (a symlink), ENXIO (a FIFO with no reader, a socket), EISDIR…
        try:
            found = os.lstat(path).st_mode
        except OSError:
            raise err from None
        if stat.S_ISREG(found) or (block and stat.S_ISBLK(found)):
            raise
        raise NotADiskImage(f"{what} {path} is {describe(found)}, not {wanted}") from None
    try:
        found = os.fstat(fd).st_mode
        if not (stat.S_ISREG(found) or (block and stat.S_ISBLK(found))):
            raise NotADiskImage(f"{what} {path} is {describe(found)}, not {wanted}")
        os.set_blocking(fd, True)
        return fd
    except BaseException:
        os.close(fd)
        raise


def refuse_foreign(path: Path, *, what: str) -> None:
    """Refuse a destination already there that no volume gives: a volume's own entry is a
    regular file, a directory (an archive's root) or a block device. A symbolic link is
    never followed (its target truncated, or wiped after a failure), a FIFO never waited
    on; the refusal touches nothing."""
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return
    if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode) or stat.S_ISBLK(mode)):
        raise NotADiskImage(f"{what} {path} is {describe(mode)}, not a regular file, a"
                            " directory or a block device")


def is_block_device(path: Path) -> bool:
    try:
        return stat.S_ISBLK(path.stat().st_mode)
    except FileNotFoundError:
        return False


def device_size(path: Path) -> int:
    fd = os.open(path, os.O_RDONLY)
    try:
        return os.lseek(fd, 0, os.SEEK_END)
    finally:
        os.close(fd)


def supports_direct_io(path: Path) -> bool:
    """Whether writes to ``path`` (a device, or a new file beside it) can bypass the page
    cache: qemu-img then writes with ``-t none``, which neither fills the pod's memory
    with dirty pages nor pays for flushing them at the end."""
    if is_block_device(path):
        probe, cleanup = path, None
    else:
        fd, name = tempfile.mkstemp(prefix=".direct-io-", dir=path.parent)
        os.close(fd)
        probe, cleanup = Path(name), Path(name)
    try:
        fd = os.open(probe, os.O_WRONLY | os.O_DIRECT)
        os.close(fd)
        return True
    except OSError:
        return False
    finally:
        if cleanup is not None:
            cleanup.unlink(missing_ok=True)


def direct_span(data: bytes | bytearray | memoryview, offset: int) -> int:
    """How many bytes from the start of ``data`` can be written at ``offset`` with
    ``O_DIRECT``: offset, length and address aligned to :data:`DIRECT_ALIGN` (0 when
    none; an unaligned tail is left for the page cache). A read-only buffer (``bytes``)
    never can: its address cannot be taken without a copy, and nothing that fills one is
    aligned anyway."""
    span = len(data) - len(data) % DIRECT_ALIGN
    if offset % DIRECT_ALIGN or not span:
        return 0
    view = memoryview(data)
    if view.readonly or not view.c_contiguous:
        return 0
    address = ctypes.addressof(ctypes.c_char.from_buffer(view))
    return span if address % DIRECT_ALIGN == 0 else 0


def punch_hole(fd: int, offset: int, length: int) -> bool:
    """Deallocate (and so zero) a range; False where the device or filesystem can't."""
    if length <= 0:
        return True
    flags = _FALLOC_FL_PUNCH_HOLE | _FALLOC_FL_KEEP_SIZE
    if _libc.fallocate(fd, flags, offset, length) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.EOPNOTSUPP, errno.ENOTTY, errno.EINVAL, errno.ENODEV):
        return False
    raise OSError(err, os.strerror(err))


def zero_device(path: Path) -> bool:
    """Zero a whole block device by discard; False where only writing zeros would do."""
    fd = os.open(path, os.O_WRONLY)
    try:
        return punch_hole(fd, 0, os.lseek(fd, 0, os.SEEK_END))
    finally:
        os.close(fd)


def _flat(data: bytes | bytearray | memoryview) -> bytes | bytearray | None:
    """``data`` as the bytes or bytearray it is or wholly views; None for anything else
    (part of one, an ``mmap``'s memory)."""
    if isinstance(data, bytes | bytearray):
        return data
    owner = data.obj
    if isinstance(owner, bytes | bytearray) and data.nbytes == len(owner) and \
            data.c_contiguous:
        return owner
    return None


def data_runs(data: bytes | bytearray | memoryview) -> Iterator[tuple[int, memoryview]]:
    """(start, bytes) of each run of ``data`` that is not whole zero blocks
    (ZERO_BLOCK_SIZE). Blocks are compared in place, never copied: a ``bytes`` or
    ``bytearray`` with ``startswith`` and bounds, any other buffer (part of one, a
    page-aligned ``mmap`` the local clone reads into) as a prefix of zeros; both are a
    memcmp (a memoryview compares item by item, ten times slower on zeros). Runs are
    handed on as memoryview slices (no copy)."""
    view = memoryview(data)
    flat = _flat(data)
    start = None  # start of the pending data run
    for pos in range(0, len(view), ZERO_BLOCK_SIZE):
        end = min(pos + ZERO_BLOCK_SIZE, len(view))
        if flat.startswith(_ZERO[: end - pos], pos, end) if flat is not None \
                else _ZERO.startswith(view[pos:end]):
            if start is not None:
                yield start, view[start:pos]
                start = None
        elif start is None:
            start = pos
    if start is not None:
        yield start, view[start:]


class SparseWriter:
    """Sequential writes at increasing offsets; zero blocks become holes.

    ``direct=True``: data whose offset, length and buffer are aligned
    (:func:`direct_span`) is written with ``O_DIRECT``, past the page cache, where the
    filesystem or device takes it; the rest (an unaligned tail, a ``bytes`` buffer) goes
    through the page cache as before. A stream written this way does not fill the pod's
    memory with dirty pages, and does not pay for copying into the page cache and for
    writing it back: on this machine that costs 0.45 s of CPU per GiB when pages come
    easily, and 1.5 to 9 s when the page cache has to find fresh memory for each write
    (O_DIRECT: 0.22 s, whatever the page cache is doing)."""

    def __init__(self, path: Path, *, preallocate: bool = False, direct: bool = False,
                 ) -> None:
        self.path = path
        self.block = is_block_device(path)
        self.preallocate = preallocate
        self.offset = 0
        self.allocated = 0
        self._written_back = 0  # writeback has been started below this offset
        if self.block:
            self._fd = os.open(path, os.O_WRONLY)
            self.capacity: int | None = os.lseek(self._fd, 0, os.SEEK_END)
            self._zeroed = punch_hole(self._fd, 0, self.capacity)
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            # the volume's content is its user's: a disk.img there that is a symbolic
            # link is not followed (its target truncated), a FIFO not waited on
            self._fd = open_disk(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC,
                                 what="the destination", block=False)
            self.capacity = None
            self._zeroed = True
        self._direct = -1
        if direct:
            try:  # a second descriptor on the same file: only aligned writes use it
                # through the first descriptor's inode, not the name again
                self._direct = os.open(f"/proc/self/fd/{self._fd}",
                                       os.O_WRONLY | os.O_DIRECT | os.O_CLOEXEC)
            except OSError as err:  # EINVAL: the filesystem does not do direct I/O
                logger.info("writing %s through the page cache: %s", path, err)

    def write(self, data: bytes | bytearray | memoryview, *, find_zeros: bool = True) -> None:
        """Write ``data`` at the current offset. ``find_zeros=False``: the caller knows it
        holds no zero block (the clone source left those out), so it is not looked
        through again; it is written whole."""
        end = self.offset + len(data)
        if self.capacity is not None and end > self.capacity:
            raise OSError(errno.ENOSPC, f"no space left on {self.path} ({self.capacity} bytes)")
        if self.preallocate or not self._zeroed or not find_zeros:
            self._pwrite_all(data, self.offset)
        else:
            self._write_sparse(data)
        self.offset = end
        if end - self._written_back >= WRITE_BEHIND:
            # DONTNEED starts the writeback of what was just written (dirty pages are not
            # dropped) and lets go of the steps before it that are written back by now
            # (a page still under writeback is passed over; it gets two more chances):
            # the page cache holds a few steps of this stream. Without the look back it
            # filled up to a pod's memory limit (572 MiB of 600M in a 1 GiB clone) and
            # the kernel reclaimed pages on every write.
            start = max(0, self._written_back - LET_GO_AFTER * WRITE_BEHIND)
            os.posix_fadvise(self._fd, start, end - start, os.POSIX_FADV_DONTNEED)
            self._written_back = end

    def skip(self, length: int) -> None:
        """Advance over ``length`` bytes of zeros (a hole in the source) without sending
        them: a fresh file or a discarded device reads zeros there already."""
        end = self.offset + length
        if self.capacity is not None and end > self.capacity:
            raise OSError(errno.ENOSPC, f"no space left on {self.path} ({self.capacity} bytes)")
        if self.preallocate or not self._zeroed:
            self._write_zeros(self.offset, end)
        self.offset = end

    def _write_sparse(self, data: bytes | bytearray | memoryview) -> None:
        for start, run in data_runs(data):
            self._pwrite_all(run, self.offset + start)

    def _pwrite_all(self, data: bytes | bytearray | memoryview, offset: int) -> None:
        view = memoryview(data)
        while view:
            span = direct_span(view, offset) if self._direct >= 0 else 0
            if span:
                try:
                    written = os.pwrite(self._direct, view[:span], offset)
                except OSError as err:
                    if err.errno != errno.EINVAL:
                        raise
                    # a disk whose blocks are larger than DIRECT_ALIGN: the page cache
                    logger.info("direct writes to %s refused (%s): through the page cache"
                                " from %d", self.path, err, offset)
                    os.close(self._direct)
                    self._direct = -1
                    continue
            else:
                written = os.pwrite(self._fd, view, offset)
            view, offset = view[written:], offset + written
            self.allocated += written

    def finish(self, size: int | None = None) -> int:
        """Set the final size (files only; never shrinks), sync, close. Returns the size."""
        final = max(self.offset, size or 0)
        if not self.block:
            os.ftruncate(self._fd, final)
            if self.preallocate:
                os.posix_fallocate(self._fd, 0, final)
        elif self.capacity is not None:
            final = self.capacity
            if not self._zeroed:
                self._write_zeros(self.offset, self.capacity)
        os.fsync(self._fd)  # the file's: its direct writes' metadata and the disk's cache too
        self._close()
        return final

    def _close(self) -> None:
        for fd in (self._fd, self._direct):
            if fd >= 0:
                os.close(fd)
        self._fd = self._direct = -1

    def _write_zeros(self, start: int, end: int) -> None:
        zeros = bytes(ZEROS)
        while start < end:
            self._pwrite_all(zeros[: min(ZEROS, end - start)], start)
            start += min(ZEROS, end - start)

    def discard(self) -> None:
        """Close and wipe after a failure."""
        self._close()
        wipe(self.path)


def wipe(path: Path) -> None:
    """Make a failed destination unmistakably empty: remove a file; zero the head of a
    device (where partition tables and filesystem signatures live)."""
    if is_block_device(path):
        fd = os.open(path, os.O_WRONLY)
        try:
            size = os.lseek(fd, 0, os.SEEK_END)
            if not punch_hole(fd, 0, size):
                os.pwrite(fd, bytes(min(size, 4 * ZEROS)), 0)
            os.fsync(fd)
        finally:
            os.close(fd)
    else:
        path.unlink(missing_ok=True)
        logger.info("removed %s", path)
