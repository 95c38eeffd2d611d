"""The generated images hold what they claim: same content in every format and wrapper."""

from __future__ import annotations

import gzip
import lzma
import shutil
import struct
import subprocess
import tarfile
from pathlib import Path

import pytest
import zstandard

from tests.fixtures.images import (
    ARCHIVE_FILES,
    GOOD_IMAGES,
    SECRET_MARKER,
    GiB,
    Image,
    ImageFactory,
    KiB,
    MiB,
    allocated_bytes,
    compare,
    convert,
    md5,
    qemu_info,
    sha256,
)


def _unwrap(image: Image, dest: Path) -> Path:
    """Peel the wrappers off, outermost first, with the standard libraries."""
    current = image.path
    for i, wrapper in enumerate(reversed(image.wrappers)):
        out = dest / f"layer{i}"
        with current.open("rb") as fin, out.open("wb") as fout:
            if wrapper == "gz":
                with gzip.GzipFile(fileobj=fin) as gz:
                    shutil.copyfileobj(gz, fout)
            elif wrapper == "xz":
                with lzma.LZMAFile(fin) as xz:
                    shutil.copyfileobj(xz, fout)
            else:
                zstandard.ZstdDecompressor().copy_stream(fin, fout)
        current = out
    return current


@pytest.mark.parametrize("name", GOOD_IMAGES)
def test_every_image_converts_back_to_the_reference(
    images: ImageFactory, name: str, tmp_path: Path
) -> None:
    image = images.get(name)
    inner = _unwrap(image, tmp_path)
    info = qemu_info(inner, image.qemu_format)
    assert info["format"] == image.qemu_format
    assert info["virtual-size"] == images.reference_size
    out = tmp_path / "out.raw"
    convert(inner, image.qemu_format, out, ["-O", "raw"])
    assert compare(image.expected, out)
    assert allocated_bytes(image.path) < images.reference_size // 2


def test_reference_layout(images: ImageFactory) -> None:
    ref = images.reference
    data = ref.read_bytes()
    assert len(data) == 16 * MiB
    assert data[:MiB] == b"\x5a" * MiB
    assert data[MiB : 3 * MiB] == bytes(2 * MiB)  # a hole
    assert data[4 * MiB + 4 * KiB : 4 * MiB + 8 * KiB] == b"\xc3" * 4 * KiB
    assert data[-512 * KiB :] == b"\xee" * 512 * KiB
    assert data[-MiB : -512 * KiB].count(0) < 10 * KiB  # random data in the last MiB
    assert allocated_bytes(ref) < 4 * MiB  # sparse: holes are not allocated
    assert images.get("iso").path.read_bytes()[32768:32774] == b"\x01CD001"
    assert allocated_bytes(images.get("iso").path) < 4 * MiB


def test_images_are_deterministic(images: ImageFactory, image_factory: ImageFactory) -> None:
    for name in ("raw", "raw.gz", "raw.zst", "qcow2"):
        assert sha256(images.get(name).path) == sha256(image_factory.get(name).path), name


def test_checksums(images: ImageFactory) -> None:
    image = images.get("qcow2.xz")
    assert image.sha256 == sha256(image.path)
    assert image.md5 == md5(image.path)
    assert image.checksum("sha512").startswith("sha512:")
    assert len(image.checksum("sha1")) == len("sha1:") + 40


def test_compare_detects_a_difference(images: ImageFactory, tmp_path: Path) -> None:
    copy = tmp_path / "copy.raw"
    convert(images.reference, "raw", copy, ["-O", "raw"])
    assert compare(images.reference, copy)
    with copy.open("r+b") as f:
        f.seek(10 * MiB)
        f.write(b"x")
    assert not compare(images.reference, copy)
    longer = tmp_path / "longer.raw"
    convert(images.reference, "raw", longer, ["-O", "raw"])
    with longer.open("r+b") as f:
        f.truncate(32 * MiB)  # a resized disk: the zero tail still compares equal
    assert compare(images.reference, longer)
    with pytest.raises(RuntimeError, match="qemu-img compare failed"):
        compare(images.reference, tmp_path / "missing.raw")


