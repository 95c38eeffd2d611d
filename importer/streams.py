"""Chunk iterators between a source and a writer: resume, hash, decompress, bound.

Everything here is a generator over ``bytes`` chunks (or a file object over one), so a
whole import holds one chunk at a time whatever the image's size.
"""

from __future__ import annotations

import gzip
import io
import lzma
import zlib
from collections.abc import Callable, Iterable, Iterator
from typing import Any, BinaryIO, cast

import zstandard

from importer.config import ImporterConfig
from importer.errors import InvalidImage, SourceChanged, TransferError
from importer.formats import Compression
from importer.sources.base import CHUNK, Source, call_with_retries


def resumable(source: Source, config: ImporterConfig, *, size: int | None,
              head: bytes = b"") -> Iterator[bytes]:
    """The source's bytes in order; a dropped connection resumes at the last good offset
    (the source re-reads from there with Range, or skips ahead where it can't).

    ``head`` is what the probe read first: the stream must start with the same bytes (the
    route and the checks were decided on them), else ``SourceChanged``, whether or not
    the server sends validators."""
    offset = 0
    chunks: Iterator[bytes] | None = None

    def next_chunk() -> bytes:
        nonlocal chunks
        if chunks is None:
            chunks = source.stream(offset)
        try:
            return next(chunks, b"")
        except TransferError:
            chunks = None
            raise

    while True:
        chunk = call_with_retries(config, f"read at offset {offset}", next_chunk)
        if not chunk:
            if size is not None and offset < size:
                chunks = None
                raise TransferError(f"source ended at {offset} of {size} bytes")
            return
        if size is not None and offset + len(chunk) > size:
            raise SourceChanged(f"the source sent more than the {size} bytes it declared")
        if offset < len(head) and chunk[:len(head) - offset] != head[offset:offset + len(chunk)]:
            raise SourceChanged("the source changed during the import: its first"
                                f" {len(head)} bytes are not those it sent when probed")
        offset += len(chunk)
        yield chunk


def observed(chunks: Iterable[bytes], callback: Callable[[bytes], Any]) -> Iterator[bytes]:
    """Pass chunks through, showing each to ``callback`` (a hasher's update, a counter)."""
    for chunk in chunks:
        callback(chunk)
        yield chunk


def bounded(chunks: Iterable[bytes], *, limit: int, what: str) -> Iterator[bytes]:
    """Stop a stream that yields more than ``limit`` bytes (a decompression bomb, or an
    image larger than declared) before it fills the volume."""
    total = 0
    for chunk in chunks:
        total += len(chunk)
        if total > limit:
            raise InvalidImage(f"{what} exceeds {limit} bytes, the most the volume can hold")
        yield chunk


class IterReader(io.RawIOBase):
    """A read-only file object over a chunk iterator (for gzip, lzma, zstd and tarfile)."""

    def __init__(self, chunks: Iterable[bytes]) -> None:
        self._chunks = iter(chunks)
        self._buffer = memoryview(b"")

    def readable(self) -> bool:
        return True

    def readinto(self, target: Any) -> int:
        if not self._buffer:
            self._buffer = memoryview(next(self._chunks, b""))
        count = min(len(target), len(self._buffer))
        target[:count] = self._buffer[:count]
        self._buffer = self._buffer[count:]
        return count


def _open_decompressor(compression: Compression, raw: BinaryIO) -> BinaryIO:
    if compression is Compression.GZIP:
        return cast(BinaryIO, gzip.GzipFile(fileobj=raw, mode="rb"))
    if compression is Compression.XZ:
        return cast(BinaryIO, lzma.LZMAFile(raw, mode="rb"))
    reader: BinaryIO = zstandard.ZstdDecompressor().stream_reader(raw, read_across_frames=True)
    return reader


def decompressed(chunks: Iterable[bytes], compression: Compression) -> Iterator[bytes]:
    """The decompressed bytes of a gz/xz/zst stream (multi-member/-frame included), in
    chunks of at most ``CHUNK``: output is bounded per read, never per input chunk."""
    raw = io.BufferedReader(IterReader(chunks), buffer_size=CHUNK)
    with _open_decompressor(compression, raw) as stream:
        while True:
            try:
                chunk = stream.read(CHUNK)
            except (OSError, EOFError, lzma.LZMAError, zlib.error, zstandard.ZstdError) as err:
                raise InvalidImage(f"corrupt {compression} data: {err}", cause=err) from err
            if not chunk:
                return
            yield chunk


def peek(chunks: Iterator[bytes], size: int) -> tuple[bytes, Iterator[bytes]]:
    """The first ``size`` bytes (fewer at the end), and an iterator over all the bytes."""
    head = bytearray()
    taken: list[bytes] = []
    for chunk in chunks:
        taken.append(chunk)
        head += chunk
        if len(head) >= size:
            break

    def rest() -> Iterator[bytes]:
        yield from taken
        yield from chunks

    return bytes(head[:size]), rest()
