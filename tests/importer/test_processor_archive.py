"""Archive extraction (content type ``archive``) against hostile tars, through a real
import over HTTP: where members may go is decided on names (no ``..`` in a name or a
link target, no absolute symlink, hard links only to files of the same archive, no
crossing a symlink the archive did not make), never by resolving paths, so it holds on
an interpreter without the CVE-2025-4517 fix (this one is 3.11.7). Each refusal names
the member, creates nothing outside the volume and leaves the volume as it was; an
archive with relative symlinks inside its own tree is extracted.
"""

from __future__ import annotations

import io
import os
import tarfile
from collections.abc import Callable
from pathlib import Path

import pytest

from importer.config import ContentType
from importer.errors import InvalidImage
from tests.fixtures.httpserver import HttpServer
from tests.importer.conftest import ImportFn
from tests.importer.test_uploadserver_hostile import _tarpoc

Member = tuple[str, str, str]  # kind (d, f, s, h), name, link target or file content


def _tar(members: list[Member]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for kind, name, extra in members:
            info = tarfile.TarInfo(name)
            data = None
            if kind == "d":
                info.type = tarfile.DIRTYPE
            elif kind == "f":
                data = extra.encode()
                info.size = len(data)
            else:
                info.type = tarfile.SYMTYPE if kind == "s" else tarfile.LNKTYPE
                info.linkname = extra
            tar.addfile(info, io.BytesIO(data) if data is not None else None)
    return buf.getvalue()


Setup = Callable[[Path, Path], None]


def _foreign_link(volume: Path, outside: Path) -> None:
    (volume / "evil").symlink_to(outside)


def _foreign_file(volume: Path, _outside: Path) -> None:
    (volume / "keep.txt").write_bytes(b"kept\n")


HOSTILE: list[tuple[str, list[Member], str, Setup | None]] = [
    ("absolute symlink",
     [("s", "etc-link", "{outside}"), ("f", "etc-link/pwned", "x")], "etc-link", None),
    ("symlink up",
     [("d", "sub", ""), ("s", "sub/up", "../.."), ("f", "sub/up/pwned", "x")], "sub/up", None),
    ("symlink to itself, then up by name",
     [("s", "dot", "."), ("f", "dot/../pwned", "x")], "dot/../pwned", None),
    ("hard link up", [("h", "h", "../outside/victim")], "h", None),
    ("hard link to an absolute path", [("h", "h", "{outside}/victim")], "h", None),
    ("hard link to a file the archive did not write",
     [("h", "h", "keep.txt")], "h", _foreign_file),
    ("through a symlink already in the volume",
     [("f", "evil/pwned", "x")], "evil/pwned", _foreign_link),
]


@pytest.mark.parametrize(("why", "members", "named", "setup"), HOSTILE,
                         ids=[h[0] for h in HOSTILE])
def test_a_hostile_archive_is_refused_naming_the_member(
        http_server: HttpServer, do_import: ImportFn, tmp_path: Path, why: str,
        members: list[Member], named: str, setup: Setup | None) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "victim").write_bytes(b"victim\n")
    volume = tmp_path / "volume"
    volume.mkdir()
    if setup is not None:
        setup(volume, outside)
    before = sorted(p.name for p in volume.iterdir())
    members = [(k, n.format(outside=outside), e.format(outside=outside))
               for k, n, e in members]
    tar = tmp_path / "www" / "hostile.tar"
    tar.write_bytes(_tar(members))
    outcome = do_import(http_server.publish(tar), volume, content_type=ContentType.ARCHIVE)
    assert isinstance(outcome.error, InvalidImage), (why, outcome.error)
    assert f"tar member {named!r}" in outcome.error.message, outcome.error.message
    assert sorted(p.name for p in outside.iterdir()) == ["victim"]
    assert (outside / "victim").read_bytes() == b"victim\n"
    assert (outside / "victim").stat().st_nlink == 1
    assert not (tmp_path / "pwned").exists()
    assert sorted(p.name for p in volume.iterdir()) == before


def test_the_symlink_chain_of_cve_2025_4517_is_refused(
        http_server: HttpServer, do_import: ImportFn, tmp_path: Path) -> None:
    volume = tmp_path / "a" / "volume"
    volume.mkdir(parents=True)
    tar = tmp_path / "www" / "tarpoc.tar"
    tar.write_bytes(_tarpoc())
    outcome = do_import(http_server.publish(tar), volume, content_type=ContentType.ARCHIVE)
    assert isinstance(outcome.error, InvalidImage), outcome.error
    assert "tar member 'a/b/c/d/e/f/g/h/i/j/k/l/m/n/o/p/lll" in outcome.error.message
    assert list(tmp_path.rglob("pwned")) == []
    assert list(volume.iterdir()) == []


def test_relative_symlinks_within_the_archive_are_extracted(
        http_server: HttpServer, do_import: ImportFn, tmp_path: Path) -> None:
    volume = tmp_path / "volume"
    volume.mkdir()
    tar = tmp_path / "www" / "rootfs.tar"
    tar.write_bytes(_tar([
        ("d", "./", ""), ("d", "./usr", ""), ("d", "./usr/lib", ""),
        ("f", "./usr/lib/libc.so.6", "libc\n"),
        ("s", "./usr/lib/libc.so", "libc.so.6"),       # beside it
        ("s", "./lib", "usr/lib"),                      # down into the tree
        ("f", "./lib/extra.so", "extra\n"),             # written through the archive's link
        ("h", "./usr/lib/libc-hard.so", "usr/lib/libc.so.6"),
        ("s", "./self", "."),
    ]))
    outcome = do_import(http_server.publish(tar), volume, content_type=ContentType.ARCHIVE)
    assert outcome.exit_code == 0, outcome.error
    assert os.readlink(volume / "usr/lib/libc.so") == "libc.so.6"
    assert (volume / "usr/lib/libc.so").read_bytes() == b"libc\n"
    assert os.readlink(volume / "lib") == "usr/lib"
    assert (volume / "usr/lib/extra.so").read_bytes() == b"extra\n"
    assert (volume / "usr/lib/libc-hard.so").stat().st_ino == \
        (volume / "usr/lib/libc.so.6").stat().st_ino
    assert (volume / "self").is_symlink()
