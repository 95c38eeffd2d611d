"""What the first bytes of an image say: its wrapper, its format, its virtual size, and
whether it refers to other files.

Pure functions over byte strings. The importer reads the head of the source (the first
``HEAD_BYTES``) and decides its route from these answers before any bulk transfer:
explicit formats for every qemu-img call (raw is never auto-probed), and images that
would make qemu-img open other files are refused here, before qemu-img sees them.
"""

from __future__ import annotations

import re
import struct
from dataclasses import dataclass
from enum import StrEnum

from importer.errors import BackingFileRejected, InvalidImage

HEAD_BYTES = 64 * 1024
SECTOR = 512


class Compression(StrEnum):
    GZIP = "gz"
    XZ = "xz"
    ZSTD = "zst"


class ImageFormat(StrEnum):
    """Formats by qemu-img's driver names."""

    RAW = "raw"
    QCOW2 = "qcow2"
    VMDK = "vmdk"
    VDI = "vdi"
    VPC = "vpc"
    VHDX = "vhdx"

    @property
    def convertible(self) -> bool:
        return self is not ImageFormat.RAW


@dataclass(frozen=True)
class Image:
    """A sniffed (uncompressed) image."""

    format: ImageFormat
    virtual_size: int | None
    """From the header where the format keeps it there; None when qemu-img must say."""
    iso: bool = False
    tar: bool = False


_COMPRESSION_MAGIC = (
    (b"\x1f\x8b", Compression.GZIP),
    (b"\xfd7zXZ\x00", Compression.XZ),
    (b"\x28\xb5\x2f\xfd", Compression.ZSTD),
)


def sniff_compression(head: bytes) -> Compression | None:
    for magic, compression in _COMPRESSION_MAGIC:
        if head.startswith(magic):
            return compression
    return None


_HTML = re.compile(rb"\A(?:\xef\xbb\xbf)?\s*<(?:!doctype\s+html|html)[\s>]", re.IGNORECASE)
_TITLE = re.compile(rb"<title[^>]*>([^<]{0,200})", re.IGNORECASE)


def web_page(head: bytes) -> str | None:
    """What an HTML page at the start of the data says it is (its title), or None when
    the data does not start like one. A disk image never starts with ``<html``: a wrong
    URL, a login page or a proxy's error page does."""
    if not _HTML.match(head):
        return None
    title = _TITLE.search(head)
    text = title.group(1).decode("utf-8", "replace") if title else ""
    return " ".join("".join(c if c.isprintable() else " " for c in text).split())[:80]


def sniff_image(head: bytes) -> Image:
    """Identify an uncompressed image from its head.

    :raise BackingFileRejected: the image names a backing file, parent or external extent.
    :raise InvalidImage: the header is malformed or uses what is not supported.
    """
    if head.startswith(b"QFI\xfb"):
        return _qcow2(head)
    if head.startswith(b"KDMV"):
        return _vmdk_sparse(head)
    if head.startswith(b"# Disk DescriptorFile"):
        raise BackingFileRejected("VMDK descriptor file: its extents are external files")
    if head[0x40:0x44] == b"\x7f\x10\xda\xbe":
        return _vdi(head)
    if head.startswith(b"conectix"):
        return _vhd(head)
    if head.startswith(b"vhdxfile"):
        return Image(ImageFormat.VHDX, None)
    return Image(
        ImageFormat.RAW,
        None,
        iso=head[0x8001:0x8006] == b"CD001",
        tar=head[257:262] == b"ustar",
    )


def _need(head: bytes, size: int, what: str) -> None:
    if len(head) < size:
        raise InvalidImage(f"{what} header truncated: {len(head)} bytes, need {size}")


def _qcow2(head: bytes) -> Image:
    _need(head, 72, "qcow2")
    version, backing_offset, _, cluster_bits, size, crypt = struct.unpack_from(">IQIIQI", head, 4)
    if version not in (2, 3):
        raise InvalidImage(f"qcow2 version {version} is not supported")
    if backing_offset:
        raise BackingFileRejected("qcow2 image has a backing file")
    if crypt:
        raise InvalidImage("encrypted qcow2 images are not supported")
    if not 9 <= cluster_bits <= 21:
        raise InvalidImage(f"qcow2 cluster_bits {cluster_bits} is out of range")
    if version == 3:
        _need(head, 80, "qcow2 v3")
        (incompatible,) = struct.unpack_from(">Q", head, 72)
        if incompatible & (1 << 2):
            raise BackingFileRejected("qcow2 image keeps its data in an external data file")
    return Image(ImageFormat.QCOW2, size)


