"""The host-assisted clone (``python -m importer.cloner``): copy one volume's disk into
another inside one pod, the way the importer writes (its :class:`SparseWriter`).

The pod mounts the source claim read-only and PVC' read-write, each as a Filesystem
(``disk.img``) or as a device, so every pairing works: Filesystem↔Block, raw
``disk.img``↔device. Only the source's data is read: on a file the holes are found with
``SEEK_DATA``/``SEEK_HOLE`` and skipped; on a device every block is read and zero blocks
become holes in the target. A Filesystem target's ``disk.img`` is then grown to the
usable size of its claim (as the importer does), a Block target keeps its size; a source
larger than the target's room is refused (``TooSmall``) before a byte is written, unless
all it holds beyond that room is a hole (a permissive clone of a mostly empty disk).

Environment (set by the clone populator's pod): ``CLONER_SOURCE`` and ``CLONER_TARGET``
(paths), ``IMPORTER_IMAGE_SIZE`` (the target claim's request), ``FILESYSTEM_OVERHEAD``,
``OWNER_UID`` (the progress metric's label), ``POD_IP`` (where the metric is served),
``PREALLOCATION``. Exit codes and the termination message as the importer's.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from importer.errors import ConfigError, ImporterError, TooSmall
from importer.plan import check_fits, usable_bytes
from importer.progress import Listener, Progress
from importer.termination import message, write
from importer.writers import SparseWriter, device_size, is_block_device
from sizes import parse_bytes, parse_overhead

logger = logging.getLogger(__name__)

CHUNK = 4 * 1024 * 1024
METRIC = "kubevirt_cdi_clone_progress"
METRICS_PORT = 8443
TERMINATION_LOG = Path("/dev/termination-log")
EXIT_OK, EXIT_RETRYABLE, EXIT_PERMANENT = 0, 1, 2


@dataclass(frozen=True)
class Config:
    source: Path
    target: Path
    requested: int | None
    overhead: str
    owner_uid: str
    metrics_addr: str | None
    preallocate: bool


def from_env(env: Mapping[str, str]) -> Config:
    try:
        source, target = Path(env["CLONER_SOURCE"]), Path(env["CLONER_TARGET"])
    except KeyError as err:
        raise ConfigError(f"{err.args[0]} is required") from None
    size = env.get("IMPORTER_IMAGE_SIZE") or None
    try:
        requested = parse_bytes(size) if size else None
        overhead = env.get("FILESYSTEM_OVERHEAD") or "0"
        parse_overhead(overhead)
    except ValueError as err:
        raise ConfigError(f"IMPORTER_IMAGE_SIZE/FILESYSTEM_OVERHEAD: {err}") from None
    return Config(source=source, target=target, requested=requested, overhead=overhead,
                  owner_uid=env.get("OWNER_UID", ""), metrics_addr=env.get("POD_IP"),
                  preallocate=(env.get("PREALLOCATION") or "").lower() == "true")


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


def clone(config: Config, *, listeners: list[Listener] | None = None) -> int:
    """Copy; returns the bytes of data read from the source."""
    source_block = is_block_device(config.source)
    size = device_size(config.source) if source_block else config.source.stat().st_size
    if is_block_device(config.target):
        room = device_size(config.target)
    else:
        stat = os.statvfs(config.target.parent)
        room = usable_bytes(block_device_size=None, requested=config.requested,
                            available=stat.f_bavail * stat.f_frsize,
                            overhead=parse_overhead(config.overhead))
    fd = os.open(config.source, os.O_RDONLY)
    try:
        runs = list(extents(fd, size, seekable_holes=not source_block))
        data_end = max((o + n for o, n, d in runs if d), default=0)
        # A source larger than the room fits when all it has beyond the room is a hole
        # (a permissive clone of a mostly empty disk); its zero tail is then left off.
        check_fits(virtual_size=size if size <= room else data_end, usable=room)
        return _copy(fd, config, runs=runs, limit=min(size, room), listeners=listeners)
    finally:
        os.close(fd)


def _copy(fd: int, config: Config, *, runs: list[tuple[int, int, bool]], limit: int,
          listeners: list[Listener] | None) -> int:
    progress = Progress(listeners)
    progress.stage(start=0, end=100, total_bytes=limit)
    writer = SparseWriter(config.target, preallocate=config.preallocate)
    read = 0
    try:
        for offset, length, data in runs:
            length = min(length, limit - offset)
            if length <= 0:
                break
            if not data:
                writer.skip(length)
                progress.advance(length)
                continue
            end = offset + length
            while offset < end:
                chunk = os.pread(fd, min(CHUNK, end - offset), offset)
                if not chunk:
                    raise ImporterError(f"source ended at {offset} of {limit} bytes")
                writer.write(chunk)
                offset += len(chunk)
                read += len(chunk)
                progress.advance(len(chunk))
        writer.finish(None if writer.block else _room(config, limit))
    except BaseException:
        writer.discard()
        raise
    progress.set_percent(100.0)
    logger.info("cloned %d bytes (%d of data) from %s into %s", limit, read, config.source,
                config.target)
    return read


def _room(config: Config, limit: int) -> int:
    """A Filesystem target's final ``disk.img`` size: the usable size of its request."""
    if config.requested is None:
        return limit
    return usable_bytes(block_device_size=None, requested=config.requested,
                        available=1 << 62, overhead=parse_overhead(config.overhead))


def main() -> int:
    logging.basicConfig(level=logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    log = Path(os.environ.get("IMPORTER_TERMINATION_LOG", str(TERMINATION_LOG)))
    metric = None
    try:
        config = from_env(os.environ)
        listeners: list[Listener] = []
        if config.metrics_addr:
            from importer.metrics import ProgressMetric  # prometheus_client is slow to import
            metric = ProgressMetric(owner_uid=config.owner_uid, port=METRICS_PORT,
                                    addr=config.metrics_addr, name=METRIC)
            listeners.append(metric)
        clone(config, listeners=listeners)
        return EXIT_OK
    except (ConfigError, TooSmall) as err:
        logger.error("%s", err)
        write(log, message(reason=err.reason, text=err.message, retryable=False))
        return EXIT_PERMANENT
    except (ImporterError, OSError) as err:
        logger.error("clone failed: %s", err)
        write(log, message(reason="TransferFailed", text=str(err), retryable=True))
        return EXIT_RETRYABLE
    finally:
        if metric is not None:
            metric.close()


if __name__ == "__main__":
    sys.exit(main())
