"""The import as a phase machine: a table from phase to step, each step naming the next.

``Info`` probes the source, sniffs wrapper and format, checks the size against the
volume (before any bulk transfer) and picks the route (``plan.choose_route``); one step
per route moves the data; ``Resize`` grows the raw disk to the usable size. A failure
anywhere wipes the destination, so a broken import never looks like a good disk.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import tarfile
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from stat import S_ISLNK
from typing import TYPE_CHECKING, Any, cast

import zstandard

from importer import beside, plan
from importer.config import ImporterConfig
from importer.errors import (
    ChecksumMismatch,
    DeadlineExceeded,
    ImporterError,
    Interrupted,
    InvalidImage,
    NotADiskImage,
    SourceChanged,
    Stalled,
    TooSmall,
    TransferError,
)
from importer.formats import (
    HEAD_BYTES,
    Compression,
    Image,
    ImageFormat,
    gzip_size_hint,
    sniff_compression,
    sniff_image,
    web_page,
    xz_uncompressed_size,
)
from importer.progress import Progress
from importer.qemu_img import ImageInfo, QemuImg, SubprocessQemuImg
from importer.sources.base import GrowingFile, Probe, Source, Spooled
from importer.streams import IterReader, bounded, decompressed, observed, peek, resumable
from importer.watchdog import Watchdog
from importer.writers import (
    SparseWriter,
    device_size,
    is_block_device,
    refuse_foreign,
    supports_direct_io,
    wipe,
    zero_device,
)
from vocab import sources

if TYPE_CHECKING:
    from importer import nbd

logger = logging.getLogger(__name__)
SCRATCH_MOUNT = Path("/scratch")


class Phase(StrEnum):
    INFO = "Info"
    STREAM = "TransferDataFile"
    NBD_CONVERT = "ConvertWhileStreaming"
    SCRATCH_CONVERT = "TransferScratch"
    ARCHIVE = "TransferDataDir"
    BLANK = "Blank"
    RESIZE = "Resize"
    COMPLETE = "Complete"


_ROUTE_PHASE = {
    plan.Route.STREAM: Phase.STREAM,
    plan.Route.NBD_CONVERT: Phase.NBD_CONVERT,
    plan.Route.SCRATCH_CONVERT: Phase.SCRATCH_CONVERT,
    plan.Route.ARCHIVE: Phase.ARCHIVE,
    plan.Route.BLANK: Phase.BLANK,
}


@dataclass
class Result:
    """What was imported: the success termination message and the CLI's summary."""

    route: str = ""
    why: str = ""
    format: str = ""
    compression: list[str] = field(default_factory=list)
    virtual_size: int | None = None
    size: int = 0
    allocated_bytes: int = 0
    fetched_bytes: int = 0
    checksum: str | None = None
    seconds: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        return {
            "route": self.route, "why": self.why, "format": self.format,
            "compression": self.compression, "virtualSize": self.virtual_size,
            "size": self.size, "allocatedBytes": self.allocated_bytes,
            "fetchedBytes": self.fetched_bytes, "checksum": self.checksum,
            "seconds": round(self.seconds, 3),
        }


@dataclass(frozen=True)
class Planned:
    """What the Info step learned, handed to the route's step (no state set aside in
    attributes: a route sees exactly this)."""

    usable: int
    """The most bytes of raw disk the destination takes."""
    probe: Probe | None = None
    image: Image | None = None
    compressions: tuple[Compression, ...] = ()
    chunks: Iterator[bytes] | None = None
    """A stream Info opened to look inside a compressed image, to be read on from."""


Step = Callable[[Planned], Phase]
Exporter = Callable[..., AbstractContextManager["nbd.Export"]]


