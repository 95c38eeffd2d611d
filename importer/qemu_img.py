"""qemu-img, run safely: explicit formats always, under memory and CPU limits.

An image is untrusted input to a C program, so every call names the input format (raw is
never probed), ``info`` runs under 1 GiB of address space and 30 s of CPU as upstream
does, and ``convert`` under a bounded address space and a CPU budget that grows with the
image. Progress comes from ``-p``.

Every call opens the image as a ``json:`` filename that names the format driver, the one
file or NBD export under it, and ``"backing": null``: even a header that names a backing
file (one the importer's own checks missed, or that changed after them) makes qemu-img
open nothing else. External data files and extents have no such switch in qemu 7.2;
they are kept out by the header checks (``formats.sniff_image``, ``info``) and by what
qemu-img reads: a local file only the importer writes, or an NBD export under an overlay
that holds the very head bytes those checks read (``nbd.pinned_image``).
"""

from __future__ import annotations

import functools
import io
import json
import logging
import os
import re
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, cast
from urllib.parse import parse_qs, urlsplit

from importer import children
from importer.errors import BackingFileRejected, ImporterError, InvalidImage, TransferError
from importer.formats import ImageFormat

logger = logging.getLogger(__name__)

GIB = 1024**3
OUTPUT_LIMIT = 1024 * 1024
INFO_LIMITS = (1 * GIB, 30)
_PROGRESS = re.compile(rb"\((\d+\.\d+)/100%\)")


@dataclass(frozen=True)
class ImageInfo:
    format: str
    virtual_size: int
    backing: str | None
    data_file: str | None
    raw: dict[str, Any]


def _limited(argv: list[str], address_space: int, cpu_seconds: int) -> list[str]:
    """``argv`` under ``prlimit``: the limits are set by the exec'd program, so Python
    can spawn without forking itself (no preexec_fn: no copy of this process's memory,
    nothing unsafe to run between fork and exec in a threaded program)."""
    return ["prlimit", f"--as={address_space}", f"--cpu={cpu_seconds}", "--", *argv]


def image_spec(image: str, fmt: ImageFormat) -> str:
    """``image`` (a path, an ``nbd+unix`` URI, or a ``json:`` node such as an NBD export
    under its pinned head) as a ``json:`` filename for qemu-img: the format driver over
    exactly that node, with backing files disabled."""
    return "json:" + json.dumps(format_node(image, fmt))


def format_node(image: str, fmt: ImageFormat) -> dict[str, Any]:
    """The format driver's node over ``image``'s (see :func:`image_spec`), backing
    files disabled."""
    return {"driver": fmt.value, "backing": None, "file": file_node(image)}


def file_node(image: str) -> dict[str, Any]:
    """The block node under the format driver for ``image`` (see :func:`image_spec`)."""
    if image.startswith("json:"):
        node: dict[str, Any] = json.loads(image.removeprefix("json:"))
        return node
    if urlsplit(image).scheme == "nbd+unix":
        return nbd_node(image)
    if urlsplit(image).scheme:
        raise ImporterError(f"qemu-img is given only files and NBD sockets, not {image!r}")
    return {"driver": "file", "filename": image}


def _is_own_file(name: str | None, image: str, reported: str | None) -> bool:
    """Whether an extent's file name (as qemu reports it) is the image's own file node."""
    if name is None or name in (image, reported):
        return True
    if name.startswith("json:"):
        try:
            named = json.loads(name.removeprefix("json:"))
        except json.JSONDecodeError:
            return False
        return isinstance(named, dict) and _flat(named) == _flat(file_node(image))
    return False


