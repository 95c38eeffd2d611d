"""The host-assisted clone's source side (``python -m importer.cloner``, upstream's
cdi-cloner): read the source volume and stream its data to the target pod over mutual
TLS (:mod:`importer.clonewire`).

The pod mounts the source claim read-only, as a Filesystem (``disk.img``) or as a device;
either must be a regular file or a block device, opened without following a symbolic link
or waiting on a FIFO (:func:`open_disk`: ``NotADiskImage`` otherwise, naming the path).
Only data is read and sent: on a file the holes are found with ``SEEK_DATA``/``SEEK_HOLE``
and skipped; on a device (and inside a file's data) zero blocks are found as they are read
and not sent. The target checks that the source fits before a byte is written, and
answers only once the data is on its disk; only then does this program exit 0.

Environment (set by the clone populator): ``CLONER_SOURCE`` (path), ``CLONE_TARGET``
(``host:port`` of the target pod), ``CLONE_TLS_DIR`` (``ca.crt``, ``tls.crt``, ``tls.key``
from the clone's Secret: the per-clone CA and this side's client certificate),
``CLONE_SERVER_NAME`` (the name in the target's certificate), ``CLONE_CONNECT_SECONDS``
(how long to keep trying to reach the target and to complete a handshake with it,
default :data:`CONNECT_SECONDS`, at most a day: one cut off or not done in
:data:`HANDSHAKE_SECONDS` is tried again; a refused one is not). Exit
codes and the termination message as the importer's.
"""

from __future__ import annotations

import logging
import os
import socket
import ssl
import stat
import sys
import time
from collections.abc import Callable, Generator, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import tenacity

from importer import clonewire
from importer.ahead import ahead
from importer.errors import ConfigError, ImporterError, TransferError
from importer.termination import EXIT_OK, failed
from importer.tlsstream import TlsStream
from importer.writers import data_runs, open_disk
from vocab import podenv

logger = logging.getLogger(__name__)

CHUNK = 1024 * 1024
"""Read size: small enough that a chunk is still in the CPU's cache when it is scanned for
zero blocks, compressed and encrypted (4 MiB measured slower)."""
AHEAD = 2
"""Framed extents read ahead of the one being sent (at most ~AHEAD x CHUNK of memory)."""
TERMINATION_LOG = Path(podenv.TERMINATION_LOG_PATH)
SERVER_NAME = "clone-target"
STALL_SECONDS = 120.0
"""A send or reply that makes no progress for this long breaks the stream."""
CONNECT_FIRST_WAIT = 0.02
"""Seconds before the second try to reach the target (then doubling, up to
:data:`CONNECT_MAX_WAIT`)."""
CONNECT_MAX_WAIT = 2.0
CONNECT_TRY_SECONDS = 10.0
"""One try's wait for the target's answer (a SYN to an address that drops it): a try
that gets none is made again, within the window."""
CONNECT_SECONDS = 300.0
"""How long the source tries to reach the target by default (the source pod is made once
the target pod runs)."""
MAX_CONNECT_SECONDS = 86400.0
HANDSHAKE_SECONDS = 30.0
"""The whole TLS handshake with the target, however it paces its bytes (this clone's
target answers in milliseconds)."""
HANDSHAKE_RETRY_WAIT = 1.0
"""Seconds before a handshake that broke off is tried again."""


class TLSRefused(ImporterError):
    """The TLS handshake failed: a certificate that is not this clone's (permanent)."""

    reason = "TLSRefused"


@dataclass(frozen=True)
class Config:
    source: Path
    target: tuple[str, int]
    tls_dir: Path
    server_name: str = SERVER_NAME
    connect_seconds: float = CONNECT_SECONDS


