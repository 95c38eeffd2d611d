"""Imports from a real registry (Distribution with TLS and Basic auth): the file under
``disk/`` streamed out of its layer, the routes it takes, and each failure's reason."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from importer.config import ImporterConfig
from importer.errors import (
    BackingFileRejected,
    InvalidImage,
    NotFound,
    TransferError,
    Unauthorized,
)
from importer.sources.registry import RegistrySource
from tests.fixtures.images import ImageFactory, compare
from tests.fixtures.registry import RegistryServer, push_disk, push_image, write_layer
from tests.importer.conftest import ImportFn
from vocab import sources

pytestmark = pytest.mark.slow


@pytest.fixture
def cert_dir(registry_server: RegistryServer, tmp_path: Path) -> Path:
    """The registry's CA as a certConfigMap mounts it."""
    directory = tmp_path / "certs"
    directory.mkdir()
    shutil.copy(str(registry_server.verify), directory / "ca.pem")
    return directory


def registry_fields(registry: RegistryServer, cert_dir: Path | None) -> dict[str, object]:
    creds = registry.credentials
    assert creds is not None
    return {"source": sources.REGISTRY, "cert_dir": cert_dir,
            "access_key_id": creds.username, "secret_key": creds.password}


@pytest.mark.parametrize(("name", "compression", "route"), [
    ("qcow2", "gzip", "scratch-convert"),
    ("raw", "zstd", "stream"),
    ("raw.gz", "none", "stream"),
])
def test_import(images: ImageFactory, registry_server: RegistryServer, cert_dir: Path,
                do_import: ImportFn, tmp_path: Path, name: str, compression: str,
                route: str) -> None:
    image = images.get(name)
    push_disk(registry_server, "golden/img", name, image.path, tmp_path / "w",
              name=f"disk.{name}", compression=compression)  # type: ignore[arg-type]
    seen: list[float] = []
    outcome = do_import(registry_server.url("golden/img", name), tmp_path / "disk.img",
                        listeners=[lambda u: seen.append(u.percent)],
                        **registry_fields(registry_server, cert_dir))
    assert outcome.exit_code == 0, outcome.error
    assert compare(image.expected, tmp_path / "disk.img")
    assert outcome.result is not None and outcome.result.route == route
    assert seen == sorted(seen) and seen[-1] == 100.0
    assert registry_server.password.encode() not in outcome.termination


def test_a_backing_file_in_the_image_is_refused(images: ImageFactory,
                                                registry_server: RegistryServer,
                                                cert_dir: Path, do_import: ImportFn,
                                                tmp_path: Path) -> None:
    push_disk(registry_server, "golden/hostile", "v1", images.get("hostile-backing.qcow2").path,
              tmp_path / "w", name="disk.qcow2")
    outcome = do_import(registry_server.url("golden/hostile", "v1"), tmp_path / "disk.img",
                        **registry_fields(registry_server, cert_dir))
    assert isinstance(outcome.error, BackingFileRejected)


def test_failures_name_the_reason(registry_server: RegistryServer, cert_dir: Path,
                                  do_import: ImportFn, tmp_path: Path) -> None:
    push_image(registry_server, "golden/f", "v1",
               [write_layer(tmp_path / "w", {"opt/nothing": b"x"}, dirs=("opt",))])
    fields = registry_fields(registry_server, cert_dir)
    missing = do_import(registry_server.url("golden/f", "nope"), tmp_path / "a.img", **fields)
    assert isinstance(missing.error, NotFound)
    assert "manifest unknown" in str(missing.error)
    empty = do_import(registry_server.url("golden/f", "v1"), tmp_path / "b.img", **fields)
    assert isinstance(empty.error, InvalidImage)
    assert "Failed to find VM disk image file in the container image" in str(empty.error)
    wrong = do_import(registry_server.url("golden/f", "v1"), tmp_path / "c.img",
                      **{**fields, "secret_key": "not-the-password"})
    assert isinstance(wrong.error, Unauthorized)
    assert b"not-the-password" not in wrong.termination
    untrusted = do_import(registry_server.url("golden/f", "v1"), tmp_path / "d.img",
                          **{**fields, "cert_dir": None})
    assert untrusted.exit_code != 0 and "CERTIFICATE_VERIFY_FAILED" in str(untrusted.error)
    assert not isinstance(untrusted.error, TransferError)  # not retried: it stays untrusted


