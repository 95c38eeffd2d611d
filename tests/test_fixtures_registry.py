"""The registry fixture and the neutral ociregistry module, against the real registry."""

from __future__ import annotations

import gzip
import hashlib
import io
import tarfile
from pathlib import Path

import pytest
import requests
import zstandard

from ociregistry.client import Credentials, RegistryError, resolve_digest
from ociregistry.reference import ReferenceError, parse_docker_url
from tests.fixtures.registry import RegistryServer, push_disk, push_image, push_index, write_layer


def test_registry_requires_tls_and_auth(registry_server: RegistryServer) -> None:
    url = registry_server.base_url + "/v2/"
    with pytest.raises(requests.exceptions.SSLError):
        requests.get(url, timeout=5)  # the test CA is not in the system roots
    assert requests.get(url, verify=registry_server.verify, timeout=5).status_code == 401
    creds = registry_server.credentials
    assert creds is not None
    ok = requests.get(
        url, verify=registry_server.verify, auth=(creds.username, creds.password), timeout=5
    )
    assert ok.status_code == 200
    htpasswd = (registry_server.directory / "htpasswd").read_text()
    assert registry_server.password not in htpasswd and "$2y$" in htpasswd


def test_pushed_layers_round_trip(registry_server: RegistryServer, tmp_path: Path) -> None:
    disk = tmp_path / "d.img"
    disk.write_bytes(b"\x01" * 4096)
    gz = write_layer(tmp_path / "w", {"disk/a.img": disk}, compression="gzip")
    zst = write_layer(tmp_path / "w", {"disk/b.img": b"xyz"}, compression="zstd")
    pushed = push_image(registry_server, "golden/multi", "v1", [gz, zst])
    blob = registry_server.pull_blob("golden/multi", gz.digest)
    with tarfile.open(fileobj=io.BytesIO(gzip.decompress(blob))) as tar:
        member = tar.extractfile("disk/a.img")
        assert member is not None and member.read() == disk.read_bytes()
    raw = (
        zstandard.ZstdDecompressor()
        .stream_reader(io.BytesIO(registry_server.pull_blob("golden/multi", zst.digest)))
        .read()
    )
    assert "sha256:" + hashlib.sha256(raw).hexdigest() == zst.diff_id
    access = registry_server.access()
    assert (
        resolve_digest(parse_docker_url(registry_server.url("golden/multi", "v1")), access)
        == pushed.digest
    )


def test_resolve_digest_of_index_and_errors(
    registry_server: RegistryServer, tmp_path: Path
) -> None:
    disk = tmp_path / "d.img"
    disk.write_bytes(b"\x02" * 512)
    amd = push_disk(registry_server, "golden/list", "amd", disk, tmp_path / "w")
    arm = push_image(
        registry_server,
        "golden/list",
        None,
        [write_layer(tmp_path / "w", {"disk/x.img": b"arm"})],
        architecture="arm64",
    )
    index = push_index(
        registry_server, "golden/list", "v1", [("linux/amd64", amd), ("linux/arm64", arm)]
    )
    ref = parse_docker_url(registry_server.url("golden/list", "v1"))
    assert resolve_digest(ref, registry_server.access()) == index.digest

    missing = parse_docker_url(registry_server.url("golden/list", "nope"))
    with pytest.raises(
        RegistryError,
        match=r"^reading manifest nope in 127\.0\.0\.1:\d+/golden/list: manifest unknown",
    ):
        resolve_digest(missing, registry_server.access())

    wrong = registry_server.access(credentials=Credentials("rootdisk-registry-user", "wrong"))
    with pytest.raises(
        RegistryError, match=r"^unable to retrieve auth token: invalid username/password"
    ) as e:
        resolve_digest(ref, wrong)
    assert "wrong" not in str(e.value)

    no_ca = registry_server.access()
    no_ca = type(no_ca)(credentials=no_ca.credentials)  # system roots only
    with pytest.raises(RegistryError, match=r"CERTIFICATE_VERIFY_FAILED|certificate verify failed"):
        resolve_digest(ref, no_ca)
    # insecureRegistries: unverified TLS is accepted
    assert resolve_digest(ref, registry_server.access(insecure=True)) == index.digest


def test_plain_http_registry_needs_insecure(plain_registry: RegistryServer, tmp_path: Path) -> None:
    disk = tmp_path / "d.img"
    disk.write_bytes(b"\x03" * 512)
    pushed = push_disk(
        plain_registry, "plain/disk", "latest", disk, tmp_path / "w", compression="zstd"
    )
    ref = parse_docker_url(f"docker://{plain_registry.host}/plain/disk")
    assert resolve_digest(ref, plain_registry.access(insecure=True)) == pushed.digest
    with pytest.raises(RegistryError):
        resolve_digest(ref, plain_registry.access())


@pytest.mark.parametrize(
    ("url", "host", "repo", "alias"),
    [
        ("docker://quay.io/containerdisks/fedora:41", "quay.io", "containerdisks/fedora", "41"),
        ("docker://localhost:5000/a/b", "localhost:5000", "a/b", "latest"),
        ("docker://busybox", "docker.io", "library/busybox", "latest"),
        ("docker://r.example/x@sha256:" + "a" * 64, "r.example", "x", "sha256:" + "a" * 64),
    ],
)
def test_parse_docker_url(url: str, host: str, repo: str, alias: str) -> None:
    ref = parse_docker_url(url)
    assert (ref.host, ref.repository, ref.alias) == (host, repo, alias)


@pytest.mark.parametrize(
    "url",
    [
        "http://x/y",
        "docker://",
        "docker://Host.example/UPPER",
        "docker://r.example/x@sha256:12",
        "docker://a b",
    ],
)
def test_parse_docker_url_refuses(url: str) -> None:
    with pytest.raises(ReferenceError):
        parse_docker_url(url)
