"""Imports from a real S3 server (SeaweedFS, auth enforced): qcow2 converted while it
streams through ranged GETs, raw streamed, presigned URLs, and the S3 failure reasons."""

from __future__ import annotations

import gc
from pathlib import Path
from typing import Any

import pytest

from importer.errors import InvalidImage, NotFound, TooSmall, Unauthorized
from tests.fixtures.images import ImageFactory, compare
from tests.fixtures.proxy import ProxyServer
from tests.fixtures.s3server import S3Server
from tests.importer.conftest import ImportFn, open_connections_to
from vocab import sources

pytestmark = pytest.mark.slow

MiB = 1024 * 1024
GiB = 1024 * MiB


def creds(s3: S3Server) -> dict[str, Any]:
    return {"access_key_id": s3.access_key, "secret_key": s3.secret_key,
            "options": ((sources.S3_ENDPOINT, s3.endpoint),)}


@pytest.mark.parametrize(("name", "route"), [
    ("qcow2", "nbd-convert"), ("raw", "stream"), ("raw.gz", "stream"), ("vhdx", "nbd-convert"),
    ("qcow2.xz", "scratch-convert"),
])
def test_import(images: ImageFactory, s3_server: S3Server, s3_bucket: str,
                do_import: ImportFn, tmp_path: Path, name: str, route: str) -> None:
    image = images.get(name)
    url = s3_server.put_file(s3_bucket, f"images/{name}", image.path)
    seen: list[float] = []
    outcome = do_import(url, tmp_path / "disk.img", listeners=[lambda u: seen.append(u.percent)],
                        **creds(s3_server))
    assert outcome.exit_code == 0, outcome.error
    assert compare(image.expected, tmp_path / "disk.img")
    assert outcome.result is not None and outcome.result.route == route
    # S3 imports report progress (upstream's can't): rising, ending at 100 %.
    assert seen == sorted(seen) and seen[-1] == 100.0
    if route == "nbd-convert" or image.size > 4 * 1024 * 1024:  # more than a few chunks
        assert any(0 < p < 100 for p in seen)


def test_path_style_http_url_as_upstream_takes_it(images: ImageFactory, s3_server: S3Server,
                                                  s3_bucket: str, do_import: ImportFn,
                                                  tmp_path: Path) -> None:
    s3_server.put_file(s3_bucket, "disk.qcow2", images.get("qcow2").path)
    outcome = do_import(s3_server.http_url(s3_bucket, "disk.qcow2"), tmp_path / "d.img",
                        source=sources.S3, access_key_id=s3_server.access_key,
                        secret_key=s3_server.secret_key)
    assert outcome.exit_code == 0, outcome.error
    assert compare(images.reference, tmp_path / "d.img")


def test_presigned_url_over_http(images: ImageFactory, s3_server: S3Server, s3_bucket: str,
                                 do_import: ImportFn, tmp_path: Path) -> None:
    s3_server.put_file(s3_bucket, "p.qcow2", images.get("qcow2").path)
    url = s3_server.presigned_url(s3_bucket, "p.qcow2")
    outcome = do_import(url, tmp_path / "d.img", source=sources.HTTP)
    assert outcome.exit_code == 0, outcome.error
    assert compare(images.reference, tmp_path / "d.img")
    assert outcome.result is not None and outcome.result.route == "nbd-convert"
    assert "X-Amz-Signature" not in outcome.termination.decode()


def test_wrong_key_is_unauthorized(images: ImageFactory, s3_server: S3Server, s3_bucket: str,
                                   do_import: ImportFn, tmp_path: Path) -> None:
    url = s3_server.put_file(s3_bucket, "x.qcow2", images.get("qcow2").path)
    outcome = do_import(url, tmp_path / "d.img", access_key_id=s3_server.access_key,
                        secret_key="not-the-secret",
                        options=((sources.S3_ENDPOINT, s3_server.endpoint),))
    assert isinstance(outcome.error, Unauthorized)
    assert b"not-the-secret" not in outcome.termination
    anonymous = do_import(url, tmp_path / "d.img",
                          options=((sources.S3_ENDPOINT, s3_server.endpoint),))
    assert isinstance(anonymous.error, Unauthorized)


def test_missing_object_is_not_found(s3_server: S3Server, s3_bucket: str,
                                     do_import: ImportFn, tmp_path: Path) -> None:
    outcome = do_import(s3_server.url(s3_bucket, "nope.img"), tmp_path / "d.img",
                        **creds(s3_server))
    assert isinstance(outcome.error, NotFound)
    assert not (tmp_path / "d.img").exists()


@pytest.mark.parametrize(("name", "route"), [("raw", "stream"), ("qcow2", "nbd-convert")])
def test_s3_faults_are_retried_and_resumed(images: ImageFactory, s3_server: S3Server,
                                           s3_bucket: str, do_import: ImportFn, tmp_path: Path,
                                           monkeypatch: pytest.MonkeyPatch, name: str,
                                           route: str) -> None:
    """503s and connections cut mid-body between boto3 and the S3 server (a fault-injecting
    proxy in between): retried with backoff, resumed where the body was cut."""
    image = images.get(name)
    url = s3_server.put_file(s3_bucket, f"images/{name}", image.path)
    with ProxyServer(fail_times=2, drop_after=512 * 1024, drop_times=2) as proxy:
        for variable in ("no_proxy", "NO_PROXY"):
            monkeypatch.delenv(variable, raising=False)
        monkeypatch.setenv("http_proxy", proxy.url)
        monkeypatch.setenv("HTTP_PROXY", proxy.url)
        outcome = do_import(url, tmp_path / "disk.img", **creds(s3_server))
        seen = proxy.requests
    assert outcome.exit_code == 0, outcome.error
    assert outcome.result is not None and outcome.result.route == route
    assert compare(image.expected, tmp_path / "disk.img")
    gets = [r for r in seen if r.method == "GET"]
    assert sum(1 for r in gets if r.status == 503) == 2
    if route == "stream":
        # After a cut, the next read starts where the bytes stopped, not at 0.
        ranges = [r.header("Range") for r in gets[2:]]
        assert any(r and not r.startswith("bytes=0-") for r in ranges), ranges


@pytest.mark.parametrize("expand_to", [256 * MiB, 4 * GiB], ids=["idle", "in-flight"])
def test_an_import_stopped_mid_stream_leaves_no_connection_open(
        image_factory: ImageFactory, s3_server: S3Server, s3_bucket: str,
        do_import: ImportFn, tmp_path: Path, expand_to: int) -> None:
    """As over HTTP (test_import_http): closing the source closes the connection of a
    stream its consumer gave up on, garbage collector or not."""
    bomb = image_factory.gzip_bomb(expand_to)
    url = s3_server.put_file(s3_bucket, f"bomb-{expand_to}.gz", bomb.path)
    gc.collect()  # no earlier test's sockets
    gc.disable()  # nothing collected behind the test's back
    try:
        outcome = do_import(url, tmp_path / "d.img", image_size=64 * MiB, **creds(s3_server))
        # (the small bomb's size is in its trailer, which a ranged read finds first)
        assert isinstance(outcome.error, InvalidImage | TooSmall), outcome.error
        assert open_connections_to(int(s3_server.ports["s3.port"])) == []
    finally:
        gc.enable()
