"""One import, one object: a server that swaps the image between the importer's requests
never gets a host file into the disk, and an honest change is ``SourceChanged``.

The attack: answer the first requests with a clean qcow2 and the later ones with a qcow2
whose backing file is a host file. Before the fix, the qcow2 route opened the URL again for
each of ``qemu-img info``, ``check`` and ``convert`` (each through a new nbdkit curl
connection), nothing tied those requests to the object probed, and the host file ended up
in the disk of a ``Completed`` import. Every request number is tried here.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from importer.errors import (
    BackingFileRejected,
    InvalidImage,
    SourceChanged,
)
from importer.formats import ImageFormat
from importer.qemu_img import convert, image_spec, info
from importer.sources.s3 import S3Source
from tests.fixtures.httpserver import Faults, HttpServer
from tests.fixtures.s3server import S3Server
from tests.importer.conftest import ImportFn
from vocab import sources

MiB = 1024 * 1024
MARKER = b"HOST-SECRET-0123456789abcdef"
VIRTUAL = 8 * MiB
ETAGS = ('"clean-v1"', '"evil-v2"')
DATES = ("Tue, 14 Nov 2023 22:13:20 GMT", "Wed, 15 Nov 2023 22:13:20 GMT")


def _qemu_img(*args: str) -> None:
    subprocess.run(["qemu-img", *args], check=True, capture_output=True, timeout=60)


@pytest.fixture
def host_secret(tmp_path: Path) -> Path:
    """A file standing for /etc/shadow: what must never reach a disk."""
    secret = tmp_path / "host-secret"
    secret.write_bytes(MARKER * (VIRTUAL // len(MARKER) + 1))
    return secret


@pytest.fixture
def clean(tmp_path: Path) -> Path:
    raw = tmp_path / "clean.raw"
    with raw.open("wb") as f:
        for block in range(VIRTUAL // MiB):
            f.write((b"clean-%02d " % block) * (MiB // 9) + b"\0" * (MiB % 9) if block % 2
                    else b"\0" * MiB)
    image = tmp_path / "clean.qcow2"
    _qemu_img("convert", "-f", "raw", "-O", "qcow2", str(raw), str(image))
    return image


@pytest.fixture
def evil(tmp_path: Path, host_secret: Path, clean: Path) -> Path:
    """A qcow2 of the same virtual size whose clusters all come from the host file,
    padded to the clean image's length (so its size gives nothing away)."""
    image = tmp_path / "evil.qcow2"
    _qemu_img("create", "-f", "qcow2", "-b", str(host_secret), "-F", "raw", str(image),
              str(VIRTUAL))
    with image.open("ab") as f:
        f.truncate(clean.stat().st_size)
    return image


def _disk_leaks(dest: Path) -> bool:
    return dest.exists() and MARKER[:16] in dest.read_bytes()


def _requests_of_a_clean_run(server: HttpServer, name: str, do_import: ImportFn,
                             dest: Path, faults: Faults) -> int:
    server.set_faults(name, faults)
    outcome = do_import(server.url_for(name), dest)
    assert outcome.exit_code == 0, outcome.error
    count = len(server.requests_for(name))
    dest.unlink()
    server.clear_requests()
    return count


