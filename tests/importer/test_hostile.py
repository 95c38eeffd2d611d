"""Regression tests for issue 7: hostile images and misbehaving servers, each the attack
as it was found (each failed on the importer before its fix)."""

from __future__ import annotations

from pathlib import Path

from importer.config import ContentType
from importer.errors import InvalidImage
from tests.fixtures.httpserver import HttpServer
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
