"""Which way an import goes, and how much the volume can take: pure decisions.

Routes, fastest first:
- ``stream``: raw bytes (decompressed on the fly if wrapped) go straight into the volume;
- ``nbd-convert``: qemu-img converts a remote qcow2/vmdk/… while it streams, reading it
  through NBD with ranged requests: one pass, no scratch space;
- ``scratch-convert``: the image is first written whole to a scratch file, then
  converted. When it must be: a compressed convertible image (qcow2.xz: no random
  access into a compressed stream), a server without Range support, or a checksum
  over a convertible image (the hash needs every byte in order, qemu-img reads out of
  order and skips what it does not need); and for an upload, whose body the upload
  server keeps whole in scratch anyway as it arrives: qemu-img reads that file as it
  grows (``importer/arrivingexport.py``), or once whole where that cannot be;
- ``archive``: a tar is extracted into the Filesystem volume;
- ``blank``: an empty disk.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from fractions import Fraction
from typing import TYPE_CHECKING

from importer.config import ContentType
from importer.errors import InvalidImage, TooSmall
from importer.formats import Compression, Image
from sizes import MIB, usable_space

if TYPE_CHECKING:  # its module runs qemu-img: here only its result's shape
    from importer.qemu_img import ImageInfo


class Route(StrEnum):
    STREAM = "stream"
    NBD_CONVERT = "nbd-convert"
    SCRATCH_CONVERT = "scratch-convert"
    ARCHIVE = "archive"
    BLANK = "blank"


@dataclass(frozen=True)
class Decision:
    route: Route
    why: str


def choose_route(
    *,
    content_type: ContentType,
    compressions: tuple[Compression, ...],
    image: Image,
    ranged: bool,
    checksum: bool,
    spooled: bool = False,
) -> Decision:
    if content_type is ContentType.ARCHIVE:
        if not image.tar:
            raise InvalidImage("content type archive needs a tar archive, and this is not one")
        return Decision(Route.ARCHIVE, "tar archive extracted into the volume")
    if not image.format.convertible:
        return Decision(Route.STREAM, "raw data streams straight into the volume")
    if compressions:
        return Decision(Route.SCRATCH_CONVERT,
                        f"{image.format} wrapped in {'+'.join(compressions)} has no random access")
    if spooled:
        return Decision(Route.SCRATCH_CONVERT, f"{image.format} kept whole in scratch as it"
                        " arrives, and converted from that file as it grows")
    if not ranged:
        return Decision(Route.SCRATCH_CONVERT, "the server does not answer Range requests")
    if checksum:
        return Decision(Route.SCRATCH_CONVERT,
                        "a checksum needs every byte in order; qemu-img reads out of order")
    return Decision(Route.NBD_CONVERT, f"{image.format} converted while it streams")


def usable_bytes(
    *,
    block_device_size: int | None,
    requested: int | None,
    available: int,
    overhead: Fraction,
) -> int:
    """The most bytes of raw disk the destination can take.

    Block: the device, whole. Filesystem: the request less the filesystem overhead (the
    file system needs room for itself), and never more than is free.
    """
    if block_device_size is not None:
        return block_device_size
    if requested is None:
        return available
    return min(usable_space(capacity=requested, overhead=overhead), available)


def check_fits(*, virtual_size: int | None, usable: int) -> None:
    if virtual_size is not None and virtual_size > usable:
        raise TooSmall(
            f"DataVolume too small to contain image: virtual size {virtual_size} bytes"
            f" > usable {usable} bytes"
        )


RATE_SAMPLE = 2 * MIB
"""Bytes each connection reads when the import measures the server's rates."""
PARALLEL_BELOW = 64 * MIB
"""Bytes/s of one connection above which ranges read side by side through the importer's
range endpoint cannot beat nbdkit's one C stream on this class of machine (that endpoint
moved 250-290 MB/s on two cores), so the second measurement is not taken."""


def parallel_ranges(*, one: float, two: float | None) -> bool:
    """Whether the image is read as ranges side by side: ``one`` is the bytes/s one
    connection gave, ``two`` the bytes/s of two connections at once (None: not measured).
    Servers that cap each connection (CDNs, object stores) give two connections about
    twice one's rate; a link that is simply full gives them the same rate together."""
    return one < PARALLEL_BELOW and two is not None and two >= 1.5 * one


ARRIVAL_PIECES = 32
"""Most qemu-img runs an image converted as it arrives is split into."""


def arrival_piece(info: ImageInfo) -> int | None:
    """The guest range converted at a time while a qcow2 arrives (see
    ``qemu_img.convert``'s ``piece``): what one L2 table maps (cluster size² ÷ 8: 512 MiB
    for 64 KiB clusters), or a multiple of it making at most ARRIVAL_PIECES runs. None
    (one run) for other formats."""
    cluster = info.raw.get("cluster-size") if info.format == "qcow2" else None
    if not isinstance(cluster, int) or cluster <= 0:
        return None
    span = cluster * cluster // 8
    tables = -(-info.virtual_size // span)
    return span * -(-tables // ARRIVAL_PIECES)
