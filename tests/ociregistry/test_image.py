"""Finding and streaming the disk of a container-disk image, against a real registry
(Distribution, TLS and Basic auth) with images pushed by the tests."""

from __future__ import annotations

import hashlib
import tarfile
from pathlib import Path

import pytest

from ociregistry.client import (
    Credentials,
    RegistryError,
    RegistryNotFound,
    RegistryUnauthorized,
)
from ociregistry.image import (
    BOOTC_REFUSED,
    NOT_FOUND,
    Platform,
    _BlobReader,
    choose_manifest,
    is_disk_member,
    open_disk,
)
from ociregistry.reference import parse_docker_url
from tests.fixtures.registry import RegistryServer, push_image, push_index, write_layer

pytestmark = pytest.mark.slow


def read_disk(registry: RegistryServer, repo: str, tag: str, **kwargs: object) -> tuple[str, bytes]:
    ref = parse_docker_url(registry.url(repo, tag))
    with open_disk(ref, registry.access(), **kwargs) as disk:  # type: ignore[arg-type]
        data = b"".join(disk.chunks(chunk_size=4096))
        assert len(data) == disk.size
        return disk.name, data


def test_disk_in_the_second_of_two_layers(registry_server: RegistryServer,
                                          tmp_path: Path) -> None:
    payload = bytes(range(256)) * 3000  # 768000 bytes: many chunks
    bottom = write_layer(tmp_path, {"etc/os-release": b"ID=test\n"}, compression="gzip",
                         dirs=("etc",))
    top = write_layer(tmp_path, {"disk/root.img": payload}, compression="zstd")
    push_image(registry_server, "golden/two", "v1", [bottom, top])
    name, data = read_disk(registry_server, "golden/two", "v1")
    assert (name, data) == ("disk/root.img", payload)


@pytest.mark.parametrize("compression", ["gzip", "zstd", "none"])
def test_each_layer_compression(registry_server: RegistryServer, tmp_path: Path,
                                compression: str) -> None:
    layer = write_layer(tmp_path, {"disk/d.raw": b"\x5a" * 70000},
                        compression=compression)  # type: ignore[arg-type]
    push_image(registry_server, "golden/c", compression, [layer])
    assert read_disk(registry_server, "golden/c", compression)[1] == b"\x5a" * 70000


def test_manifest_list_picks_the_platform(registry_server: RegistryServer,
                                          tmp_path: Path) -> None:
    amd = push_image(registry_server, "golden/list", None,
                     [write_layer(tmp_path, {"disk/a.img": b"amd64 disk"})])
    arm = push_image(registry_server, "golden/list", None,
                     [write_layer(tmp_path, {"disk/a.img": b"arm64 disk"})],
                     architecture="arm64")
    index = push_index(registry_server, "golden/list", "v1",
                       [("linux/arm64", arm), ("linux/amd64", amd)])
    assert read_disk(registry_server, "golden/list", "v1")[1] == b"amd64 disk"
    assert read_disk(registry_server, "golden/list", "v1", architecture="arm64")[1] \
        == b"arm64 disk"
    ref = parse_docker_url(registry_server.url("golden/list", "v1"))
    with open_disk(ref, registry_server.access(), architecture="arm64") as disk:
        assert (disk.reference_digest, disk.image_digest) == (index.digest, arm.digest)
    with pytest.raises(RegistryError, match="no image found in image index for architecture"
                                            " 's390x'"):
        read_disk(registry_server, "golden/list", "v1", architecture="s390x")


def test_a_single_image_of_another_architecture_is_refused(registry_server: RegistryServer,
                                                           tmp_path: Path) -> None:
    push_image(registry_server, "golden/arm", "v1",
               [write_layer(tmp_path, {"disk/a.img": b"x"})], architecture="arm64")
    with pytest.raises(RegistryError, match=r'^Error validating architecture: manifest image'
                       r' architecture: "arm64" doesn\'t match requested architecture:'
                       r' "amd64"$'):
        read_disk(registry_server, "golden/arm", "v1", architecture="amd64")
    assert read_disk(registry_server, "golden/arm", "v1")[1] == b"x"  # no choice: no check