def test_a_tampered_layer_leaves_no_disk(registry_server: RegistryServer, cert_dir: Path,
                                         do_import: ImportFn, tmp_path: Path) -> None:
    layer = write_layer(tmp_path / "w", {"disk/d.img": b"\x33" * 3_000_000},
                        compression="none")
    push_image(registry_server, "golden/t", "v1", [layer])
    stored = registry_server.blob_path(layer.digest)
    data = bytearray(stored.read_bytes())
    data[-2048:-2044] = b"EVIL"  # in the tar's end padding: the disk bytes are all intact
    stored.write_bytes(bytes(data))
    dest = tmp_path / "disk.img"
    outcome = do_import(registry_server.url("golden/t", "v1"), dest,
                        **registry_fields(registry_server, cert_dir))
    assert outcome.exit_code != 0 and "Digest did not match" in str(outcome.error)
    assert not dest.exists() or b"\x33" not in dest.read_bytes()


def test_insecure_registry_over_plain_http(plain_registry: RegistryServer,
                                           do_import: ImportFn, tmp_path: Path) -> None:
    push_image(plain_registry, "golden/p", "v1",
               [write_layer(tmp_path / "w", {"disk/d.img": b"\x44" * 65536})])
    url = plain_registry.url("golden/p", "v1")
    refused = do_import(url, tmp_path / "a.img", source=sources.REGISTRY)
    assert refused.exit_code != 0
    outcome = do_import(url, tmp_path / "b.img", source=sources.REGISTRY, insecure_tls=True)
    assert outcome.exit_code == 0, outcome.error
    assert (tmp_path / "b.img").read_bytes()[:65536] == b"\x44" * 65536


def test_a_resumed_read_stays_on_the_probed_image(registry_server: RegistryServer,
                                                  cert_dir: Path, tmp_path: Path) -> None:
    """The tag moves between the probe and a resumed read: the read names the probed
    manifest's digest, so it still gets the first image's bytes."""
    first = bytes(range(256)) * 4096
    push_image(registry_server, "golden/r", "v1",
               [write_layer(tmp_path / "w", {"disk/d.img": first})])
    fields = registry_fields(registry_server, cert_dir)
    config = ImporterConfig(endpoint=registry_server.url("golden/r", "v1"),
                            dest=tmp_path / "d.img", retry_delay=0.01, metrics_port=None,
                            **fields)  # type: ignore[arg-type]
    source = RegistrySource(config)
    try:
        probe = source.probe()
        assert probe.size == len(first) and probe.head == first[:len(probe.head)]
        push_image(registry_server, "golden/r", "v1",
                   [write_layer(tmp_path / "w", {"disk/d.img": b"\x00evil" * 200000})])
        resumed = b"".join(source.stream(offset=1000))
        assert resumed == first[1000:]
    finally:
        source.close()


@pytest.mark.parametrize(("name", "route"), [("qcow2", "nbd-convert"), ("raw", "stream")])
def test_node_pull_reads_the_mounted_image(images: ImageFactory, do_import: ImportFn,
                                           tmp_path: Path, name: str, route: str) -> None:
    """``pullMethod: node``: the node mounted the image; its /disk file is read at random
    (a qcow2 converts while it is read, no scratch), no registry is asked."""
    mounted = tmp_path / "image"
    (mounted / "disk").mkdir(parents=True)
    shutil.copy(images.get(name).path, mounted / "disk" / f"disk.{name}")
    outcome = do_import("docker://registry.invalid/golden/x:v1", tmp_path / "disk.img",
                        source=sources.REGISTRY,
                        options=((sources.REGISTRY_IMAGE_DIR, str(mounted)),))
    assert outcome.exit_code == 0, outcome.error
    assert outcome.result is not None and outcome.result.route == route
    assert compare(images.get(name).expected, tmp_path / "disk.img")


def test_node_pull_without_a_disk_file(do_import: ImportFn, tmp_path: Path) -> None:
    (tmp_path / "image" / "disk").mkdir(parents=True)
    outcome = do_import("docker://registry.invalid/golden/x:v1", tmp_path / "disk.img",
                        source=sources.REGISTRY,
                        options=((sources.REGISTRY_IMAGE_DIR, str(tmp_path / "image")),))
    assert isinstance(outcome.error, InvalidImage)
    assert "Failed to find VM disk image file in the container image" in str(outcome.error)


def test_an_oci_archive_on_this_machine(images: ImageFactory, do_import: ImportFn,
                                        tmp_path: Path) -> None:
    from tests.fixtures.registry import write_oci_archive
    layer = write_layer(tmp_path / "w", {"disk/disk.qcow2": images.get("qcow2").path})
    archive = tmp_path / "image.tar"
    write_oci_archive(archive, {"41": [layer]})
    outcome = do_import(f"oci-archive:{archive}:41", tmp_path / "disk.img",
                        source=sources.REGISTRY)
    assert outcome.exit_code == 0, outcome.error
    assert compare(images.reference, tmp_path / "disk.img")
    missing = do_import(f"oci-archive:{tmp_path / 'nope.tar'}", tmp_path / "d2.img",
                        source=sources.REGISTRY)
    assert isinstance(missing.error, InvalidImage) and "nope.tar" in str(missing.error)
