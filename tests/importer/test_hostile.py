"""Regression tests for issue 7: hostile images and misbehaving servers, each the attack
as it was found (each failed on the importer before its fix)."""

from __future__ import annotations

from pathlib import Path

from importer.config import ContentType
from importer.errors import InvalidImage, InvalidResponse, SourceChanged
from tests.fixtures.httpserver import Faults, HttpServer
from tests.fixtures.images import ImageFactory
from tests.importer.conftest import ImportFn

MiB = 1024 * 1024


def test_archive_cleanup_never_removes_a_host_file(image_factory: ImageFactory,
                                                   http_server: HttpServer,
                                                   do_import: ImportFn, tmp_path: Path) -> None:
    """An absolute member is extracted inside the volume; the failure that follows must
    clean up that copy, not the host file its name points at."""
    victim = tmp_path / "host" / "precious.txt"
    victim.parent.mkdir()
    victim.write_bytes(b"host data\n")
    volume = tmp_path / "volume"
    volume.mkdir()
    tar = image_factory.tar_with_absolute_member(victim.resolve())
    outcome = do_import(http_server.publish(tar.path), volume,
                        content_type=ContentType.ARCHIVE)
    assert isinstance(outcome.error, InvalidImage), outcome.error
    assert victim.read_bytes() == b"host data\n"
    assert not (tmp_path / "escaped.txt").exists()
    assert list(volume.iterdir()) == []  # the copy made inside the volume is gone too


def test_resume_answered_from_byte_zero_is_refused(images: ImageFactory,
                                                   http_server: HttpServer,
                                                   do_import: ImportFn, tmp_path: Path) -> None:
    """A dropped transfer resumes with Range; a cache that answers 206 from byte 0 must
    not have its bytes written at the resume offset (that completed with a wrong disk)."""
    image = images.get("raw")
    url = http_server.publish(image.path, "zero.img")
    http_server.set_faults("zero.img", Faults(drop_after=image.size // 3, drop_times=2,
                                              range_from_zero=True))
    dest = tmp_path / "d.img"
    outcome = do_import(url, dest)
    assert isinstance(outcome.error, InvalidResponse), outcome.error
    assert outcome.exit_code == 2
    assert "bytes 0-" in outcome.error.message
    assert not dest.exists()
    resumed = [r.range for r in http_server.requests_for("zero.img", "GET")][2:]
    assert resumed and all(r and not r.startswith("bytes=0-") for r in resumed), resumed


def test_object_replaced_mid_import_is_not_spliced(images: ImageFactory,
                                                   http_server: HttpServer,
                                                   do_import: ImportFn, tmp_path: Path) -> None:
    image = images.get("raw")
    url = http_server.publish(image.path, "moving.img")
    http_server.set_faults("moving.img", Faults(changing_etag=True))
    dest = tmp_path / "d.img"
    outcome = do_import(url, dest)
    assert isinstance(outcome.error, SourceChanged), outcome.error
    assert outcome.error.retryable and outcome.exit_code == 1
    assert "ETag" in outcome.error.message
    assert not dest.exists()


def test_nbd_route_refuses_a_server_that_answers_from_byte_zero(
        images: ImageFactory, http_server: HttpServer, do_import: ImportFn,
        tmp_path: Path) -> None:
    image = images.get("qcow2")
    url = http_server.publish(image.path, "zero.qcow2")
    http_server.set_faults("zero.qcow2", Faults(range_from_zero=True))
    dest = tmp_path / "d.img"
    outcome = do_import(url, dest)
    assert isinstance(outcome.error, InvalidResponse), outcome.error
    assert not dest.exists()