def _flat(node: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """A block node's options with nested objects as dotted keys, as qemu may print them
    (``{"server": {"path": p}}`` and ``{"server.path": p}`` are the same node)."""
    out: dict[str, Any] = {}
    for key, value in node.items():
        if isinstance(value, dict):
            out.update(_flat(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def nbd_node(uri: str) -> dict[str, Any]:
    """qemu's block node for an ``nbd+unix:///?socket=PATH`` URI."""
    parts = urlsplit(uri)
    sockets = parse_qs(parts.query).get("socket", [])
    if parts.scheme != "nbd+unix" or len(sockets) != 1 or parts.path.strip("/"):
        raise ImporterError(f"unexpected NBD URI {uri!r}")
    return {"driver": "nbd", "server": {"type": "unix", "path": sockets[0]}}


def head_overlay(overlay: Path, *, size: int, head: Path, cluster: int) -> Path:
    """A new qcow2 ``overlay`` of ``size`` bytes with ``cluster``-byte clusters whose
    first bytes are ``head``'s (one cluster at most), nothing else allocated and no
    backing file in its header (the caller names one when it opens it)."""
    length = min(head.stat().st_size, cluster)
    steps = [["qemu-img", "create", "-q", "-f", "qcow2", "-o", f"cluster_size={cluster}",
              str(overlay), str(size)]]
    if length:
        steps.append(["qemu-io", "-f", "qcow2", "-c", f"write -s {head} 0 {length}",
                      str(overlay)])
    for argv in steps:
        done = children.run_bounded(_limited(argv, *INFO_LIMITS), timeout=60,
                                    stdout_limit=OUTPUT_LIMIT, stderr_limit=OUTPUT_LIMIT)
        if done.returncode != 0:
            raise ImporterError(f"could not pin the image's head: {_last_line(done.stderr_tail)}")
    return overlay


def info(image: str, fmt: ImageFormat) -> ImageInfo:
    """``qemu-img info`` of an image (a path or an NBD URI) of a known format."""
    argv = ["qemu-img", "info", "--output=json", image_spec(image, fmt)]
    done = children.run_bounded(_limited(argv, *INFO_LIMITS), timeout=60,
                                stdout_limit=OUTPUT_LIMIT, stderr_limit=OUTPUT_LIMIT)
    if done.timed_out:
        raise InvalidImage(f"qemu-img info of the {fmt} image timed out")
    if done.overflow:
        raise InvalidImage(f"not a valid {fmt} image: qemu-img info wrote more than"
                           f" {OUTPUT_LIMIT} bytes to {done.overflow}")
    if done.returncode != 0:
        raise InvalidImage(f"not a valid {fmt} image: {_last_line(done.stderr_tail)}")
    try:
        data = json.loads(done.stdout)
    except json.JSONDecodeError as err:
        raise InvalidImage(f"qemu-img info of the {fmt} image is not JSON: {err}") from err
    specific = data.get("format-specific", {}).get("data", {})
    result = ImageInfo(
        format=data.get("format", fmt.value),
        virtual_size=int(data["virtual-size"]),
        backing=data.get("backing-filename") or data.get("full-backing-filename"),
        data_file=specific.get("data-file"),
        raw=data,
    )
    if result.backing:
        raise BackingFileRejected(f"{fmt} image has a backing file")
    if result.data_file:
        raise BackingFileRejected(f"{fmt} image keeps its data in an external file")
    for extent in specific.get("extents", []) if fmt is ImageFormat.VMDK else []:
        if not _is_own_file(extent.get("filename"), image, data.get("filename")):
            raise BackingFileRejected("vmdk image has external extents")
    return result


# Formats whose metadata qemu-img check can walk; the others are accepted as they are.
CHECKABLE = (ImageFormat.QCOW2, ImageFormat.VDI, ImageFormat.VHDX, ImageFormat.VMDK)


def check(image: str, fmt: ImageFormat) -> None:
    """Walk the image's metadata (not its data): a truncated or corrupt image fails here
    instead of converting into a disk with zeros where its data should be."""
    if fmt not in CHECKABLE:
        return
    argv = ["qemu-img", "check", "--output=json", image_spec(image, fmt)]
    done = children.run_bounded(_limited(argv, INFO_LIMITS[0], 60), timeout=120,
                                stdout_limit=OUTPUT_LIMIT, stderr_limit=OUTPUT_LIMIT)
    if done.timed_out:
        raise InvalidImage(f"qemu-img check of the {fmt} image timed out")
    if done.overflow:
        # A clean image reports nothing on stderr; megabytes of it are a corrupt one.
        raise InvalidImage(f"corrupt {fmt} image: qemu-img check reported more than"
                           f" {OUTPUT_LIMIT} bytes of errors ({_last_line(done.stderr_tail)})")
    # 0: clean, 3: only leaked clusters (harmless for a copy), 63: check not supported.
    if done.returncode in (0, 3, 63):
        return
    try:
        errors = json.loads(done.stdout).get("corruptions", "some")
    except (json.JSONDecodeError, AttributeError):
        errors = "some"
    raise InvalidImage(f"corrupt {fmt} image: {errors} errors found"
                       f" ({_last_line(done.stderr_tail)})")


def convert(
    source: str,
    fmt: ImageFormat,
    dest: Path,
    *,
    virtual_size: int,
    dest_is_block: bool,
    dest_is_zero: bool,
    preallocate: bool,
    direct_io: bool,
    progress: Callable[[float], None] | None = None,
    piece: int | None = None,
) -> None:
    """Convert to raw at ``dest``: a new sparse file, or an existing device. Written
    with O_DIRECT where the destination takes it, else through the page cache and
    flushed at the end: either way the disk is on stable storage when this returns.

    ``piece`` (bytes of the guest): convert the image one guest range of that size after
    another, each a qemu-img of its own over that range of the source and of the
    destination (``raw`` nodes with ``offset`` and ``size``). qemu-img walks the block
    status of all it converts before it writes anything, which for a qcow2 still
    arriving means waiting for its last L2 table, near the file's end: a range needs
    only its own, so its data is written as it arrives."""
    run = ["qemu-img", "convert", "-p", "-W", "-m", "4",
           "-t", "none" if direct_io else "writeback"]
    cpu = 120 + 60 * (virtual_size // GIB)
    if piece is None or piece >= virtual_size:
        argv = [*run, "-O", "raw"]
        if dest_is_block:
            argv += ["-n"] + (["--target-is-zero"] if dest_is_zero else [])
        elif preallocate:
            argv += ["-o", "preallocation=falloc"]
        argv += [image_spec(source, fmt), str(dest)]
        logger.info("converting %s image: %s", fmt, " ".join(argv[:-2]))
        _run_convert(argv, cpu, progress)
        return
    if not dest_is_block:  # the file the single run would make: sparse, or allocated
        fd = os.open(dest, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW
                     | os.O_CLOEXEC, 0o666)
        try:
            os.ftruncate(fd, virtual_size)
            if preallocate:
                os.posix_fallocate(fd, 0, virtual_size)
        finally:
            os.close(fd)
        dest_is_zero = True
    starts = range(0, virtual_size, piece)
    logger.info("converting %s image in %d ranges of %d bytes", fmt, len(starts), piece)
    target = "host_device" if dest_is_block else "file"
    for index, offset in enumerate(starts):
        size = min(piece, virtual_size - offset)
        node = {"driver": "raw", "offset": offset, "size": size,
                "file": format_node(source, fmt)}
        argv = [*run, "-n",
                *(["--target-is-zero"] if dest_is_zero else []),
                "json:" + json.dumps(node), "--target-image-opts",
                f"driver=raw,offset={offset},size={size},file.driver={target},"
                f"file.filename={str(dest).replace(',', ',,')}"]
        _run_convert(argv, cpu, None if progress is None else
                     functools.partial(_overall, progress, index, len(starts)))


def _overall(progress: Callable[[float], None], index: int, count: int,
             percent: float) -> None:
    """Range ``index`` of ``count`` at ``percent`` as the whole disk's percent."""
    progress((index * 100 + percent) / count)


def _run_convert(argv: list[str], cpu: int, progress: Callable[[float], None] | None) -> None:
    with children.running(_limited(argv, 4 * GIB, cpu), stdin=subprocess.DEVNULL,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE) as proc:
        assert proc.stdout is not None and proc.stderr is not None
        errors = children.drain_tail(proc.stderr)
        pending = b""
        while chunk := cast(io.BufferedReader, proc.stdout).read1(4096):
            pending = (pending + chunk)[-OUTPUT_LIMIT:]  # a line without an end stays bounded
            *done, pending = re.split(rb"[\r\n]", pending)
            for line in done:
                match = _PROGRESS.search(line)
                if match and progress:
                    progress(float(match.group(1)))
        returncode = proc.wait()
        stderr = errors.result()
    if returncode != 0:
        line = _last_line(stderr)
        if "Input/output error" in line:  # a read failed: the caller knows whose fault
            raise TransferError(f"qemu-img convert could not read the image: {line}")
        raise ImporterError(f"qemu-img convert failed: {line}")


def _last_line(stderr: bytes) -> str:
    lines = [line for line in stderr.decode(errors="replace").splitlines() if line.strip()]
    return lines[-1] if lines else "no error output"


class QemuImg(Protocol):
    """What the processor asks of qemu-img: a seam, so the clone and upload programs and
    tests can supply another (``tests/fakes.py:FakeQemuImg``)."""

    def info(self, image: str, fmt: ImageFormat) -> ImageInfo: ...

    def check(self, image: str, fmt: ImageFormat) -> None: ...

    def convert(self, source: str, fmt: ImageFormat, dest: Path, *, virtual_size: int,
                dest_is_block: bool, dest_is_zero: bool, preallocate: bool, direct_io: bool,
                progress: Callable[[float], None] | None = None,
                piece: int | None = None) -> None: ...


class SubprocessQemuImg:
    """The real one: the functions above, each a confined child process."""

    def info(self, image: str, fmt: ImageFormat) -> ImageInfo:
        return info(image, fmt)

    def check(self, image: str, fmt: ImageFormat) -> None:
        check(image, fmt)

    def convert(self, source: str, fmt: ImageFormat, dest: Path, *, virtual_size: int,
                dest_is_block: bool, dest_is_zero: bool, preallocate: bool, direct_io: bool,
                progress: Callable[[float], None] | None = None,
                piece: int | None = None) -> None:
        convert(source, fmt, dest, virtual_size=virtual_size, dest_is_block=dest_is_block,
                dest_is_zero=dest_is_zero, preallocate=preallocate, direct_io=direct_io,
                progress=progress, piece=piece)