@pytest.mark.parametrize("validators", [True, False], ids=["validators", "no-validators"])
def test_a_swap_at_any_request_never_puts_a_host_file_into_the_disk(
        http_server: HttpServer, do_import: ImportFn, tmp_path: Path, clean: Path,
        evil: Path, validators: bool) -> None:
    name = "swapped.qcow2"
    url = http_server.publish(clean, name)
    pair = {"etag": ETAGS, "last_modified": DATES} if validators else {}
    dest = tmp_path / "disk.img"
    total = _requests_of_a_clean_run(http_server, name, do_import, dest,
                                     Faults(swap_after=10**6, **pair))  # type: ignore[arg-type]
    assert total >= 2  # the probe, then the reads behind qemu-img
    outcomes, leaks = [], []
    for n in range(total + 1):
        http_server.set_faults(name, Faults(swap_after=n, swap_to=evil, **pair))  # type: ignore[arg-type]
        outcomes.append(do_import(url, dest))
        if _disk_leaks(dest):
            leaks.append(n)
        dest.unlink(missing_ok=True)
    assert leaks == [], f"host file in the disk after a swap at these requests: {leaks}"
    for n, outcome in enumerate(outcomes):
        if n == 0:  # the probe itself sees the evil header: refused from it
            assert isinstance(outcome.error, BackingFileRejected), (n, outcome.error)
        elif n >= total:  # no request came after the swap point
            assert outcome.exit_code == 0, (n, outcome.error)
        elif validators:  # every answer after the probe is checked against it
            assert isinstance(outcome.error, SourceChanged), (n, outcome.error)
        else:
            # No validators: the header qemu-img sees is the probe's own copy, so the
            # rest of the other object is only data (zeros or garbage), never a file.
            assert outcome.error is None or isinstance(
                outcome.error, SourceChanged | InvalidImage), (n, outcome.error)


@pytest.mark.parametrize("changed", ["etag", "last_modified"])
@pytest.mark.parametrize("image", ["qcow2", "raw"])
def test_a_changed_validator_alone_is_source_changed(
        http_server: HttpServer, do_import: ImportFn, tmp_path: Path, clean: Path,
        changed: str, image: str) -> None:
    """The same bytes under a new ETag (or Last-Modified) after the probe: SourceChanged
    on the nbd route and on the stream route alike."""
    path = clean if image == "qcow2" else tmp_path / "clean.raw"
    name = f"changing.{image}"
    url = http_server.publish(path, name)
    same = {"etag": (ETAGS[0], ETAGS[0]), "last_modified": (DATES[0], DATES[0])}
    same[changed] = ETAGS if changed == "etag" else DATES
    http_server.set_faults(name, Faults(swap_after=1, **same))  # type: ignore[arg-type]
    outcome = do_import(url, tmp_path / "disk.img")
    assert isinstance(outcome.error, SourceChanged), outcome.error
    header = "ETag" if changed == "etag" else "Last-Modified"
    assert f"{header} was" in str(outcome.error)
    assert json.loads(outcome.termination)["reason"] == "SourceChanged"
    assert not (tmp_path / "disk.img").exists()


def test_a_stream_without_validators_must_start_with_the_bytes_probed(
        http_server: HttpServer, do_import: ImportFn, tmp_path: Path) -> None:
    """Raw streams after a separate probe: a server without validators that sends other
    bytes to the stream than to the probe is caught on the head it changed."""
    first, second = tmp_path / "a.raw", tmp_path / "b.raw"
    first.write_bytes(b"A" * MiB)
    second.write_bytes(b"B" * MiB)
    url = http_server.publish(first, "stream.raw")
    http_server.set_faults("stream.raw", Faults(swap_after=1, swap_to=second))
    outcome = do_import(url, tmp_path / "disk.img")
    assert isinstance(outcome.error, SourceChanged), outcome.error
    assert not (tmp_path / "disk.img").exists()


def test_qemu_img_opens_no_backing_file_whatever_the_header_says(
        tmp_path: Path, evil: Path) -> None:
    """Defence in depth, in the command itself: even an image whose backing file slipped
    past every check is converted without opening it."""
    out = tmp_path / "out.raw"
    convert(str(evil), ImageFormat.QCOW2, out, virtual_size=VIRTUAL, dest_is_block=False,
            dest_is_zero=False, preallocate=False, direct_io=False)
    assert out.stat().st_size == VIRTUAL and not _disk_leaks(out)
    spec = json.loads(image_spec(str(evil), ImageFormat.QCOW2).removeprefix("json:"))
    assert spec == {"driver": "qcow2", "backing": None,
                    "file": {"driver": "file", "filename": str(evil)}}
    with pytest.raises(BackingFileRejected):  # and info still refuses it by its header
        info(str(evil), ImageFormat.QCOW2)