def from_env(env: Mapping[str, str]) -> Config:
    try:
        source, target, tls = (env[podenv.CLONER_SOURCE], env[podenv.CLONE_TARGET],
                               env[podenv.CLONE_TLS_DIR])
    except KeyError as err:
        raise ConfigError(f"{err.args[0]} is required") from None
    host, _, port = target.rpartition(":")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ConfigError(f"CLONE_TARGET {target!r}: expected host:port")
    try:
        seconds = float(env.get("CLONE_CONNECT_SECONDS") or CONNECT_SECONDS)
    except ValueError:
        raise ConfigError("CLONE_CONNECT_SECONDS: not a number") from None
    if not 0 < seconds <= MAX_CONNECT_SECONDS:  # also NaN
        raise ConfigError(f"CLONE_CONNECT_SECONDS: {seconds} is not within (0, "
                          f"{MAX_CONNECT_SECONDS:.0f}]")
    return Config(source=Path(source), target=(host.strip("[]"), int(port)),
                  tls_dir=Path(tls), server_name=env.get(podenv.CLONE_SERVER_NAME) or SERVER_NAME,
                  connect_seconds=seconds)


# -- reading the source ------------------------------------------------------------------


def extents(fd: int, size: int, *, seekable_holes: bool) -> Iterator[tuple[int, int, bool]]:
    """(offset, length, data?) runs covering ``[0, size)``."""
    if not seekable_holes:
        yield 0, size, True
        return
    pos = 0
    while pos < size:
        try:
            start = os.lseek(fd, pos, os.SEEK_DATA)
        except OSError:  # ENXIO: only a hole from here to the end
            start = size
        start = min(start, size)
        if start > pos:
            yield pos, start - pos, False
        if start >= size:
            return
        end = min(os.lseek(fd, start, os.SEEK_HOLE), size)
        yield start, end - start, True
        pos = end


def chunks(fd: int, runs: list[tuple[int, int, bool]], *, size: int = CHUNK,
           into: Callable[[int], memoryview] | None = None,
           ) -> Iterator[tuple[int, memoryview]]:
    """(offset, bytes read) of the source's data runs, ``size`` bytes at a time; each
    read into a fresh ``bytes``, or into the buffer ``into(n)`` gives (at least ``n``
    bytes: the local clone's page-aligned ones, reused)."""
    for offset, length, data in runs:
        if not data:
            continue
        end = offset + length
        while offset < end:
            want = min(size, end - offset)
            if into is None:
                chunk = memoryview(os.pread(fd, want, offset))
            else:
                buf = into(want)[:want]
                chunk = buf[:os.preadv(fd, [buf], offset)]
            if not chunk:
                raise ImporterError(f"the source ended at {offset} of {end} bytes")
            yield offset, chunk
            offset += len(chunk)


def pieces(fd: int, runs: list[tuple[int, int, bool]]) -> Iterator[tuple[int, memoryview]]:
    """(offset, bytes) of the source's data, zero blocks left out."""
    for offset, chunk in chunks(fd, runs):
        for start, run in data_runs(chunk):
            yield offset + start, run


def frames(source: Source, encoder: clonewire.Encoder,
           ) -> Generator[tuple[bytes, clonewire.Data], None, None]:
    """Each extent framed (compressed where it pays), ready to send."""
    for offset, data in pieces(source.fd, source.runs):
        yield encoder.extent(offset, data)


@dataclass(frozen=True)
class Source:
    fd: int
    size: int
    runs: list[tuple[int, int, bool]]

    @property
    def data_end(self) -> int:
        return max((o + n for o, n, d in self.runs if d), default=0)


def open_source(path: Path) -> Source:
    fd = open_disk(path, os.O_RDONLY, what="clone source")
    try:
        st = os.fstat(fd)
        block = stat.S_ISBLK(st.st_mode)
        size = os.lseek(fd, 0, os.SEEK_END) if block else st.st_size
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_SEQUENTIAL)
        return Source(fd, size, list(extents(fd, size, seekable_holes=not block)))
    except BaseException:
        os.close(fd)
        raise


# -- the connection ---------------------------------------------------------------------