def test_unknown_name_is_refused(images: ImageFactory) -> None:
    with pytest.raises(ValueError, match=r"unknown image name 'qcow2\.rar'"):
        images.get("qcow2.rar")
    with pytest.raises(ValueError, match="unknown image name 'floppy'"):
        images.get("floppy")


def test_hostile_backing_files(images: ImageFactory) -> None:
    absolute = qemu_info(images.get("hostile-backing.qcow2").path, "qcow2")
    assert absolute["backing-filename"] == str(images.secret.resolve())
    assert absolute["backing-filename-format"] == "raw"
    relative = qemu_info(images.get("hostile-backing-rel.qcow2").path, "qcow2")
    assert relative["backing-filename"] == "secret.raw"
    assert images.secret.read_bytes().startswith(SECRET_MARKER)


def test_hostile_data_file(images: ImageFactory) -> None:
    info = qemu_info(images.get("hostile-datafile.qcow2").path, "qcow2")
    assert info["format-specific"]["data"]["data-file"] == str(images.secret.resolve())


def test_hostile_flat_vmdk_points_at_passwd(images: ImageFactory, tmp_path: Path) -> None:
    image = images.get("hostile-flat.vmdk")
    info = qemu_info(image.path, "vmdk")
    extents = info["format-specific"]["data"]["extents"]
    assert {e["filename"] for e in extents} == {"/etc/passwd"}
    out = tmp_path / "leak.raw"
    convert(image.path, "vmdk", out, ["-O", "raw"])  # why it must be refused:
    assert out.read_bytes().startswith(Path("/etc/passwd").read_bytes()[:32])


def test_truncated_qcow2_is_corrupt_but_converts_silently(
    images: ImageFactory, tmp_path: Path
) -> None:
    """Why an importer must check: qemu-img reads past EOF as zeros and exits 0."""
    image = images.get("truncated.qcow2")
    assert image.size < images.get("qcow2").size
    check = subprocess.run(
        ["qemu-img", "check", "-f", "qcow2", str(image.path)],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert check.returncode == 2, check.stdout  # 2: corruptions found
    out = tmp_path / "out.raw"
    convert(image.path, "qcow2", out, ["-O", "raw"])
    assert not compare(images.reference, out)


def test_oversized_qcow2(images: ImageFactory) -> None:
    image = images.oversized_qcow2(2 * GiB)
    assert qemu_info(image.path, "qcow2")["virtual-size"] == 2 * GiB
    assert image.size < MiB


def test_gzip_bomb(images: ImageFactory, image_factory: ImageFactory) -> None:
    bomb = images.get("bomb.gz")
    assert bomb.size < 2 * MiB
    assert struct.unpack("<I", bomb.path.read_bytes()[-4:])[0] == GiB  # ISIZE
    small = image_factory.gzip_bomb(expand_to=32 * MiB)
    with gzip.open(small.path) as f:
        total = 0
        while chunk := f.read(MiB):
            assert chunk == b"\x55" * len(chunk)
            total += len(chunk)
    assert total == 32 * MiB  # a valid stream, CRC and length checked by gzip
    with pytest.raises(ValueError, match="multiple of"):
        image_factory.gzip_bomb(expand_to=MiB + 1)


def test_archive_tar(images: ImageFactory, tmp_path: Path) -> None:
    with tarfile.open(images.get("archive.tar").path) as tar:
        names = {m.name for m in tar.getmembers() if m.isfile()}
        assert names == set(ARCHIVE_FILES)
        tar.extractall(tmp_path, filter="data")
    for name, data in ARCHIVE_FILES.items():
        assert (tmp_path / name).read_bytes() == data
    assert images.get("archive.tar.gz").wrappers == ("gz",)


def test_hostile_tar(images: ImageFactory) -> None:
    with tarfile.open(images.get("hostile-traversal.tar").path) as tar:
        members = {m.name: m for m in tar.getmembers()}
    assert "../escaped.txt" in members
    assert "/tmp/rootdisk-absolute.txt" in members
    assert members["escape-link"].issym()
    assert members["escape-link"].linkname == "/etc"


def test_reference_size_is_validated(tmp_path: Path) -> None:
    factory = ImageFactory(tmp_path, reference_size=5 * MiB)
    with pytest.raises(ValueError, match="reference size must be"):
        factory.get("raw")
