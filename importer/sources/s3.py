"""S3 objects, read with boto3 ranged GETs (so S3 imports convert while they stream and
report progress, which upstream's S3 source can't).

The object is named as upstream takes it — path-style ``http(s)://host[:port]/bucket/key``
— or as ``s3://bucket/key`` with an optional custom endpoint. Without credentials the
requests go unsigned (public buckets).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote, urlsplit

import boto3
import botocore.config
import botocore.exceptions
from botocore import UNSIGNED

from importer.config import ImporterConfig, require_host
from importer.errors import (
    ConfigError,
    ImporterError,
    InvalidImage,
    InvalidResponse,
    NotFound,
    SourceChanged,
    TransferError,
    Unauthorized,
)
from importer.formats import HEAD_BYTES
from importer.sources.base import CHUNK, OpenStreams, Probe, Validators, call_with_retries
from pki.bundle import dir_bundle
from vocab import sources

_REGION = re.compile(r"s3[.-]([a-z0-9-]+)\.amazonaws\.com$")
_NOT_FOUND = {"404", "NoSuchKey", "NoSuchBucket", "NotFound"}
_DENIED = {"401", "403", "AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch",
           "ExpiredToken", "InvalidToken", "Forbidden"}
_TRANSIENT = (
    botocore.exceptions.EndpointConnectionError,
    botocore.exceptions.ConnectionClosedError,
    botocore.exceptions.ReadTimeoutError,
    botocore.exceptions.ConnectTimeoutError,
    botocore.exceptions.ResponseStreamingError,
    botocore.exceptions.IncompleteReadError,
)


@dataclass(frozen=True)
class ObjectLocation:
    endpoint: str | None
    bucket: str
    key: str
    region: str


def check_url(url: str, *, field_name: str) -> None:
    """A host, and an object: ``s3://BUCKET/KEY`` or path-style ``http(s)://host/BUCKET/KEY``."""
    require_host(url, field_name=field_name)
    parts = urlsplit(url)
    path = parts.path.lstrip("/")
    if parts.scheme == "s3" and not path:
        raise ConfigError(f"{field_name}: {url!r} names a bucket but no object key")
    if parts.scheme != "s3" and "/" not in path:
        raise ConfigError(f"{field_name}: {url!r} must be path-style: /BUCKET/KEY")


def open_source(config: ImporterConfig) -> S3Source:
    return S3Source(config)


def locate(url: str, *, endpoint: str | None = None) -> ObjectLocation:
    parts = urlsplit(url)
    if parts.scheme == "s3":
        bucket, key = parts.netloc, unquote(parts.path.lstrip("/"))
        host = urlsplit(endpoint).hostname if endpoint else None
    else:
        bucket, _, key = unquote(parts.path.lstrip("/")).partition("/")
        endpoint = f"{parts.scheme}://{parts.netloc}"
        host = parts.hostname
    match = _REGION.search(host or "")
    return ObjectLocation(endpoint, bucket, key, match.group(1) if match else "us-east-1")