class Processor:
    """The phase machine. Its I/O seams are parameters, so the clone and upload programs
    (and tests, with ``tests/fakes.py``) can supply their own: ``qemu`` (a ``QemuImg``),
    ``exporter`` (an NBD export of the source), ``statvfs``."""

    def __init__(self, config: ImporterConfig, source: Source, progress: Progress, *,
                 watchdog: Watchdog | None = None, qemu: QemuImg | None = None,
                 exporter: Exporter | None = None,
                 statvfs: Callable[[Path], os.statvfs_result] = os.statvfs) -> None:
        self.config = config
        self.watchdog = watchdog
        self.qemu: QemuImg = qemu if qemu is not None else SubprocessQemuImg()
        self.exporter = exporter
        """None: the real NBD export, imported when the nbd route runs (it pulls in the
        HTTP client; a blank or streamed import starts faster without it)."""
        self.statvfs = statvfs
        self.visited: list[Phase] = []
        self.source = source
        self.progress = progress
        self.result = Result()
        self.block = is_block_device(config.dest)
        self.target = config.dest
        """Where the disk is written: the destination itself (a device, a volume's
        disk.img), or for ``config.partial_file`` a name beside it, renamed on success."""
        if config.partial_file and not self.block and not config.dest.is_dir():
            self.target = config.dest.with_name(f".{config.dest.name}.partial")
        self.hasher = config.checksum.hasher() if config.checksum else None
        self._fetch_lock = threading.Lock()
        self.steps: dict[Phase, Step] = {
            Phase.STREAM: self.stream,
            Phase.NBD_CONVERT: self.nbd_convert,
            Phase.SCRATCH_CONVERT: self.scratch_convert,
            Phase.ARCHIVE: self.archive,
            Phase.BLANK: self.blank,
            Phase.RESIZE: self.resize,
        }

    def run(self) -> Result:
        started = time.monotonic()
        phase = Phase.INFO
        for path in {self.config.dest, self.target}:
            refuse_foreign(path, what="the destination")  # before anything is wiped
        try:
            phase, planned = self._enter(phase), self.info()
            phase = _ROUTE_PHASE[plan.Route(self.result.route)]
            while phase is not Phase.COMPLETE:
                phase = self.steps[self._enter(phase)](planned)
        except OSError as err:
            self._wipe_destination()
            if err.errno in (errno.ENOSPC, errno.EDQUOT):
                raise TooSmall(f"DataVolume too small to contain image: {err}", cause=err) from err
            raise ImporterError(f"{phase}: {err}", cause=err) from err
        except BaseException:
            self._wipe_destination()
            raise
        if self.target != self.config.dest and self.result.route != plan.Route.ARCHIVE:
            os.replace(self.target, self.config.dest)
        self.result.seconds = time.monotonic() - started
        self.progress.set_percent(100.0)
        return self.result

    def _enter(self, phase: Phase) -> Phase:
        """The loop guard: no phase runs twice (a step naming a visited phase is a bug)."""
        if phase in self.visited:
            raise ImporterError(f"phase {phase} reached twice")
        self.visited.append(phase)
        logger.info("phase %s", phase)
        return phase

    # -- Info -----------------------------------------------------------------------------

    def info(self) -> Planned:
        """Probe, sniff, check the size, choose the route (``result.route``)."""
        usable = self._usable_bytes()
        if self.config.source == sources.BLANK:
            self.result.route = plan.Route.BLANK
            return Planned(usable=usable)
        probe = self.source.probe()
        head = probe.head
        _refuse_web_page(probe)
        compressions: list[Compression] = []
        chunks: Iterator[bytes] | None = None
        while (compression := sniff_compression(head)) is not None:
            if not compressions:
                self._precheck_compressed(compression, probe, usable)
                chunks = self._fetched(probe)
            compressions.append(compression)
            assert chunks is not None
            head, chunks = peek(decompressed(chunks, compression), HEAD_BYTES)
            if len(compressions) > 3:
                raise InvalidImage("more than three nested compression wrappers")
        image = sniff_image(head)
        decision = plan.choose_route(
            content_type=self.config.content_type,
            compressions=tuple(compressions),
            image=image,
            ranged=probe.ranged,
            checksum=self.hasher is not None,
            spooled=probe.spooled,
        )
        virtual = image.virtual_size
        if virtual is None and not compressions and not image.format.convertible:
            virtual = probe.size
        if decision.route is not plan.Route.ARCHIVE:
            plan.check_fits(virtual_size=virtual, usable=usable)
        self.result.route, self.result.why = decision.route, decision.why
        self.progress.set_span(start=0, end=self._fetch_share())
        self.result.format = "iso" if image.iso else image.format.value
        self.result.compression = [c.value for c in compressions]
        self.result.virtual_size = virtual
        logger.info("%s image%s, virtual size %s, usable %d: %s", self.result.format,
                    f" in {'+'.join(self.result.compression)}" if compressions else "",
                    virtual, usable, decision.why)
        return Planned(usable=usable, probe=probe, image=image,
                       compressions=tuple(compressions), chunks=chunks)

    def _usable_bytes(self) -> int:
        dest = self.config.dest
        if self.block:
            return plan.usable_bytes(block_device_size=device_size(dest), requested=None,
                                     available=0, overhead=self.config.filesystem_overhead)
        directory = dest if dest.is_dir() else dest.parent
        directory.mkdir(parents=True, exist_ok=True)
        stat = self.statvfs(directory)
        existing = dest.stat().st_blocks * 512 if dest.is_file() else 0
        return plan.usable_bytes(
            block_device_size=None,
            requested=self.config.image_size,
            available=stat.f_bavail * stat.f_frsize + existing,
            overhead=self.config.filesystem_overhead,
        )

    def _precheck_compressed(self, compression: Compression, probe: Probe,
                             usable: int) -> None:
        """The decompressed size, where the wrapper tells it cheaply, against the volume."""
        hint: int | None = None
        if compression is Compression.ZSTD:
            size = zstandard.frame_content_size(probe.head)
            hint = size if size >= 0 else None
        elif probe.ranged and probe.size:
            tail_length = min(probe.size, HEAD_BYTES)
            tail = self.source.read_range(probe.size - tail_length, tail_length)
            hint = (gzip_size_hint(tail) if compression is Compression.GZIP
                    else xz_uncompressed_size(tail))
        if hint is not None and hint > usable:
            plan.check_fits(virtual_size=hint, usable=usable)

    def _fetched(self, probe: Probe) -> Iterator[bytes]:
        """The source's bytes in order, hashed and counted as fetched."""
        self.progress.stage(start=0, end=self._fetch_share(), total_bytes=probe.size)
        chunks = resumable(self.source, self.config, size=probe.size, head=probe.head)
        if self.hasher is not None:
            chunks = observed(chunks, self.hasher.update)
        return observed(chunks, self._count)

    def _fetch_share(self) -> float:
        return 90.0 if self.result.route == plan.Route.SCRATCH_CONVERT else 100.0

    def _count(self, chunk: bytes) -> None:
        self.result.fetched_bytes += len(chunk)
        if self.watchdog is not None:
            self.watchdog.add(len(chunk))
        self.progress.advance(len(chunk))

    def _fetched_by_proxy(self, count: int) -> None:
        """Bytes the range endpoint fetched for qemu-img (from reader threads)."""
        with self._fetch_lock:
            self.result.fetched_bytes += count
        if self.watchdog is not None:
            self.watchdog.add(count)

    def _verify_checksum(self) -> None:
        expected = self.config.checksum
        if expected is None or self.hasher is None:
            return
        actual = self.hasher.hexdigest()
        if not expected.matches(actual):
            raise ChecksumMismatch(
                f"checksum mismatch: expected {expected}, got {expected.algorithm}:{actual}")
        self.result.checksum = str(expected)

    # -- routes ---------------------------------------------------------------------------

    def _chunks(self, planned: Planned) -> Iterator[bytes]:
        if planned.chunks is not None:
            return planned.chunks
        assert planned.probe is not None
        return self._fetched(planned.probe)

    def stream(self, planned: Planned) -> Phase:
        chunks = self._chunks(planned)
        usable = planned.usable
        if planned.compressions:
            chunks = bounded(chunks, limit=usable, what="decompressed data")
        writer = SparseWriter(self.target, preallocate=self.config.preallocation)
        try:
            for chunk in chunks:
                if writer.offset + len(chunk) > usable:
                    raise TooSmall(
                        "DataVolume too small to contain image: more than the usable"
                        f" {usable} bytes of data")
                writer.write(chunk)
            self._verify_checksum()
            self.result.virtual_size = writer.offset
            self.result.size = writer.finish()
        except BaseException:
            writer.discard()
            raise
        return Phase.RESIZE

    def nbd_convert(self, planned: Planned) -> Phase:
        assert planned.probe is not None and planned.probe.size is not None and planned.image
        from importer import nbd  # only this route needs it (and the HTTP client)

        exporter = self.exporter or nbd.export
        with tempfile.TemporaryDirectory(prefix="rootdisk-nbd-",
                                         dir=nbd.workdir_parent()) as workdir, \
                exporter(self.source, self.config, probe=planned.probe, workdir=Path(workdir),
                         on_fetch=self._fetched_by_proxy) as export:
            # nbdkit's curl plugin fetches the direct route's bytes: its reads count.
            counter = nbd.read_counter(export.reads_log) if export.reads_log else None
            with (self.watchdog.watch(counter) if self.watchdog and counter
                  else contextlib.nullcontext()):
                try:
                    self._convert(planned, export.image, progress_from=0)
                except (Interrupted, Stalled, DeadlineExceeded):
                    raise  # the import's own verdict, not the source's
                except ImporterError as err:
                    failure = export.failure()
                    if failure is not None:
                        raise failure from err
                    self._still_the_object_probed(err)
                    raise
                if counter is not None:
                    self.result.fetched_bytes += counter()
            # nbdkit's own reads carried the validators as preconditions, which a server
            # may ignore: one more checked read says the object is still the one probed.
            self._still_the_object_probed()
        return Phase.RESIZE

    def _still_the_object_probed(self, failure: ImporterError | None = None) -> None:
        """SourceChanged if the source's object is no longer the one probed (its next
        answer's validators or size differ). After a ``failure``, only that verdict
        replaces it: the check's own trouble (the server gone) leaves the failure as is."""
        try:
            self.source.read_range(0, 1)
        except SourceChanged:
            raise
        except ImporterError:
            if failure is None:
                raise

    def scratch_convert(self, planned: Planned) -> Phase:
        assert planned.image is not None and planned.probe is not None
        if planned.probe.spooled:  # the source keeps it whole already: read that file
            source = cast(Spooled, self.source)
            growing = source.growing_file()
            with (self.watchdog.paused() if self.watchdog else contextlib.nullcontext()):
                if growing is None or not self._convert_arriving(planned, source, growing):
                    self._convert(planned, str(source.spooled_file()),
                                  progress_from=self._fetch_share())
            arrived = source.spooled_file().stat().st_size
            self.result.fetched_bytes += arrived
            self.progress.advance(arrived)
            return Phase.RESIZE
        chunks = self._chunks(planned)
        virtual = planned.image.virtual_size
        limit = (virtual + virtual // 64 + 64 * 1024 * 1024) if virtual else planned.usable
        chunks = bounded(chunks, limit=limit, what=f"{planned.image.format} image data")
        with tempfile.TemporaryDirectory(prefix="rootdisk-scratch-", dir=self._scratch_dir()) as d:
            scratch = Path(d) / "image"
            writer = SparseWriter(scratch)
            try:
                for chunk in chunks:
                    writer.write(chunk)
                writer.finish()
            except BaseException:
                writer.discard()
                raise
            self._verify_checksum()
            with (self.watchdog.paused() if self.watchdog else contextlib.nullcontext()):
                self._convert(planned, str(scratch), progress_from=self._fetch_share())
        return Phase.RESIZE

    def _convert_arriving(self, planned: Planned, source: Spooled,
                          growing: GrowingFile) -> bool:
        """Convert the spooled file while it still arrives: qemu-img reads it through this
        process's NBD export of it (``arrivingexport``), each read waiting for its bytes.

        ``qemu-img info`` (the header: backing file, data file, virtual size against the
        volume) comes first, as on every route. ``qemu-img check`` runs beside the
        convert, not before it: it walks every L2 table and refcount block, which a
        qcow2 keeps spread through the file up to its end, so a check first would start
        the convert only after the last byte. No success without a clean check: its
        verdict, on the whole file if it could not finish on the arriving one (a slow
        upload past its timeout), comes before the convert's own, and the upload's own
        failure before both. False (nothing written: the caller checks and converts the
        whole file) when info fails on the arriving file."""
        from importer import arrivingexport, nbd  # only the converting routes need them

        assert planned.image is not None
        fmt = planned.image.format
        with tempfile.TemporaryDirectory(prefix="rootdisk-nbd-",
                                         dir=nbd.workdir_parent()) as workdir, \
                arrivingexport.serve(growing, Path(workdir) / "arriving.sock") as image:
            try:
                info = self._inspect_header(planned, image)
            except (InvalidImage, TransferError) as err:
                source.spooled_file()  # the upload's own failure comes first
                logger.info("qemu-img info of the %s image as it arrived failed (%s):"
                            " reading the whole file", fmt, err)
                self._converted_whole(fmt, "qemu-img info of it as it arrived failed")
                return False
            with beside.pool(1, "qemu-img-check") as side:
                checked = side.submit(self.qemu.check, image, fmt)
                converted: ImporterError | None = None
                try:
                    self._write(planned, image, info, progress_from=self._fetch_share(),
                                piece=plan.arrival_piece(info))
                except ImporterError as err:
                    converted = err
                unchecked = checked.exception()
        whole = source.spooled_file()  # every byte arrived, and no more; else its failure
        if unchecked is not None:
            logger.info("qemu-img check of the %s image as it arrived failed (%s): checking"
                        " the whole file", fmt, unchecked)
            self.qemu.check(str(whole), fmt)
        if converted is not None:
            raise converted
        return True

    def _converted_whole(self, fmt: ImageFormat, reason: str) -> None:
        """The termination message says the spooled upload was converted once whole."""
        self.result.why = (f"{fmt} kept whole in scratch as it arrives, then converted from"
                           f" that file ({reason})")

    def _convert(self, planned: Planned, image: str, *, progress_from: float) -> None:
        assert planned.image is not None
        fmt = planned.image.format
        # qemu-img check walks the metadata while info reads the header (both read only):
        # over NBD each is a process, a connection and a request to the server. Info's
        # verdict comes first; the check's is waited for either way.
        with beside.pool(1, "qemu-img-check") as side:
            checked = side.submit(self.qemu.check, image, fmt)
            info = self._inspect_header(planned, image)
            checked.result()
        self._write(planned, image, info, progress_from=progress_from)

    def _inspect_header(self, planned: Planned, image: str) -> ImageInfo:
        """qemu-img info of ``image`` (refusing backing and data files), and its virtual
        size against the volume."""
        assert planned.image is not None
        info = self.qemu.info(image, planned.image.format)
        self.result.virtual_size = info.virtual_size
        plan.check_fits(virtual_size=info.virtual_size, usable=planned.usable)
        return info

    def _write(self, planned: Planned, image: str, info: ImageInfo, *,
               progress_from: float, piece: int | None = None) -> None:
        """qemu-img convert of the checked ``image`` into the destination (in guest
        ranges of ``piece`` bytes when given: ``qemu_img.convert``)."""
        assert planned.image is not None
        fmt = planned.image.format
        zeroed = zero_device(self.target) if self.block else False
        self.progress.stage(start=progress_from, end=100)
        try:
            self.qemu.convert(
                image, fmt, self.target,
                virtual_size=info.virtual_size, dest_is_block=self.block, dest_is_zero=zeroed,
                preallocate=self.config.preallocation,
                direct_io=supports_direct_io(self.target),
                progress=self.progress.stage_percent,
                piece=piece,
            )
        except TransferError as err:
            # qemu-img could not read part of the image. A local file, or an export whose
            # reads all came back whole (the nbd route puts the proxy's own failure first):
            # the image's data is bad, such as a corrupt compressed cluster, and reading it
            # again gives the same answer. Permanent, not a retry.
            raise InvalidImage(f"corrupt {fmt} image: {err}", cause=err) from err
        self.result.size = info.virtual_size if not self.block else device_size(self.target)

    def _scratch_dir(self) -> Path | None:
        """The configured scratch dir; else a pod's scratch volume at /scratch (upstream's
        mount point); else beside a Filesystem destination; else the temp dir."""
        if self.config.scratch_dir is not None:
            return self.config.scratch_dir
        if SCRATCH_MOUNT.is_dir():
            return SCRATCH_MOUNT
        return None if self.block else self.config.dest.parent

    def archive(self, planned: Planned) -> Phase:
        target = self.config.dest if self.config.dest.is_dir() else self.config.dest.parent
        chunks = self._chunks(planned)
        extracted: list[Path] = []
        guard = _ArchiveGuard(target)
        total = 0
        try:
            with tarfile.open(fileobj=IterReader(chunks), mode="r|") as tar:
                for member in tar:
                    # Two locks. _ArchiveGuard decides on names alone, whatever the
                    # interpreter's patch level; then the data filter (which resolves paths
                    # through the filesystem, defeated by symlink chains on unpatched
                    # Pythons: CVE-2025-4517) still drops modes, devices, leading "/".
                    path = guard.check(member)
                    safe = tarfile.data_filter(member, str(target))
                    extracted.extend(_new_parents(target, safe.name))
                    total += safe.size
                    if total > planned.usable:
                        raise TooSmall(f"DataVolume too small to contain archive: more than"
                                       f" {planned.usable} bytes of files")
                    existed = path.exists() or path.is_symlink()
                    tar.extract(safe, target, filter="data")
                    if not existed:
                        extracted.append(path)
                    guard.extracted(member, path)
            self._verify_checksum()
        except tarfile.TarError as err:
            _remove_all(extracted, root=target)
            raise InvalidImage(f"bad tar archive: {err}", cause=err) from err
        except BaseException:
            _remove_all(extracted, root=target)
            raise
        self.result.size = total
        return Phase.COMPLETE

    def blank(self, planned: Planned) -> Phase:
        if self.block:
            if not zero_device(self.target):
                writer = SparseWriter(self.target)
                writer.finish()
            self.result.size = device_size(self.target)
            return Phase.COMPLETE
        writer = SparseWriter(self.target, preallocate=self.config.preallocation)
        self.result.size = writer.finish(planned.usable)
        self.result.virtual_size = self.result.size
        return Phase.COMPLETE

    def resize(self, planned: Planned) -> Phase:
        """Grow a Filesystem volume's raw disk to the usable size (never shrink)."""
        if self.block or self.config.image_size is None:
            self._record_allocation()
            return Phase.COMPLETE
        size = self.target.stat().st_size
        usable = planned.usable
        if usable > size:
            os.truncate(self.target, usable)
            if self.config.preallocation:
                fd = os.open(self.target, os.O_WRONLY)
                try:
                    os.posix_fallocate(fd, size, usable - size)
                finally:
                    os.close(fd)
            logger.info("resized %s from %d to %d bytes", self.target, size, usable)
        self.result.size = max(size, usable)
        self._record_allocation()
        return Phase.COMPLETE

    def _record_allocation(self) -> None:
        if not self.block:
            self.result.allocated_bytes = self.target.stat().st_blocks * 512

    def _wipe_destination(self) -> None:
        if self.result.route != plan.Route.ARCHIVE:
            try:
                wipe(self.target)
            except OSError as err:
                logger.warning("could not wipe %s after the failure: %s", self.target, err)


def _refuse_web_page(probe: Probe) -> None:
    title = web_page(probe.head)
    if title is None:
        return
    kind = (probe.content_type or "no Content-Type").split(";")[0].strip()[:60]
    size = f"{probe.size} bytes" if probe.size is not None else "unknown size"
    raise NotADiskImage(
        f"the URL returned an HTML page ({kind}, {size}"
        + (f", titled {title!r}" if title else "")
        + "), not a disk image: check the URL and its credentials")


class _ArchiveGuard:
    """Where an archive's members may go, decided on names, never by resolving a path.

    A member's name may have no ``..`` component (a leading ``/`` is dropped, as the data
    filter does); a symlink's target must be relative with no ``..`` component; a hard
    link must name a regular file this extraction wrote. Every path a member makes then
    only goes down from the volume's root, whichever of the archive's own symlinks it
    crosses: there is no way up. A symlink the extraction did not make (one already in
    the volume) is never crossed: each existing component is looked at with lstat.
    Refused: symlinks such as ``usr/bin/x -> ../lib/x``; an archive that needs them is
    better unpacked elsewhere and imported as a disk image.
    """

    def __init__(self, root: Path) -> None:
        self.root = root
        self._links: set[tuple[int, int]] = set()
        """(st_dev, st_ino) of the symlinks this extraction made."""
        self._files: set[str] = set()
        """Names of the regular files it wrote (what a hard link may name)."""

    def check(self, member: tarfile.TarInfo) -> Path:
        """Where ``member`` goes (under the root), else InvalidImage naming it."""
        name = self._name(member.name, member.name, what="its name")
        if member.issym():
            target = member.linkname
            if not target or target.startswith("/") or ".." in target.split("/"):
                raise InvalidImage(
                    f"tar member {member.name!r} is a symlink to {target!r}: only relative"
                    " symlinks without '..' (within their own directory) are extracted")
        elif member.islnk():
            link = self._name(member.linkname, member.name, what="its link target")
            if link not in self._files:
                raise InvalidImage(
                    f"tar member {member.name!r} is a hard link to {member.linkname!r}, not"
                    " to a file extracted from this archive before it")
            self._no_foreign_symlink(link, member.name)
        if not name and not member.isdir():
            raise InvalidImage(f"tar member {member.name!r} would replace the volume's root")
        self._no_foreign_symlink(name, member.name)
        return self.root.joinpath(*name.split("/")) if name else self.root

    def extracted(self, member: tarfile.TarInfo, path: Path) -> None:
        name = self._name(member.name, member.name, what="its name")
        if member.issym():
            st = os.lstat(path)
            self._links.add((st.st_dev, st.st_ino))
        if member.isreg() or member.islnk():
            self._files.add(name)
        else:
            self._files.discard(name)

    @staticmethod
    def _name(raw: str, member: str, *, what: str) -> str:
        """``raw`` as a relative name without ``.`` or empty components ("" for the root);
        InvalidImage if it has a ``..`` component."""
        parts = [p for p in raw.lstrip("/").split("/") if p not in ("", ".")]
        if ".." in parts:
            raise InvalidImage(f"tar member {member!r}: {what} ({raw!r}) has a '..'"
                               " component")
        return "/".join(parts)

    def _no_foreign_symlink(self, name: str, member: str) -> None:
        path = self.root
        for part in name.split("/") if name else ():
            path = path / part
            try:
                st = os.lstat(path)
            except OSError:  # nothing there yet (or not a directory: tarfile says so)
                return
            if S_ISLNK(st.st_mode) and (st.st_dev, st.st_ino) not in self._links:
                raise InvalidImage(f"tar member {member!r} goes through"
                                   f" {str(path.relative_to(self.root))!r}, a symlink that"
                                   " is not this archive's")


def _new_parents(root: Path, name: str) -> list[Path]:
    """Directories extracting ``name`` (a filtered, relative name) will create,
    outermost first."""
    created = []
    path = root
    for part in Path(name).parts[:-1]:
        path = path / part
        if not path.exists():
            created.append(path)
    return created


def _remove_all(paths: list[Path], *, root: Path) -> None:
    """Remove what the extraction created, newest first, and only inside ``root``."""
    base = root.resolve()
    for path in reversed(paths):
        try:
            parent = path.parent.resolve()
            if parent != base and base not in parent.parents:
                logger.warning("not removing %s: outside %s", path, root)
                continue
            if path.is_dir() and not path.is_symlink():
                path.rmdir()
            else:
                path.unlink(missing_ok=True)
        except OSError:
            logger.warning("could not remove %s", path)
