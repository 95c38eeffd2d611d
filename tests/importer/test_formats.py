"""Sniffing: every supported format and wrapper, hostile headers, size hints."""

from __future__ import annotations

import gzip
import lzma
import struct

import pytest

from importer.errors import BackingFileRejected, InvalidImage
from importer.formats import (
    HEAD_BYTES,
    Compression,
    ImageFormat,
    gzip_size_hint,
    sniff_compression,
    sniff_image,
    xz_uncompressed_size,
)
from tests.fixtures.images import ImageFactory


def head(path) -> bytes:  # type: ignore[no-untyped-def]
    with open(path, "rb") as f:
        return f.read(HEAD_BYTES)


@pytest.mark.parametrize(("name", "fmt"), [
    ("raw", ImageFormat.RAW), ("qcow2", ImageFormat.QCOW2), ("qcow2c", ImageFormat.QCOW2),
    ("vmdk", ImageFormat.VMDK), ("vmdk-stream", ImageFormat.VMDK), ("vdi", ImageFormat.VDI),
    ("vhd", ImageFormat.VPC), ("vhdx", ImageFormat.VHDX), ("iso", ImageFormat.RAW),
])
def test_formats(images: ImageFactory, name: str, fmt: ImageFormat) -> None:
    image = sniff_image(head(images.get(name).path))
    assert image.format is fmt
    assert image.iso == (name == "iso")
    if fmt is not ImageFormat.RAW and fmt is not ImageFormat.VHDX:
        assert image.virtual_size == images.reference_size


@pytest.mark.parametrize(("name", "compression"), [
    ("raw.gz", Compression.GZIP), ("qcow2.xz", Compression.XZ), ("raw.zst", Compression.ZSTD),
    ("raw.xz.gz", Compression.GZIP),
])
def test_wrappers(images: ImageFactory, name: str, compression: Compression) -> None:
    assert sniff_compression(head(images.get(name).path)) is compression


def test_tar_is_noticed(images: ImageFactory) -> None:
    assert sniff_image(head(images.get("archive.tar").path)).tar


@pytest.mark.parametrize("name", [
    "hostile-backing.qcow2", "hostile-backing-rel.qcow2", "hostile-datafile.qcow2",
    "hostile-flat.vmdk",
])
def test_hostile_images_are_refused_from_their_header(images: ImageFactory, name: str) -> None:
    with pytest.raises(BackingFileRejected):
        sniff_image(head(images.get(name).path))


def _qcow2(version: int = 3, *, cluster_bits: int = 16, crypt: int = 0) -> bytes:
    header = b"QFI\xfb" + struct.pack(">IQIIQI", version, 0, 0, cluster_bits, 1 << 30, crypt)
    return header.ljust(104, b"\0")


@pytest.mark.parametrize(("data", "message"), [
    (_qcow2(version=4), "version 4"),
    (_qcow2(crypt=1), "encrypted"),
    (_qcow2(cluster_bits=30), "cluster_bits"),
    (b"QFI\xfb\0\0\0\3", "truncated"),
    (b"conectix" + b"\0" * 52 + struct.pack(">I", 7), "disk type 7"),
])
def test_malformed_headers(data: bytes, message: str) -> None:
    with pytest.raises(InvalidImage, match=message):
        sniff_image(data)


def test_vhd_differencing_disk_is_a_backing_file() -> None:
    data = b"conectix" + b"\0" * 52 + struct.pack(">I", 4)
    with pytest.raises(BackingFileRejected):
        sniff_image(data)


def test_vmdk_with_parent_is_refused(images: ImageFactory) -> None:
    data = bytearray(head(images.get("vmdk").path))
    text_at = data.find(b"parentCID=ffffffff")
    data[text_at : text_at + 18] = b"parentCID=12345678"
    with pytest.raises(BackingFileRejected, match="parent"):
        sniff_image(bytes(data))


def test_gzip_hint_is_the_last_member_size() -> None:
    data = gzip.compress(b"x" * 5000)
    assert gzip_size_hint(data[-8:]) == 5000
    assert gzip_size_hint(b"ab") is None


@pytest.mark.parametrize("size", [0, 1, 1_000_000])
def test_xz_index(size: int) -> None:
    data = lzma.compress(b"\x01" * size)
    assert xz_uncompressed_size(data) == size
    assert xz_uncompressed_size(data[-12:]) is None  # footer without its index
    assert xz_uncompressed_size(b"not xz at all") is None
