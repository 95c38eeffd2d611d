"""The node's image store behind ``image`` volumes, against a real registry (TLS from a
CA in the node's certs.d, Basic auth from an imagePullSecret): pulled once, unpacked
safely, pull policies as Kubernetes', failures named."""

from __future__ import annotations

import base64
import hashlib
import io
import json
import shutil
import tarfile
from pathlib import Path

import pytest

from localcluster.kubelet.imagevolumes import (
    ImageStore,
    PullError,
    PullSecret,
    default_policy,
    parse_pull_secrets,
)
from tests.fixtures.registry import Blob, RegistryServer, push_image, write_layer

pytestmark = pytest.mark.slow


def _store(tmp_path: Path, registry: RegistryServer) -> ImageStore:
    data = tmp_path / "node"
    (data / "certs.d" / registry.host).mkdir(parents=True)
    shutil.copy(str(registry.verify), data / "certs.d" / registry.host / "ca.crt")
    return ImageStore(str(data))


def _secret(registry: RegistryServer) -> list[PullSecret]:
    creds = registry.credentials
    assert creds is not None
    return [PullSecret(registry.host, creds.username, creds.password)]


def test_pulled_once_then_served_from_the_store(tmp_path: Path,
                                                 registry_server: RegistryServer) -> None:
    layer = write_layer(tmp_path / "w", {"disk/disk.img": b"\x42" * 100000})
    push_image(registry_server, "golden/cd", "v1", [layer])
    store = _store(tmp_path, registry_server)
    ref = f"{registry_server.host}/golden/cd:v1"
    root = Path(store.mount(ref, policy=None, pull_secrets=_secret(registry_server)))
    assert (root / "disk" / "disk.img").read_bytes() == b"\x42" * 100000
    st = (root / "disk" / "disk.img").stat()  # the image's owner (runtimes keep it)
    assert (st.st_uid, st.st_gid, st.st_mode & 0o7777) == (107, 107, 0o640)  # data filter: u+w
    assert store.pulls == 1
    again = store.mount(ref, policy="Always", pull_secrets=_secret(registry_server))
    assert again == str(root) and store.pulls == 1  # same digest: not pulled again
    registry_server.stop()  # IfNotPresent (the default for a tag) needs no registry
    assert store.mount(ref, policy=None, pull_secrets=[]) == str(root)
    assert store.mount(ref, policy="Never", pull_secrets=[]) == str(root)
    with pytest.raises(PullError, match="pulling image"):
        store.mount(ref, policy="Always", pull_secrets=_secret(registry_server))


def test_failures_are_named(tmp_path: Path, registry_server: RegistryServer) -> None:
    store = _store(tmp_path, registry_server)
    push_image(registry_server, "golden/cd", "v1",
               [write_layer(tmp_path / "w", {"disk/a": b"a"})])
    ref = f"{registry_server.host}/golden/cd:v1"
    with pytest.raises(PullError) as no_creds:
        store.mount(ref, policy=None, pull_secrets=[])
    assert "invalid username/password" in str(no_creds.value) or "unauthorized" in str(
        no_creds.value)
    wrong = [PullSecret(registry_server.host, "rootdisk", "not-it")]
    with pytest.raises(PullError) as refused:
        store.mount(ref, policy=None, pull_secrets=wrong)
    assert "not-it" not in str(refused.value)
    with pytest.raises(PullError, match="not present with pull policy of Never"):
        store.mount(ref, policy="Never", pull_secrets=_secret(registry_server))
    with pytest.raises(PullError, match="manifest unknown"):
        store.mount(f"{registry_server.host}/golden/cd:nope", policy=None,
                    pull_secrets=_secret(registry_server))
    with pytest.raises(PullError, match="pullPolicy 'Sometimes'"):
        store.mount(ref, policy="Sometimes", pull_secrets=[])
    assert store.pulls == 0
    assert not [p for p in store.root.iterdir() if p.name.startswith(".pull-")]