def test_a_corrupt_compressed_cluster_is_a_permanent_invalid_image(
        http_server: HttpServer, do_import: ImportFn, tmp_path: Path) -> None:
    """qemu-img check walks metadata only; a compressed cluster that does not inflate
    fails the convert with EIO. Reading it again gives the same: InvalidImage, not a
    retryable TransferError (a DataVolume would restart its importer for ever)."""
    raw = tmp_path / "text.raw"
    raw.write_bytes(b"".join(b"line %08d of compressible text\n" % i for i in range(60000)))
    image = tmp_path / "compressed.qcow2"
    _qemu_img("convert", "-c", "-f", "raw", "-O", "qcow2", str(raw), str(image))
    data = bytearray(image.read_bytes())
    assert len(data) < raw.stat().st_size // 4  # its clusters are compressed
    start = len(data) - 48 * 1024  # inside the compressed data, after every table
    data[start:start + 16 * 1024] = b"\xff" * 16 * 1024
    image.write_bytes(bytes(data))
    url = http_server.publish(image, "corrupt.qcow2")
    outcome = do_import(url, tmp_path / "disk.img")
    assert isinstance(outcome.error, InvalidImage), outcome.error
    message = json.loads(outcome.termination)
    assert message["reason"] == "InvalidImage" and message["retryable"] is False
    assert not (tmp_path / "disk.img").exists()


def test_an_s3_object_replaced_mid_import_is_source_changed(
        s3_server: S3Server, s3_bucket: str, tmp_path: Path, clean: Path, evil: Path,
        monkeypatch: pytest.MonkeyPatch, do_import: ImportFn) -> None:
    """The object is overwritten (a new ETag) after the importer's first ranged read
    past the probe: every later read is refused, and no byte of the host file lands."""
    url = s3_server.put_file(s3_bucket, "golden.qcow2", clean)
    reads = {"n": 0}
    original = S3Source.read_range

    def replace_after_first_read(self: S3Source, start: int, length: int) -> bytes:
        reads["n"] += 1
        if reads["n"] == 2:
            s3_server.put_file(s3_bucket, "golden.qcow2", evil)
        return original(self, start, length)

    monkeypatch.setattr(S3Source, "read_range", replace_after_first_read)
    dest = tmp_path / "disk.img"
    outcome = do_import(url, dest, access_key_id=s3_server.access_key,
                        secret_key=s3_server.secret_key,
                        options=((sources.S3_ENDPOINT, s3_server.endpoint),))
    assert isinstance(outcome.error, SourceChanged), outcome.error
    assert not _disk_leaks(dest) and not dest.exists()


def test_nbdkit_reads_carry_the_probed_validators_as_preconditions(
        http_server: HttpServer, do_import: ImportFn, tmp_path: Path, clean: Path) -> None:
    """On the direct route nbdkit's curl plugin reads the URL itself; each of its requests
    names the probed object (If-Match, If-Unmodified-Since), so a server that honours
    them answers 412 rather than another object's bytes."""
    url = http_server.publish(clean, "pinned.qcow2")
    http_server.set_faults("pinned.qcow2", Faults(swap_after=10**6, etag=ETAGS,
                                                  last_modified=DATES))
    outcome = do_import(url, tmp_path / "disk.img")
    assert outcome.exit_code == 0, outcome.error
    by_curl = [r for r in http_server.requests_for("pinned.qcow2")
               if "Accept-Encoding" not in r.headers]  # the importer's own always send it
    assert by_curl, "nbdkit did not read the URL itself"
    for request in by_curl:
        assert request.headers.get("If-Match") == ETAGS[0], request.headers
        assert request.headers.get("If-Unmodified-Since") == DATES[0], request.headers