class S3Source:
    """Every GET after the probe names the probed object (``If-Match`` its ETag) and its
    answer is checked against the probe's ETag, Last-Modified and size: an object
    replaced mid-import is ``SourceChanged``, whether or not the server honours If-Match.
    """

    def __init__(self, config: ImporterConfig) -> None:
        self.config = config
        self.location = locate(config.endpoint, endpoint=config.option(sources.S3_ENDPOINT))
        self._bundle = None
        verify: bool | str = True
        if config.insecure_tls:
            verify = False
        elif config.cert_dir is not None:
            self._bundle = dir_bundle(config.cert_dir)
            verify = self._bundle.name
        options: dict[str, Any] = {
            "s3": {"addressing_style": "path"},
            "retries": {"total_max_attempts": 1},  # retries are the importer's own, resuming
            "connect_timeout": 10,
            "read_timeout": config.read_timeout,
        }
        if not config.access_key_id:
            options["signature_version"] = UNSIGNED
        self.client = boto3.session.Session().client(
            "s3",
            endpoint_url=self.location.endpoint,
            region_name=self.location.region,
            aws_access_key_id=config.access_key_id,
            aws_secret_access_key=config.secret_key,
            verify=verify,
            config=botocore.config.Config(**options),
        )
        self._name = f"s3://{self.location.bucket}/{self.location.key}"
        self._streams = OpenStreams()
        self._pinned: tuple[Validators, int | None] | None = None
        """The probe's validators and size; every later answer must match them."""

    def probe(self) -> Probe:
        def attempt() -> Probe:
            self._pinned = None
            body, total = self._get(f"bytes=0-{HEAD_BYTES - 1}")
            assert self._pinned is not None
            return Probe(size=total, ranged=True, head=self._read(body),
                         validators=self._pinned[0])

        return call_with_retries(self.config, f"probe {self._name}", attempt)

    def read_range(self, start: int, length: int) -> bytes:
        def attempt() -> bytes:
            body, _ = self._get(f"bytes={start}-{start + length - 1}")
            return self._read(body)

        return call_with_retries(self.config, f"read {length} bytes at {start}", attempt)

    def stream(self, offset: int = 0) -> Iterator[bytes]:
        body, _ = self._get(f"bytes={offset}-" if offset else None)
        with self._streams.held(body):
            try:
                yield from body.iter_chunks(CHUNK)
            except _TRANSIENT as err:
                raise TransferError(f"reading {self._name}: {err}", cause=err) from err

    def fork(self) -> S3Source:
        return self  # a boto3 client is thread-safe: one serves every reader thread

    def close(self) -> None:
        self._streams.close()
        self.client.close()
        if self._bundle is not None:
            self._bundle.close()

    def _get(self, byte_range: str | None) -> tuple[Any, int | None]:
        args = {"Bucket": self.location.bucket, "Key": self.location.key}
        if byte_range:
            args["Range"] = byte_range
        pinned = self._pinned
        if pinned is not None and pinned[0].etag is not None:
            args["IfMatch"] = pinned[0].etag
        try:
            response = self.client.get_object(**args)
        except botocore.exceptions.ClientError as err:
            raise self._client_error(err) from err
        except _TRANSIENT as err:
            raise TransferError(f"connecting to {self._name}: {err}", cause=err) from err
        content_range = response.get("ContentRange", "")
        total = int(content_range.rsplit("/", 1)[1]) if "/" in content_range else None
        if total is None and not byte_range:
            total = response.get("ContentLength")
        try:
            self._pin_or_check(response, total)
        except ImporterError:
            response["Body"].close()
            raise
        if byte_range and content_range:
            asked = byte_range.removeprefix("bytes=").split("-", 1)[0]
            given = content_range.removeprefix("bytes ").split("-", 1)[0]
            if asked != given:
                response["Body"].close()
                raise InvalidResponse(f"{self._name}: asked for {byte_range}, the answer"
                                      f" holds {content_range}")
        return response["Body"], total

    def _pin_or_check(self, response: dict[str, Any], total: int | None) -> None:
        """The first answer pins the object; each later one must be that object."""
        modified = response.get("LastModified")
        now = Validators(etag=response.get("ETag"),
                         last_modified=modified.isoformat() if modified is not None else None)
        if self._pinned is None:
            self._pinned = (now, total)
            return
        validators, size = self._pinned
        validators.check(now, self._name)
        if size is not None and total is not None and total != size:
            raise SourceChanged(f"{self._name} changed during the import: it was {size}"
                                f" bytes, is now {total}")

    def _read(self, body: Any) -> bytes:
        try:
            data: bytes = body.read()
        except _TRANSIENT as err:
            raise TransferError(f"reading {self._name}: {err}", cause=err) from err
        finally:
            body.close()
        return data

    def _client_error(self, err: botocore.exceptions.ClientError) -> ImporterError:
        error = err.response.get("Error", {})
        code = str(error.get("Code", ""))
        status = err.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0)
        message = f"S3 {self._name}: {code or status} {error.get('Message', '')}".strip()
        if code == "PreconditionFailed" or status == 412:
            return SourceChanged(f"{self._name} changed during the import: it no longer has"
                                 f" the ETag {self._pinned[0].etag if self._pinned else ''}")
        if code in _NOT_FOUND or status == 404:
            return NotFound(message)
        if code in _DENIED or status in (401, 403):
            return Unauthorized(message)
        if code == "InvalidRange":
            return InvalidImage(f"{self._name} is empty")
        if status >= 500 or code in ("SlowDown", "RequestTimeout", "ServiceUnavailable"):
            return TransferError(message)
        return ImporterError(message)