def _raw_layer(tmp_path: Path, members: list[tuple[str, bytes]]) -> Blob:
    path = tmp_path / f"layer-{len(members)}.tar"
    with tarfile.open(path, "w") as tar:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    digest = "sha256:" + hashlib.sha256(path.read_bytes()).hexdigest()
    return Blob("application/vnd.oci.image.layer.v1.tar", digest, path.stat().st_size, path,
                diff_id=digest)


@pytest.mark.parametrize(("members", "words"), [
    ([("../escape", b"x")], "not a readable tar"),
    ([("disk/.wh.old", b"")], "whiteout"),
])
def test_a_hostile_layer_writes_nothing_outside(tmp_path: Path, registry_server: RegistryServer,
                                                members: list[tuple[str, bytes]],
                                                words: str) -> None:
    push_image(registry_server, "golden/bad", "v1", [_raw_layer(tmp_path, members)])
    store = _store(tmp_path, registry_server)
    with pytest.raises(PullError, match=words):
        store.mount(f"{registry_server.host}/golden/bad:v1", policy=None,
                    pull_secrets=_secret(registry_server))
    assert not (store.root / "escape").exists() and not (store.root.parent / "escape").exists()
    assert not Path("/abs/escape").exists()
    assert not [p for p in store.root.iterdir() if p.name.startswith(".pull-")]


def test_pull_secrets_and_default_policy() -> None:
    auth = base64.b64encode(b"bob:s3cret").decode()
    secrets = {"a": {".dockerconfigjson": json.dumps({"auths": {
        "https://reg.example:5000": {"auth": auth},
        "other.example": {"username": "u", "password": "p"}}})},
        "b": {"other": "x"}, "c": {".dockerconfigjson": "not json"}}
    parsed = parse_pull_secrets(secrets, ["a", "b", "c", "missing"])
    assert parsed == [PullSecret("reg.example:5000", "bob", "s3cret"),
                      PullSecret("other.example", "u", "p")]
    assert "s3cret" not in repr(parsed)
    assert default_policy("quay.io/x/y") == "Always"
    assert default_policy("quay.io/x/y:latest") == "Always"
    assert default_policy("quay.io/x/y:41") == "IfNotPresent"
    assert default_policy("127.0.0.1:5000/x/y") == "Always"
    assert default_policy("quay.io/x/y@sha256:" + "a" * 64) == "IfNotPresent"


def test_an_absolute_member_lands_inside(tmp_path: Path, registry_server: RegistryServer) -> None:
    """tarfile's data filter strips the leading / (as the runtimes do): inside the image."""
    push_image(registry_server, "golden/abs", "v1",
               [_raw_layer(tmp_path, [("/rootdisk-abs-escape", b"x")])])
    store = _store(tmp_path, registry_server)
    root = Path(store.mount(f"{registry_server.host}/golden/abs:v1", policy=None,
                            pull_secrets=_secret(registry_server)))
    assert (root / "rootdisk-abs-escape").read_bytes() == b"x"
    assert not Path("/rootdisk-abs-escape").exists()


def test_a_host_of_dot_dot_reads_no_ca_beside_certs_d(tmp_path: Path) -> None:
    """The registry host comes from a pod's spec: ``..`` must not name the data dir."""
    store = ImageStore(str(tmp_path / "node"))
    store.certs_dir.mkdir(parents=True)
    planted = store.certs_dir.parent / "planted.crt"
    planted.write_text("-----BEGIN CERTIFICATE-----\nnot a CA\n-----END CERTIFICATE-----\n")
    from ociregistry.reference import ImageReference
    with store._access(ImageReference("..", "x/y", "v1", None), []) as access:
        assert access.ca_file is None
    (store.certs_dir / "reg.example").mkdir()
    shutil.copy(planted, store.certs_dir / "reg.example" / "ca.crt")
    with store._access(ImageReference("reg.example", "x/y", "v1", None), []) as access:
        assert access.ca_file is not None and b"not a CA" in Path(access.ca_file).read_bytes()
