"""Stand-ins for the processor's seams, for table tests of its phase machine. Named as
what they are: fakes of I/O (an in-memory source, a qemu-img that writes what it is
told, an NBD export that is only a name). The real parts are tested against the real
server, qemu-img and nbdkit in tests/importer."""

from __future__ import annotations

import errno
import os
import struct
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from importer.formats import HEAD_BYTES, ImageFormat
from importer.nbd import Export
from importer.qemu_img import ImageInfo
from importer.sources.base import Probe


class FakeSource:
    """An image in memory; ``ranged=False`` is a server without Range support."""

    def __init__(self, data: bytes, *, ranged: bool = True, chunk: int = 64 * 1024) -> None:
        self.data = data
        self.ranged = ranged
        self.chunk = chunk
        self.streamed = 0
        self.closed = False

    def probe(self) -> Probe:
        return Probe(size=len(self.data), ranged=self.ranged, head=self.data[:HEAD_BYTES])

    def read_range(self, start: int, length: int) -> bytes:
        return self.data[start : start + length]

    def stream(self, offset: int = 0) -> Iterator[bytes]:
        for pos in range(offset, len(self.data), self.chunk):
            piece = self.data[pos : pos + self.chunk]
            self.streamed += len(piece)
            yield piece

    def fork(self) -> FakeSource:
        return self

    def close(self) -> None:
        self.closed = True


class FakeQemuImg:
    """A qemu-img that reports ``virtual_size`` and converts by writing ``writes`` to the
    destination, then raising ``fail`` if given (after writing: a half-done disk)."""

    def __init__(self, *, virtual_size: int, writes: bytes = b"converted",
                 fail: BaseException | None = None) -> None:
        self.virtual_size = virtual_size
        self.writes = writes
        self.fail = fail
        self.calls: list[tuple[str, str, str]] = []

    def info(self, image: str, fmt: ImageFormat) -> ImageInfo:
        self.calls.append(("info", image, fmt.value))
        return ImageInfo(format=fmt.value, virtual_size=self.virtual_size, backing=None,
                         data_file=None, raw={})

    def check(self, image: str, fmt: ImageFormat) -> None:
        self.calls.append(("check", image, fmt.value))

    def convert(self, source: str, fmt: ImageFormat, dest: Path, **options: Any) -> None:
        self.calls.append(("convert", source, fmt.value))
        with dest.open("wb") as f:
            f.write(self.writes)
            f.truncate(self.virtual_size)
        if self.fail is not None:
            raise self.fail


@contextmanager
def fake_exporter(source: Any, config: Any, *, probe: Probe, workdir: Path,
                  on_fetch: Any = None) -> Iterator[Export]:
    """An "NBD export" that is only a URI: FakeQemuImg never opens it."""
    yield Export(uri=f"nbd+unix:///?socket={workdir}/fake.sock", pid=0)


def statvfs_with(free: int) -> Any:
    """An ``os.statvfs`` for a file system with ``free`` bytes available."""
    def statvfs(path: Path) -> os.statvfs_result:
        return os.statvfs_result((4096, 4096, free // 4096, free // 4096, free // 4096,
                                  1000, 1000, 1000, 0, 255))
    return statvfs


def qcow2_head(virtual_size: int) -> bytes:
    """A qcow2 v3 header (what the sniffing reads; the body is never parsed here)."""
    header = b"QFI\xfb" + struct.pack(">IQIIQI", 3, 0, 0, 16, virtual_size, 0)
    return (header + bytes(104 - len(header))).ljust(4096, b"\0")


ENOSPC = OSError(errno.ENOSPC, "No space left on device")
