"""Imports over HTTP(S) from the fault-injecting test server: every format and wrapper,
every failure reason, and what a failure leaves behind (nothing that looks like a disk)."""

from __future__ import annotations

import gc
import os
import stat
import subprocess
import time
from pathlib import Path

import pytest

from importer.checksum import parse_checksum
from importer.config import ContentType
from importer.errors import (
    BackingFileRejected,
    ChecksumMismatch,
    InvalidImage,
    NotADiskImage,
    NotFound,
    TooSmall,
    TransferError,
    Unauthorized,
)
from tests.fixtures.httpserver import Faults, HttpServer, Request
from tests.fixtures.images import (
    ARCHIVE_FILES,
    SECRET_MARKER,
    ImageFactory,
    allocated_bytes,
    build_patterned_raw,
    compare,
    sha256,
)
from tests.importer.conftest import ImportFn, open_connections_to

MiB = 1024 * 1024
GiB = 1024 * MiB
GOOD = ["raw", "qcow2", "qcow2c", "vmdk", "vmdk-stream", "vdi", "vhd", "vhdx", "iso",
        "raw.gz", "raw.xz", "raw.zst", "qcow2.gz", "qcow2.xz", "qcow2.zst", "raw.xz.gz",
        "qcow2.gz.xz", "vmdk.zst", "iso.gz"]


@pytest.mark.parametrize("name", GOOD)
def test_every_format_and_wrapper(images: ImageFactory, http_server: HttpServer,
                                  do_import: ImportFn, tmp_path: Path, name: str) -> None:
    image = images.get(name)
    dest = tmp_path / "disk.img"
    outcome = do_import(http_server.publish(image.path), dest)
    assert outcome.error is None, outcome.error
    assert compare(image.expected, dest)
    # Sparse: the reference holds far fewer data bytes than its size, and so does the copy.
    assert allocated_bytes(dest) <= allocated_bytes(image.expected) + MiB
    assert outcome.result is not None
    expected_route = {"raw": "stream", "iso": "stream"}.get(name.split(".")[0])
    if expected_route is None:
        expected_route = "scratch-convert" if "." in name else "nbd-convert"
    assert outcome.result.route == expected_route