def test_missing_tag_and_wrong_credentials(registry_server: RegistryServer,
                                           tmp_path: Path) -> None:
    push_image(registry_server, "golden/m", "v1", [write_layer(tmp_path, {"disk/a": b"a"})])
    with pytest.raises(RegistryNotFound, match="manifest unknown"):
        read_disk(registry_server, "golden/m", "v2")
    ref = parse_docker_url(registry_server.url("golden/m", "v1"))
    wrong = registry_server.access(credentials=Credentials("rootdisk", "wrong-password"))
    with pytest.raises(RegistryUnauthorized) as caught, open_disk(ref, wrong):
        pass
    assert "wrong-password" not in str(caught.value)


def test_a_tampered_layer_fails_before_the_stream_ends(registry_server: RegistryServer,
                                                       tmp_path: Path) -> None:
    layer = write_layer(tmp_path, {"disk/a.img": b"\x11" * 200000}, compression="none")
    push_image(registry_server, "golden/t", "v1", [layer])
    stored = registry_server.blob_path(layer.digest)
    data = bytearray(stored.read_bytes())
    at = data.index(b"\x11" * 64)
    data[at:at + 4] = b"EVIL"  # same size, other bytes
    stored.write_bytes(bytes(data))
    ref = parse_docker_url(registry_server.url("golden/t", "v1"))
    got = bytearray()
    with pytest.raises(RegistryError, match=f"Digest did not match, expected {layer.digest}"), \
            open_disk(ref, registry_server.access()) as disk:
        for chunk in disk.chunks():
            got += chunk
    assert len(got) == 200000  # every byte was read; the end did not come


def test_no_file_under_disk(registry_server: RegistryServer, tmp_path: Path) -> None:
    layer = write_layer(tmp_path, {"opt/a.img": b"x", "disk/.wh.old.img": b""},
                        dirs=("disk", "opt"))
    push_image(registry_server, "golden/empty", "v1", [layer])
    with pytest.raises(RegistryError, match=f"^{NOT_FOUND}$"):
        read_disk(registry_server, "golden/empty", "v1")


def test_two_files_under_disk_the_first_wins_as_upstream(registry_server: RegistryServer,
                                                         tmp_path: Path) -> None:
    layer = write_layer(tmp_path, {"disk/first.img": b"first", "disk/second.img": b"second"})
    push_image(registry_server, "golden/two-files", "v1", [layer])
    assert read_disk(registry_server, "golden/two-files", "v1") == ("disk/first.img", b"first")


def test_a_layer_that_is_not_a_tar_is_skipped(registry_server: RegistryServer,
                                              tmp_path: Path) -> None:
    junk = tmp_path / "junk"
    junk.write_bytes(b"\x00garbage that is no tar" * 100)
    from tests.fixtures.registry import Blob
    digest = "sha256:" + hashlib.sha256(junk.read_bytes()).hexdigest()
    not_tar = Blob("application/vnd.oci.image.layer.v1.tar", digest, junk.stat().st_size, junk,
                   diff_id=digest)
    good = write_layer(tmp_path, {"disk/a.img": b"good"})
    push_image(registry_server, "golden/skip", "v1", [not_tar, good])
    assert read_disk(registry_server, "golden/skip", "v1")[1] == b"good"


def test_a_symlink_under_disk_is_refused(registry_server: RegistryServer,
                                         tmp_path: Path) -> None:
    path = tmp_path / "link.tar"
    with tarfile.open(path, "w") as tar:
        info = tarfile.TarInfo("disk/root.img")
        info.type, info.linkname = tarfile.SYMTYPE, "/etc/shadow"
        tar.addfile(info)
    from tests.fixtures.registry import Blob
    digest = "sha256:" + hashlib.sha256(path.read_bytes()).hexdigest()
    blob = Blob("application/vnd.oci.image.layer.v1.tar", digest, path.stat().st_size, path,
                diff_id=digest)
    push_image(registry_server, "golden/link", "v1", [blob])
    with pytest.raises(RegistryError, match=r"disk/root\.img in layer .* is not a regular file"):
        read_disk(registry_server, "golden/link", "v1")


