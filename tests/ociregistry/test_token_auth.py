"""The Bearer-token flow against a real registry (Distribution with ``auth: token``) and
its realm (:mod:`tests.fixtures.tokenauth`): digest, manifest and blobs pulled with a
token, as from Docker Hub or quay.io; the token answer is read through the client's
bounded session (tests/ociregistry/test_bounded_reads.py has the hostile realms)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from ociregistry.client import AUTH_FAILED, Credentials, RegistryUnauthorized, resolve_digest
from ociregistry.image import open_disk
from ociregistry.reference import parse_docker_url
from tests.fixtures.registry import USERNAME, RegistryServer, push_disk

pytestmark = pytest.mark.slow


@pytest.fixture
def token_registry(tmp_path: Path) -> Iterator[RegistryServer]:
    with RegistryServer(tmp_path / "registry", auth="token") as server:
        yield server


def test_a_disk_is_pulled_with_a_bearer_token(token_registry: RegistryServer,
                                              tmp_path: Path) -> None:
    payload = bytes(range(256)) * 300
    disk = tmp_path / "d.img"
    disk.write_bytes(payload)
    pushed = push_disk(token_registry, "golden/tok", "v1", disk, tmp_path / "w")
    assert token_registry.issuer is not None
    token_registry.issuer.issued.clear()
    ref = parse_docker_url(token_registry.url("golden/tok", "v1"))

    assert resolve_digest(ref, token_registry.access()) == pushed.digest
    with open_disk(ref, token_registry.access()) as opened:
        assert b"".join(opened.chunks(chunk_size=4096)) == payload
    # one token per client (the digest's, the pull's), for what the challenge asked
    assert token_registry.issuer.issued == [
        (USERNAME, ("repository:golden/tok:pull",))] * 2


def test_a_bearer_token_is_refused_with_upstreams_words(token_registry: RegistryServer,
                                                        tmp_path: Path) -> None:
    disk = tmp_path / "d.img"
    disk.write_bytes(b"\x01" * 512)
    push_disk(token_registry, "golden/tok", "v1", disk, tmp_path / "w")
    ref = parse_docker_url(token_registry.url("golden/tok", "v1"))
    wrong = token_registry.access(credentials=Credentials(USERNAME, "wrong-password"))
    with pytest.raises(RegistryUnauthorized, match=f"^{AUTH_FAILED}") as caught:
        resolve_digest(ref, wrong)
    assert "wrong-password" not in str(caught.value)
    # anonymous: the realm grants no access, the registry refuses the token
    anonymous = token_registry.access()
    anonymous = type(anonymous)(ca_file=anonymous.ca_file)
    with pytest.raises(RegistryUnauthorized, match=f"^{AUTH_FAILED}"):
        resolve_digest(ref, anonymous)