def test_resized_to_usable_size(images: ImageFactory, http_server: HttpServer,
                                do_import: ImportFn, tmp_path: Path) -> None:
    dest = tmp_path / "disk.img"
    outcome = do_import(http_server.publish(images.get("qcow2").path), dest,
                        image_size=64 * MiB)
    assert outcome.exit_code == 0
    usable = (64 * MiB * 94 // 100) // MiB * MiB  # (1 - 0.06) * request, aligned down
    assert dest.stat().st_size == usable
    assert compare(images.reference, dest)


def test_checksum_verified(images: ImageFactory, http_server: HttpServer,
                           do_import: ImportFn, tmp_path: Path) -> None:
    image = images.get("raw.gz")
    dest = tmp_path / "disk.img"
    checksum = parse_checksum(f"sha256:{sha256(image.path)}")
    outcome = do_import(http_server.publish(image.path), dest, checksum=checksum)
    assert outcome.result is not None and outcome.result.checksum == str(checksum)
    assert compare(image.expected, dest)


@pytest.mark.parametrize("name", ["raw.gz", "qcow2", "archive.tar"])
def test_checksum_mismatch_leaves_no_disk(images: ImageFactory, http_server: HttpServer,
                                          do_import: ImportFn, tmp_path: Path,
                                          name: str) -> None:
    volume = tmp_path / "volume"
    volume.mkdir()
    dest = volume / "disk.img"
    wrong = parse_checksum("md5:" + "0" * 32)
    content = ContentType.ARCHIVE if name.endswith(".tar") else ContentType.KUBEVIRT
    outcome = do_import(http_server.publish(images.get(name).path), dest, checksum=wrong,
                        content_type=content)
    assert isinstance(outcome.error, ChecksumMismatch)
    assert outcome.exit_code == 2
    assert not dest.exists()
    assert list(volume.iterdir()) == []
    assert b'"reason": "ChecksumMismatch"' in (tmp_path / "termination-log").read_bytes()


def test_too_small_fails_before_the_transfer(image_factory: ImageFactory,
                                             http_server: HttpServer, do_import: ImportFn,
                                             tmp_path: Path) -> None:
    image = image_factory.oversized_qcow2(100 * 1024 * MiB)
    url = http_server.publish(image.path)
    started = time.monotonic()
    outcome = do_import(url, tmp_path / "disk.img", image_size=1024 * MiB)
    assert isinstance(outcome.error, TooSmall)
    assert "DataVolume too small to contain image: virtual size 107374182400 bytes" \
        in outcome.error.message
    assert time.monotonic() - started < 5
    sent = sum(r.sent or 0 for r in http_server.requests)
    assert sent <= 64 * 1024  # only the head was read


def test_raw_too_small_by_content_length(images: ImageFactory, http_server: HttpServer,
                                         do_import: ImportFn, tmp_path: Path) -> None:
    outcome = do_import(http_server.publish(images.reference), tmp_path / "d.img",
                        image_size=8 * MiB)
    assert isinstance(outcome.error, TooSmall)
    assert len(http_server.requests) == 1


def test_gzip_too_small_from_its_trailer(image_factory: ImageFactory, http_server: HttpServer,
                                         do_import: ImportFn, tmp_path: Path) -> None:
    bomb = image_factory.gzip_bomb(256 * MiB)
    outcome = do_import(http_server.publish(bomb.path), tmp_path / "d.img", image_size=64 * MiB)
    assert isinstance(outcome.error, TooSmall)
    assert not (tmp_path / "d.img").exists()


def test_gzip_bomb_without_size_hint_is_invalid(image_factory: ImageFactory,
                                                http_server: HttpServer, do_import: ImportFn,
                                                tmp_path: Path) -> None:
    bomb = image_factory.gzip_bomb(256 * MiB)
    name = http_server.publish(bomb.path).rsplit("/", 1)[1]
    http_server.set_faults(name, Faults(no_range=True))  # no trailer read: only the bound
    outcome = do_import(http_server.url_for(name), tmp_path / "d.img", image_size=64 * MiB)
    assert isinstance(outcome.error, InvalidImage)
    assert "decompressed data exceeds" in outcome.error.message
    assert not (tmp_path / "d.img").exists()


@pytest.mark.parametrize("expand_to", [256 * MiB, 4 * GiB], ids=["idle", "in-flight"])
def test_an_import_stopped_mid_stream_leaves_no_connection_open(
        image_factory: ImageFactory, http_server: HttpServer, do_import: ImportFn,
        tmp_path: Path, expand_to: int) -> None:
    """An error raised by what consumes the stream (here the decompression bound) leaves
    the stream's generator unfinished, and the error's traceback holds it. Its connection
    stayed open until a garbage collection found it, which then warned of an unclosed
    socket in whatever test it ran (a rare CI failure). Closing the source closes it,
    whether the body had all arrived (a 256 KiB bomb: the connection idles in its pool,
    which ``Session.close`` does not close) or not (4 MiB: still in the response)."""
    bomb = image_factory.gzip_bomb(expand_to)
    name = http_server.publish(bomb.path).rsplit("/", 1)[1]
    http_server.set_faults(name, Faults(no_range=True))
    gc.collect()  # no earlier test's sockets
    gc.disable()  # nothing collected behind the test's back
    try:
        outcome = do_import(http_server.url_for(name), tmp_path / "d.img",
                            image_size=64 * MiB)
        assert isinstance(outcome.error, InvalidImage), outcome.error
        assert open_connections_to(http_server.port) == []
    finally:
        gc.enable()


@pytest.mark.parametrize("name", ["hostile-backing.qcow2", "hostile-backing-rel.qcow2",
                                  "hostile-datafile.qcow2", "hostile-flat.vmdk"])
def test_hostile_images_are_rejected(images: ImageFactory, http_server: HttpServer,
                                     do_import: ImportFn, tmp_path: Path, name: str) -> None:
    dest = tmp_path / "disk.img"
    outcome = do_import(http_server.publish(images.get(name).path), dest)
    assert isinstance(outcome.error, BackingFileRejected)
    assert not dest.exists()


def test_truncated_qcow2_is_invalid(images: ImageFactory, http_server: HttpServer,
                                    do_import: ImportFn, tmp_path: Path) -> None:
    dest = tmp_path / "disk.img"
    outcome = do_import(http_server.publish(images.get("truncated.qcow2").path), dest)
    assert outcome.error is not None and not outcome.error.retryable
    assert not dest.exists()


def test_not_found(http_server: HttpServer, do_import: ImportFn, tmp_path: Path) -> None:
    outcome = do_import(http_server.url_for("missing.img"), tmp_path / "d.img")
    assert isinstance(outcome.error, NotFound)
    assert "expected status code 200, got 404" in outcome.error.message
    assert len(http_server.requests) == 1  # never retried


def test_unauthorized_without_and_with_wrong_credentials(images: ImageFactory,
                                                         http_server: HttpServer,
                                                         do_import: ImportFn,
                                                         tmp_path: Path) -> None:
    url = http_server.publish(images.get("qcow2").path, "private.qcow2")
    http_server.set_faults("private.qcow2", Faults(basic_auth=("user", "s3cret-pw")))
    for creds in ({}, {"access_key_id": "user", "secret_key": "wrong"}):
        outcome = do_import(url, tmp_path / "d.img", **creds)
        assert isinstance(outcome.error, Unauthorized)
    assert len(http_server.requests) == 2
    outcome = do_import(url, tmp_path / "d.img", access_key_id="user", secret_key="s3cret-pw")
    assert outcome.exit_code == 0
    assert compare(images.reference, tmp_path / "d.img")
    assert b"s3cret-pw" not in outcome.termination


def test_extra_headers_are_sent(images: ImageFactory, http_server: HttpServer,
                                do_import: ImportFn, tmp_path: Path) -> None:
    url = http_server.publish(images.get("qcow2").path, "h.qcow2")
    http_server.set_faults("h.qcow2", Faults(required_headers=(("X-Token", "abc"),)))
    assert isinstance(do_import(url, tmp_path / "d.img").error, Unauthorized)
    outcome = do_import(url, tmp_path / "d.img", extra_headers=(("X-Token", "abc"),))
    assert outcome.exit_code == 0, outcome.error


@pytest.mark.parametrize("name", ["raw", "raw.gz"])
def test_dropped_connection_resumes_with_range(images: ImageFactory, http_server: HttpServer,
                                               do_import: ImportFn, tmp_path: Path,
                                               name: str) -> None:
    image = images.get(name)
    url = http_server.publish(image.path, "drop-" + name)
    http_server.set_faults("drop-" + name, Faults(drop_after=image.size // 3, drop_times=2))
    outcome = do_import(url, tmp_path / "d.img")
    assert outcome.exit_code == 0, outcome.error
    assert compare(image.expected, tmp_path / "d.img")
    resumed = [r.range for r in http_server.requests_for("drop-" + name)][1:]
    assert any(r and not r.startswith("bytes=0-") for r in resumed), resumed


def test_dropped_connection_without_range_restarts(images: ImageFactory,
                                                   http_server: HttpServer,
                                                   do_import: ImportFn, tmp_path: Path) -> None:
    image = images.get("raw.gz")
    url = http_server.publish(image.path, "nr.gz")
    http_server.set_faults("nr.gz", Faults(no_range=True, drop_after=image.size // 2))
    outcome = do_import(url, tmp_path / "d.img")
    assert outcome.exit_code == 0, outcome.error
    assert compare(image.expected, tmp_path / "d.img")


def test_nbd_route_survives_drops(images: ImageFactory, http_server: HttpServer,
                                  do_import: ImportFn, tmp_path: Path) -> None:
    image = images.get("qcow2")
    url = http_server.publish(image.path, "d.qcow2")
    http_server.set_faults("d.qcow2", Faults(drop_after=1000, drop_times=3))
    outcome = do_import(url, tmp_path / "d.img")
    assert outcome.exit_code == 0, outcome.error
    assert compare(image.expected, tmp_path / "d.img")


def test_503_is_retried_then_succeeds(images: ImageFactory, http_server: HttpServer,
                                      do_import: ImportFn, tmp_path: Path) -> None:
    url = http_server.publish(images.get("raw.xz").path, "busy.xz")
    http_server.set_faults("busy.xz", Faults(status=503, status_times=3))
    outcome = do_import(url, tmp_path / "d.img")
    assert outcome.exit_code == 0, outcome.error
    assert len(http_server.requests_for("busy.xz")) >= 4


def test_503_forever_is_a_retryable_failure(images: ImageFactory, http_server: HttpServer,
                                            do_import: ImportFn, tmp_path: Path) -> None:
    url = http_server.publish(images.get("raw").path, "down.img")
    http_server.set_faults("down.img", Faults(status=503))
    outcome = do_import(url, tmp_path / "d.img", retry_attempts=3)
    assert isinstance(outcome.error, TransferError)
    assert outcome.exit_code == 1
    assert len(http_server.requests_for("down.img")) == 3
    assert b'"retryable": true' in outcome.termination


@pytest.mark.parametrize("faults", [
    Faults(no_range=True), Faults(no_length=True), Faults(no_head=True),
], ids=["no-range", "no-length", "no-head"])
def test_servers_that_lack_features(images: ImageFactory, http_server: HttpServer,
                                    do_import: ImportFn, tmp_path: Path,
                                    faults: Faults) -> None:
    image = images.get("qcow2")
    url = http_server.publish(image.path, "x.qcow2")
    http_server.set_faults("x.qcow2", faults)
    outcome = do_import(url, tmp_path / "d.img")
    assert outcome.exit_code == 0, outcome.error
    assert compare(image.expected, tmp_path / "d.img")
    assert outcome.result is not None
    assert outcome.result.route == ("scratch-convert" if faults.no_range else "nbd-convert")


def test_redirect_is_followed(images: ImageFactory, http_server: HttpServer,
                              do_import: ImportFn, tmp_path: Path) -> None:
    http_server.publish(images.get("vmdk").path)
    outcome = do_import(http_server.redirect_url_for("vmdk"), tmp_path / "d.img")
    assert outcome.exit_code == 0, outcome.error
    assert compare(images.reference, tmp_path / "d.img")


def test_https_with_the_cert_dir(images: ImageFactory, https_server: HttpServer,
                                 do_import: ImportFn, tmp_path: Path) -> None:
    url = https_server.publish(images.get("qcow2").path)
    outcome = do_import(url, tmp_path / "d.img")
    assert outcome.error is not None and "TLS verification" in outcome.error.message
    outcome = do_import(url, tmp_path / "d.img", cert_dir=https_server.cert_dir)
    assert outcome.exit_code == 0, outcome.error
    assert compare(images.reference, tmp_path / "d.img")


def test_archive_is_extracted(images: ImageFactory, http_server: HttpServer,
                              do_import: ImportFn, tmp_path: Path) -> None:
    volume = tmp_path / "volume"
    volume.mkdir()
    outcome = do_import(http_server.publish(images.get("archive.tar").path), volume,
                        content_type=ContentType.ARCHIVE)
    assert outcome.exit_code == 0, outcome.error
    for name, data in ARCHIVE_FILES.items():
        assert (volume / name).read_bytes() == data


def test_archive_cannot_escape_the_volume(images: ImageFactory, http_server: HttpServer,
                                          do_import: ImportFn, tmp_path: Path) -> None:
    volume = tmp_path / "volume"
    volume.mkdir()
    outcome = do_import(http_server.publish(images.get("hostile-traversal.tar").path), volume,
                        content_type=ContentType.ARCHIVE)
    assert outcome.error is not None
    assert not (tmp_path / "escaped.txt").exists()
    assert not Path("/tmp/rootdisk-absolute.txt").exists()
    assert not Path("/etc/rootdisk-through-link.txt").exists()
    assert list(volume.iterdir()) == []


def test_archive_needs_a_tar(images: ImageFactory, http_server: HttpServer,
                             do_import: ImportFn, tmp_path: Path) -> None:
    outcome = do_import(http_server.publish(images.get("qcow2").path), tmp_path,
                        content_type=ContentType.ARCHIVE)
    assert isinstance(outcome.error, InvalidImage)
    assert "tar" in outcome.error.message


def test_hostile_output_never_holds_the_secret(images: ImageFactory, http_server: HttpServer,
                                               do_import: ImportFn, tmp_path: Path) -> None:
    for name in ("hostile-backing.qcow2", "hostile-flat.vmdk", "hostile-datafile.qcow2"):
        dest = tmp_path / f"{name}.img"
        do_import(http_server.publish(images.get(name).path), dest)
        assert not dest.exists() or SECRET_MARKER not in dest.read_bytes()


@pytest.mark.parametrize("name", ["raw", "qcow2"])  # the writer, qemu-img
@pytest.mark.parametrize("kind", ["symlink", "fifo"])
def test_a_destination_that_is_no_disk_is_refused_untouched(
        images: ImageFactory, http_server: HttpServer, do_import: ImportFn, tmp_path: Path,
        name: str, kind: str) -> None:
    """The attack: a volume whose disk.img is a symbolic link to another file (truncated,
    written, then wiped after a failure, by the importer) or a FIFO (the import hangs).
    Refused before a byte is fetched; the link, its target and the FIFO stay as they were."""
    outside = tmp_path / "outside"
    outside.write_bytes(b"victim\n")
    volume = tmp_path / "volume"
    volume.mkdir()
    dest = volume / "disk.img"
    if kind == "symlink":
        dest.symlink_to(outside)
    else:
        os.mkfifo(dest)
    http_server.clear_requests()
    outcome = do_import(http_server.publish(images.get(name).path), dest)
    assert isinstance(outcome.error, NotADiskImage), outcome.error
    what = "a symbolic link" if kind == "symlink" else "a FIFO"
    assert f"the destination {dest} is {what}" in outcome.error.message
    assert outside.read_bytes() == b"victim\n"
    assert dest.is_symlink() if kind == "symlink" else stat.S_ISFIFO(os.lstat(dest).st_mode)
    assert http_server.requests == []


def _most_at_once(requests: list[Request]) -> int:
    """The most GETs with a body the server was answering at the same moment."""
    spans = [(r.at, r.done) for r in requests if r.method == "GET" and r.done is not None]
    return max((sum(1 for a, b in spans if a <= at < b) for at, _ in spans), default=0)


def _large_qcow2(directory: Path) -> tuple[Path, Path]:
    """(raw, qcow2): 64 MiB virtual, half data, large enough for the rate measurement."""
    raw, image = directory / "big.raw", directory / "big.qcow2"
    build_patterned_raw(raw, size=64 * MiB, data_ratio=0.5, block=MiB)
    subprocess.run(["qemu-img", "convert", "-q", "-f", "raw", "-O", "qcow2", str(raw),
                    str(image)], check=True)
    return raw, image


@pytest.mark.parametrize(("faults", "at_once"), [
    # A CDN-like cap per connection: one connection measured, then two, and the image
    # read as ranges side by side (the server answers several at once).
    pytest.param(Faults(connection_rate=16 * MiB), range(4, 100), id="capped-in-parallel"),
    # A link shared by every connection: two are no faster than one, so nbdkit's one
    # stream reads it (the measurement's two reads are the most at once).
    pytest.param(Faults(rate=32 * MiB), range(1, 3), id="full-link-one-stream"),
])
def test_ranges_side_by_side_only_where_connections_add_up(
        http_server: HttpServer, do_import: ImportFn, tmp_path: Path, faults: Faults,
        at_once: range) -> None:
    raw, image = _large_qcow2(tmp_path)
    url = http_server.publish(image, "big.qcow2")
    http_server.set_faults("big.qcow2", faults)
    outcome = do_import(url, tmp_path / "big.img")
    assert outcome.exit_code == 0, outcome.error
    assert compare(raw, tmp_path / "big.img")
    assert _most_at_once(http_server.requests_for("big.qcow2")) in at_once