def _reach(config: Config, seconds: float | None = None) -> socket.socket:
    """A TCP connection to the target, tried again while it is not listening yet: first
    after 20 ms (the target pod is usually a moment from listening; a first wait of
    0.2 s was a tenth of a 1 GiB copy), doubling up to :data:`CONNECT_MAX_WAIT`, for
    ``seconds`` (default ``connect_seconds``; one try at least)."""
    try:
        for attempt in tenacity.Retrying(
                stop=tenacity.stop_after_delay(
                    config.connect_seconds if seconds is None else seconds),
                wait=tenacity.wait_exponential(multiplier=CONNECT_FIRST_WAIT,
                                               max=CONNECT_MAX_WAIT),
                retry=tenacity.retry_if_exception_type(OSError), reraise=True):
            with attempt:
                sock = socket.create_connection(config.target, timeout=CONNECT_TRY_SECONDS)
                sock.settimeout(STALL_SECONDS)
                return sock
    except OSError as err:
        raise TransferError(f"clone target {config.target[0]}:{config.target[1]}"
                            f" not reachable: {err}") from None
    raise AssertionError("unreachable")


def connect(config: Config, ctx: ssl.SSLContext) -> TlsStream:
    """The TLS connection to the target, within ``connect_seconds``. A handshake that
    is cut off or not done in :data:`HANDSHAKE_SECONDS` (the target drops connections
    that keep it waiting, or pushes the oldest out when many come at once) is tried
    again, on a new connection, while that time lasts; a refused one (a certificate
    that is not this clone's) is not."""
    end = time.monotonic() + config.connect_seconds
    while True:
        sock = _reach(config, seconds=max(0.0, end - time.monotonic()))
        try:
            return TlsStream(sock, ctx, server_side=False, server_hostname=config.server_name,
                             handshake_seconds=HANDSHAKE_SECONDS)
        except ssl.SSLError as err:
            raise TLSRefused(f"TLS with the clone target refused: {err.reason or err}"
                             ) from None
        except OSError as err:
            left = end - time.monotonic()
            if left <= 0:
                raise TransferError(f"TLS with the clone target failed: {err}") from None
            logger.warning("TLS with the clone target broke off (%s); trying again", err)
            time.sleep(min(HANDSHAKE_RETRY_WAIT, left))


def _reader(sock: TlsStream) -> clonewire.ReadExact:
    def read(n: int) -> bytes:
        parts, want = [], n
        while want:
            data = sock.recv(min(want, 1 << 20))
            if not data:
                break
            parts.append(data)
            want -= len(data)
        return b"".join(parts)
    return read


def send(config: Config, source: Source, sock: TlsStream) -> clonewire.Encoder:
    """One whole stream: hello, the target's go-ahead, the extents, the end, the final
    reply (after the target synced the data)."""
    read = _reader(sock)
    try:
        sock.sendall(clonewire.hello(clonewire.Hello(size=source.size,
                                                     data_end=source.data_end)))
        clonewire.read_reply(read)
    except ssl.SSLError as err:
        # TLS 1.3: a client learns that its certificate was refused on its first read
        # (or its next write) after the handshake.
        raise TLSRefused(f"the clone target refused this source: {err.reason or err}"
                         ) from None
    encoder = clonewire.Encoder()
    # the next extents are read and framed in a thread while this one is sent
    for head, payload in ahead(frames(source, encoder), depth=AHEAD):
        sock.sendall(head, payload)
    sock.sendall(encoder.end())
    clonewire.read_reply(read)
    return encoder


def clone(config: Config) -> clonewire.Encoder:
    source = open_source(config.source)
    try:
        ctx = clonewire.stream_context(config.tls_dir, server_side=False)
        sock = connect(config, ctx)
        try:
            encoder = send(config, source, sock)
        except (clonewire.Refused, TLSRefused):
            raise
        except (OSError, ssl.SSLError) as err:
            raise TransferError(f"clone stream to the target failed: {err}") from None
        finally:
            sock.close()
    finally:
        os.close(source.fd)
    logger.info("sent %d of %d bytes (%d extents, %d bytes on the wire)",
                encoder.data_bytes, source.size, encoder.extents, encoder.wire_bytes)
    return encoder


def main() -> int:
    logging.basicConfig(level=logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    log = Path(os.environ.get(podenv.TERMINATION_LOG, str(TERMINATION_LOG)))
    try:
        clone(from_env(os.environ))
        return EXIT_OK
    except (ImporterError, OSError) as err:
        return failed(log, err, what="clone", logger=logger)


if __name__ == "__main__":
    sys.exit(main())