# qemu reads an embedded descriptor from desc_offset to its first NUL, up to 1 MiB,
# whatever desc_size says; lines are read with sscanf, which skips leading whitespace;
# keys are found with strstr, anywhere in the text.
_DESCRIPTOR_MAX = 1024 * 1024
_ACCESS = re.compile(r"^\s*(RW|RDONLY|NOACCESS)\s+(\d+)\s+(\S+)", re.MULTILINE)


def _vmdk_sparse(head: bytes) -> Image:
    _need(head, 44, "vmdk")
    capacity, _, desc_offset, _desc_size = struct.unpack_from("<QQQQ", head, 12)
    if capacity == 0:
        # qemu then opens the embedded descriptor as a descriptor file: its extents are
        # other files.
        raise BackingFileRejected("vmdk image with capacity 0: qemu would open the extents"
                                  " its embedded descriptor names")
    if desc_offset:
        start = desc_offset * SECTOR
        if start >= len(head):
            raise InvalidImage("vmdk embedded descriptor lies beyond the image head")
        text = head[start : start + _DESCRIPTOR_MAX]
        end = text.find(b"\x00")
        if end < 0 and len(head) - start < _DESCRIPTOR_MAX and len(head) >= HEAD_BYTES:
            raise InvalidImage("vmdk embedded descriptor runs past the image head")
        _check_vmdk_descriptor(text[: end if end >= 0 else None].decode("latin-1"))
    return Image(ImageFormat.VMDK, capacity * SECTOR)


def _check_vmdk_descriptor(text: str) -> None:
    if "parentFileNameHint" in text:
        raise BackingFileRejected("vmdk image names a parent file")
    parent = re.search(r"parentCID\s*=\s*\"?(\w*)", text)
    if parent and parent.group(1).lower() != "ffffffff":
        raise BackingFileRejected("vmdk image has a parent (parentCID is set)")
    extents = _ACCESS.findall(text)
    if len(extents) > 1 or any(kind.upper() != "SPARSE" for _, _, kind in extents):
        raise BackingFileRejected("vmdk image has external extents")


_VDI_TYPES = {1: "dynamic", 2: "fixed"}


def _vdi(head: bytes) -> Image:
    _need(head, 0x178, "vdi")
    (image_type,) = struct.unpack_from("<I", head, 0x4C)
    if image_type == 4:
        raise BackingFileRejected("vdi image is a differencing image")
    if image_type not in _VDI_TYPES:
        raise InvalidImage(f"vdi image type {image_type} is not supported")
    (size,) = struct.unpack_from("<Q", head, 0x170)
    return Image(ImageFormat.VDI, size)


def _vhd(head: bytes) -> Image:
    _need(head, 64, "vhd")
    (size,) = struct.unpack_from(">Q", head, 48)
    (disk_type,) = struct.unpack_from(">I", head, 60)
    if disk_type == 4:
        raise BackingFileRejected("vhd image is a differencing disk")
    if disk_type not in (2, 3):
        raise InvalidImage(f"vhd disk type {disk_type} is not supported")
    return Image(ImageFormat.VPC, size)


def gzip_size_hint(tail: bytes) -> int | None:
    """A lower bound of a gzip file's decompressed size: ISIZE of its last member."""
    if len(tail) < 4:
        return None
    (isize,) = struct.unpack("<I", tail[-4:])
    return int(isize)


def xz_uncompressed_size(tail: bytes) -> int | None:
    """The decompressed size of a single-stream xz file from its index, or None.

    ``tail`` is the end of the file; the index must lie inside it.
    """
    if len(tail) < 12 or tail[-2:] != b"YZ":
        return None
    (backward,) = struct.unpack_from("<I", tail, len(tail) - 8)
    index_size = (backward + 1) * 4
    start = len(tail) - 12 - index_size
    if start < 0 or tail[start] != 0:
        return None
    pos = start + 1
    try:
        count, pos = _varint(tail, pos)
        total = 0
        for _ in range(count):
            _, pos = _varint(tail, pos)  # unpadded size
            size, pos = _varint(tail, pos)
            total += size
    except IndexError:
        return None
    return total


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    for _ in range(9):
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, pos
        shift += 7
    raise IndexError("xz varint too long")
