"""The SeaweedFS fixture is a real S3 server: auth enforced, ranges, presigned URLs, loopback."""

from __future__ import annotations

import os
from pathlib import Path

import botocore.exceptions
import pytest
import requests

from tests.fixtures.s3server import S3Server

DATA = os.urandom(3 * 1024 * 1024 + 17)


@pytest.fixture
def stored(s3_server: S3Server, s3_bucket: str) -> str:
    return s3_server.put_bytes(s3_bucket, "images/disk.img", DATA)


def test_put_and_ranged_get(s3_server: S3Server, s3_bucket: str, stored: str) -> None:
    assert stored == f"s3://{s3_bucket}/images/disk.img"
    client = s3_server.client()
    head = client.head_object(Bucket=s3_bucket, Key="images/disk.img")
    assert head["ContentLength"] == len(DATA)
    part = client.get_object(Bucket=s3_bucket, Key="images/disk.img", Range="bytes=1000-1999")
    assert part["ContentRange"] == f"bytes 1000-1999/{len(DATA)}"
    assert part["Body"].read() == DATA[1000:2000]


def test_put_file_multipart(s3_server: S3Server, s3_bucket: str, tmp_path: Path) -> None:
    path = tmp_path / "big.img"
    path.write_bytes(DATA * 3)  # > 8 MiB: boto3 uploads it in parts
    s3_server.put_file(s3_bucket, "big.img", path)
    body = s3_server.client().get_object(Bucket=s3_bucket, Key="big.img")["Body"].read()
    assert body == DATA * 3


def test_wrong_secret_is_403(s3_server: S3Server, s3_bucket: str, stored: str) -> None:
    bad = s3_server.client(secret_key="not-the-secret", retries=0)
    with pytest.raises(botocore.exceptions.ClientError) as e:
        bad.get_object(Bucket=s3_bucket, Key="images/disk.img")
    assert e.value.response["ResponseMetadata"]["HTTPStatusCode"] == 403
    assert e.value.response["Error"]["Code"] == "SignatureDoesNotMatch"


def test_unknown_key_id_is_403(s3_server: S3Server, s3_bucket: str, stored: str) -> None:
    bad = s3_server.client(access_key="nobody", retries=0)
    with pytest.raises(botocore.exceptions.ClientError) as e:
        bad.get_object(Bucket=s3_bucket, Key="images/disk.img")
    assert e.value.response["ResponseMetadata"]["HTTPStatusCode"] == 403


def test_anonymous_http_is_403(s3_server: S3Server, s3_bucket: str, stored: str) -> None:
    assert (
        requests.get(s3_server.http_url(s3_bucket, "images/disk.img"), timeout=10).status_code
        == 403
    )


def test_missing_object_is_404(s3_server: S3Server, s3_bucket: str) -> None:
    with pytest.raises(botocore.exceptions.ClientError) as e:
        s3_server.client().get_object(Bucket=s3_bucket, Key="absent.img")
    assert e.value.response["ResponseMetadata"]["HTTPStatusCode"] == 404


def test_presigned_url_gets_ranges_but_refuses_head(
    s3_server: S3Server, s3_bucket: str, stored: str
) -> None:
    url = s3_server.presigned_url(s3_bucket, "images/disk.img")
    assert "X-Amz-Signature=" in url
    full = requests.get(url, timeout=10)
    assert (full.status_code, full.content) == (200, DATA)
    part = requests.get(url, headers={"Range": "bytes=-10"}, timeout=10)
    assert (part.status_code, part.content) == (206, DATA[-10:])
    assert requests.head(url, timeout=10).status_code == 403
    tampered = url.replace("images/disk.img", "images/other.img")
    assert requests.get(tampered, timeout=10).status_code == 403


def test_secret_file(s3_server: S3Server, tmp_path: Path) -> None:
    path = s3_server.write_secret_file(tmp_path / "secret")
    lines = path.read_text().splitlines()
    assert lines == [f"accessKeyId={s3_server.access_key}", f"secretKey={s3_server.secret_key}"]
    assert path.stat().st_mode & 0o077 == 0


def _listening_addresses(pid: int) -> set[str]:
    """Local addresses of the LISTEN sockets owned by ``pid`` (from /proc)."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    found = set()
    for table in ("tcp", "tcp6"):
        for line in Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] == "0A" and fields[9] in inodes:  # 0A: LISTEN
                found.add(fields[1].split(":")[0])
    return found


def test_listens_on_loopback_only(s3_server: S3Server) -> None:
    assert s3_server.process is not None
    addresses = _listening_addresses(s3_server.process.pid)
    assert addresses == {"0100007F"}  # 127.0.0.1, little-endian hex


def test_not_ready_in_time_fails_clearly_and_leaves_nothing_running(tmp_path: Path) -> None:
    server = S3Server(tmp_path, start_timeout=0.0)
    with pytest.raises(TimeoutError, match="SeaweedFS S3 not ready after 0 s"):
        server.start()
    assert server.process is None
    for pid in Path("/proc").iterdir():  # no weed left with our data directory
        try:
            cmdline = (pid / "cmdline").read_bytes()
        except OSError:
            continue
        assert f"-dir={tmp_path}/data".encode() not in cmdline
