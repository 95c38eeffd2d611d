"""The environment as upstream's importer pod gets it, parsed once; errors name the field."""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path

import pytest

from importer.config import (
    ContentType,
    ImporterConfig,
    from_env,
)
from importer.errors import ConfigError
from vocab import sources

BASE = {"IMPORTER_SOURCE": "http", "IMPORTER_ENDPOINT": "https://example.test/disk.qcow2",
        "IMPORTER_DESTINATION": "/data/disk.img"}


def test_upstream_variables() -> None:
    config = from_env({
        **BASE,
        "IMPORTER_IMAGE_SIZE": "10Gi",
        "IMPORTER_CHECKSUM": "sha256:" + "ab" * 32,
        "IMPORTER_CONTENTTYPE": "kubevirt",
        "IMPORTER_ACCESS_KEY_ID": "user",
        "IMPORTER_SECRET_KEY": "pw",
        "IMPORTER_EXTRA_HEADER_0": "X-A: 1",
        "IMPORTER_EXTRA_HEADER_10": "X-C: 3",
        "IMPORTER_EXTRA_HEADER_2": "X-B: 2",
        "FILESYSTEM_OVERHEAD": "0.055",
        "PREALLOCATION": "true",
        "OWNER_UID": "uid-1",
    })
    assert config.image_size == 10 * 1024**3
    assert config.checksum is not None and config.checksum.algorithm == "sha256"
    assert config.extra_headers == (("X-A", "1"), ("X-B", "2"), ("X-C", "3"))
    assert config.filesystem_overhead == Fraction(55, 1000)
    assert config.preallocation and config.owner_uid == "uid-1"
    assert config.dest == Path("/data/disk.img")


def test_metrics_listen_on_the_pod_ip() -> None:
    assert from_env(BASE).metrics_addr == "0.0.0.0"
    assert from_env({**BASE, "POD_IP": "127.0.5.9"}).metrics_addr == "127.0.5.9"


def test_secrets_stay_out_of_repr() -> None:
    config = from_env({**BASE, "IMPORTER_ACCESS_KEY_ID": "AKIDSECRET",
                       "IMPORTER_SECRET_KEY": "topsecret", "IMPORTER_EXTRA_HEADER_0": "A: tok"})
    assert "topsecret" not in repr(config) and "AKIDSECRET" not in repr(config)
    assert "tok" not in repr(config)


@pytest.mark.parametrize(("env", "field", "words"), [
    ({"IMPORTER_SOURCE": "ftp"}, "IMPORTER_SOURCE", "unknown source 'ftp'"),
    ({"IMPORTER_ENDPOINT": "file:///etc/passwd"}, "IMPORTER_ENDPOINT", "scheme 'file'"),
    ({"IMPORTER_ENDPOINT": "ftp://host/x"}, "IMPORTER_ENDPOINT", "not allowed"),
    ({"IMPORTER_ENDPOINT": ""}, "IMPORTER_ENDPOINT", "required"),
    ({"IMPORTER_ENDPOINT": "http:///x"}, "IMPORTER_ENDPOINT", "no host"),
    ({"IMPORTER_IMAGE_SIZE": "ten"}, "IMPORTER_IMAGE_SIZE", "quantity"),
    ({"IMPORTER_IMAGE_SIZE": "0"}, "IMPORTER_IMAGE_SIZE", "positive"),
    ({"IMPORTER_CHECKSUM": "crc32:abcd"}, "IMPORTER_CHECKSUM", "unsupported algorithm"),
    ({"IMPORTER_CHECKSUM": "sha256:abc"}, "IMPORTER_CHECKSUM", "64 hex digits"),
    ({"IMPORTER_CHECKSUM": "abc"}, "IMPORTER_CHECKSUM", "ALGORITHM:HEX"),
    ({"IMPORTER_CONTENTTYPE": "iso"}, "IMPORTER_CONTENTTYPE", "'kubevirt' or 'archive'"),
    ({"FILESYSTEM_OVERHEAD": "6%"}, "FILESYSTEM_OVERHEAD", "fraction"),
    ({"PREALLOCATION": "maybe"}, "PREALLOCATION", "boolean"),
    ({"IMPORTER_EXTRA_HEADER_0": "no colon"}, "IMPORTER_EXTRA_HEADER_0", "header"),
    ({"IMPORTER_CERT_DIR": "/nonexistent/certs"}, "IMPORTER_CERT_DIR", "not a directory"),
    ({"IMPORTER_METRICS_PORT": "99999"}, "IMPORTER_METRICS_PORT", "port"),
    ({"IMPORTER_SOURCE": "s3", "IMPORTER_ENDPOINT": "s3://bucket"}, "IMPORTER_ENDPOINT",
     "no object key"),
    ({"IMPORTER_SOURCE": "s3", "IMPORTER_ENDPOINT": "http://host/bucketonly"},
     "IMPORTER_ENDPOINT", "path-style"),
    ({"IMPORTER_SOURCE": "blank", "IMPORTER_ENDPOINT": ""}, "IMPORTER_IMAGE_SIZE", "size"),
    ({"IMPORTER_SOURCE": "registry", "IMPORTER_ENDPOINT": "https://quay.io/x/y"},
     "IMPORTER_ENDPOINT", "scheme 'https' is not allowed for a registry source"),
    ({"IMPORTER_SOURCE": "registry", "IMPORTER_ENDPOINT": "docker://quay.io/x/Y:1"},
     "IMPORTER_ENDPOINT", "invalid repository name component 'Y'"),
    ({"IMPORTER_SOURCE": "registry", "IMPORTER_ENDPOINT": "docker://quay.io/x@sha256:12"},
     "IMPORTER_ENDPOINT", "invalid digest"),
])
def test_errors_name_the_field(env: dict[str, str], field: str, words: str) -> None:
    with pytest.raises(ConfigError) as raised:
        from_env({**BASE, **env})
    assert raised.value.message.startswith(field + ":")
    assert words in raised.value.message