def test_a_bootc_image_is_refused_with_upstreams_words(registry_server: RegistryServer,
                                                       tmp_path: Path) -> None:
    push_image(registry_server, "golden/bootc", "v1", [write_layer(tmp_path, {"disk/a": b"a"})],
               labels={"containers.bootc": "1"})
    with pytest.raises(RegistryError) as caught:
        read_disk(registry_server, "golden/bootc", "v1")
    assert str(caught.value) == BOOTC_REFUSED


def test_a_blob_longer_than_its_descriptor_is_cut_off() -> None:
    reader = _BlobReader(iter([b"a" * 10, b"b" * 10]), "sha256:x", 15)
    with pytest.raises(RegistryError, match="more bytes than the 15 its descriptor declares"):
        reader.read(100)
        reader.read(100)
    short = _BlobReader(iter([b"a" * 10]), "sha256:y", 15)
    with pytest.raises(RegistryError, match="10 bytes, the manifest says 15"):
        short.drain()


@pytest.mark.parametrize(("name", "kind", "expected"), [
    ("disk/a.img", tarfile.REGTYPE, True),
    ("./disk/a.img", tarfile.REGTYPE, True),
    ("disk/", tarfile.DIRTYPE, False),
    ("disk/.wh.a.img", tarfile.REGTYPE, False),
    ("diskette/a.img", tarfile.REGTYPE, False),
    ("opt/disk/a.img", tarfile.REGTYPE, False),
])
def test_disk_member_rule(name: str, kind: bytes, expected: bool) -> None:
    info = tarfile.TarInfo(name)
    info.type = kind
    assert is_disk_member(info) is expected


def test_choose_manifest_variant_and_os() -> None:
    index = {"manifests": [
        {"digest": "sha256:1", "platform": {"os": "windows", "architecture": "amd64"}},
        {"digest": "sha256:2", "platform": {"os": "linux", "architecture": "arm", "variant": "v6"}},
        {"digest": "sha256:3", "platform": {"os": "linux", "architecture": "arm", "variant": "v7"}},
        {"digest": "sha256:4", "platform": {"os": "linux", "architecture": "amd64"}},
    ]}
    assert choose_manifest(index, Platform(architecture="amd64"))["digest"] == "sha256:4"
    assert choose_manifest(index, Platform(architecture="arm", variant="v7"))["digest"] \
        == "sha256:3"
    assert choose_manifest(index, Platform(architecture="arm"))["digest"] == "sha256:2"


def test_an_oci_archive(tmp_path: Path) -> None:
    """``oci-archive:PATH[:NAME]``: the same rules over an OCI layout in a tar file, each
    blob checked against its digest."""
    from ociregistry.image import open_archive_disk
    from tests.fixtures.registry import write_oci_archive
    one = write_layer(tmp_path / "w", {"disk/one.img": b"\x01" * 5000})
    two = write_layer(tmp_path / "w", {"disk/two.img": b"\x02" * 7000}, compression="zstd")
    archive = tmp_path / "images.tar"
    digests = write_oci_archive(archive, {"v1": [one], "v2": [two]})
    with open_archive_disk(f"oci-archive:{archive}:v2") as disk:
        assert (disk.name, b"".join(disk.chunks())) == ("disk/two.img", b"\x02" * 7000)
        assert disk.image_digest == digests["v2"]
    with pytest.raises(RegistryError, match="names 2 images"), \
            open_archive_disk(f"oci-archive://{archive}"):
        pass
    with pytest.raises(RegistryError, match="no image 'v3'"), \
            open_archive_disk(f"oci-archive:{archive}:v3"):
        pass
    with pytest.raises(RegistryError, match="absolute path"), \
            open_archive_disk("oci-archive:relative.tar"):
        pass
    # a blob whose bytes are not its digest's
    single = tmp_path / "single.tar"
    write_oci_archive(single, {"v1": [one]})
    data = bytearray(single.read_bytes())
    at = data.index(b"index.json")  # tamper inside a blob, not the index
    blob_at = data.index(one.path.read_bytes()[:64])
    assert blob_at != at
    data[blob_at + 40] ^= 0xFF
    single.write_bytes(bytes(data))
    with pytest.raises(RegistryError, match="Digest did not match"), \
            open_archive_disk(f"oci-archive:{single}") as disk:
        b"".join(disk.chunks())