def test_registry_variables() -> None:
    config = from_env({**BASE, "IMPORTER_SOURCE": "registry",
                       "IMPORTER_ENDPOINT": "docker://quay.io/containerdisks/fedora:41",
                       "IMPORTER_REGISTRY_IMAGE_ARCHITECTURE": "arm64"})
    assert (config.source, config.option(sources.REGISTRY_ARCHITECTURE)) == (sources.REGISTRY,
                                                                     "arm64")


def test_blank_needs_no_url() -> None:
    config = from_env({"IMPORTER_SOURCE": "blank", "IMPORTER_IMAGE_SIZE": "1Gi",
                       "IMPORTER_DESTINATION": "/data/disk.img"})
    assert config.source == sources.BLANK


def test_archive_content_type() -> None:
    config = ImporterConfig(source=sources.HTTP, endpoint="http://h/x.tar",
                            content_type=ContentType.ARCHIVE)
    assert config.content_type is ContentType.ARCHIVE


def _secret_volume(root: Path, index: int, data: dict[str, bytes]) -> None:
    """A Secret mounted as the kubelet's atomic writer lays it out: the keys are links
    through ``..data`` into a timestamped directory."""
    mount = root / str(index)
    stamp = mount / "..2026_12_01_00_00_00.1"
    stamp.mkdir(parents=True)
    for key, value in data.items():
        (stamp / key).write_bytes(value)
    (mount / "..data").symlink_to(stamp.name)
    for key in data:
        (mount / key).symlink_to(f"..data/{key}")


def test_secret_extra_headers_from_mounted_secrets(tmp_path: Path) -> None:
    """upstream's ``secretExtraHeaders``: one header per key of each Secret mounted under
    /extraheaders/<index>, read after the plain ``extraHeaders`` of the environment."""
    _secret_volume(tmp_path, 0, {"token": b"Authorization: Bearer t0ps3cret\n"})
    _secret_volume(tmp_path, 1, {"a": b"X-Tenant: blue", "b": b"X-Team:red  "})
    _secret_volume(tmp_path, 10, {"z": b"X-Late: 10"})
    config = from_env({**BASE, "IMPORTER_EXTRA_HEADER_0": "X-Plain: 1",
                       "IMPORTER_SECRET_EXTRA_HEADERS_DIR": str(tmp_path)})
    assert config.extra_headers == (("X-Plain", "1"), ("Authorization", "Bearer t0ps3cret"),
                                    ("X-Tenant", "blue"), ("X-Team", "red"), ("X-Late", "10"))
    assert "t0ps3cret" not in repr(config)
    assert from_env({**BASE, "IMPORTER_SECRET_EXTRA_HEADERS_DIR": str(tmp_path / "none")}
                    ).extra_headers == ()


@pytest.mark.parametrize(("content", "problem"), [
    (b"Bearer t0ps3cret", "not a 'Name: value' header"),
    (b"Bad Name: t0ps3cret", "not a 'Name: value' header"),
    (b"X-A: t0ps3cret\r\nX-Evil: 1", "has a line break or NUL in its value"),
    (b"X-A: t0ps3cret" + b"x" * 9000, "longer than 8192 bytes"),
    (b"X-A: \xff t0ps3cret", "not UTF-8 text"),
])
def test_a_bad_secret_header_names_the_file_never_the_value(tmp_path: Path, content: bytes,
                                                            problem: str) -> None:
    _secret_volume(tmp_path, 0, {"token": content})
    with pytest.raises(ConfigError) as err:
        from_env({**BASE, "IMPORTER_SECRET_EXTRA_HEADERS_DIR": str(tmp_path)})
    assert str(tmp_path / "0" / "token") in err.value.message and problem in err.value.message
    assert "t0ps3cret" not in err.value.message
