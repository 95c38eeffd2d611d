"""HTTP and HTTPS images, read with requests.

One ranged GET of the head answers everything ``probe`` needs: a 206 says random access
works and gives the total size (no HEAD, which presigned URLs refuse); a 200 says the
server ignores Range, and the importer streams instead. TLS is verified against the
system roots plus the CA files in the cert dir; basic auth comes from the access key
pair, extra headers from the config; proxies come from the environment as usual.
"""

from __future__ import annotations

import logging
import re
import tempfile
from collections.abc import Iterator

import requests
import urllib3

from importer.config import ImporterConfig
from importer.errors import (
    ConfigError,
    ImporterError,
    InvalidImage,
    InvalidResponse,
    NotFound,
    SourceChanged,
    TooManyRedirects,
    TransferError,
    Unauthorized,
)
from importer.formats import HEAD_BYTES
from importer.redact import redact_url
from importer.sources.base import (
    CHUNK,
    USER_AGENT,
    OpenStreams,
    Probe,
    Validators,
    call_with_retries,
)
from pki.bundle import dir_bundle

logger = logging.getLogger(__name__)

CONNECT_TIMEOUT = 10  # and config.read_timeout between bytes: a stalled read is retried
_CONTENT_RANGE = re.compile(r"^bytes\s+(\d+)-(\d+)/(\d+|\*)$")


def open_source(config: ImporterConfig) -> HTTPSource:
    return HTTPSource(config)


class HTTPSource:
    def __init__(self, config: ImporterConfig) -> None:
        self.config = config
        self.url = config.endpoint
        self.session = requests.Session()
        self.session.headers["User-Agent"] = USER_AGENT
        self.session.headers.update(dict(config.extra_headers))
        if config.access_key_id or config.secret_key:
            self.session.auth = (config.access_key_id or "", config.secret_key or "")
        self._bundle: tempfile._TemporaryFileWrapper[bytes] | None = None
        # Passed with each request: a session-wide setting would lose to REQUESTS_CA_BUNDLE.
        self.verify: bool | str = True
        if config.insecure_tls:
            self.verify = False
        elif config.cert_dir is not None:
            self._bundle = dir_bundle(config.cert_dir)
            self.verify = self._bundle.name
        self._size: int | None = None
        self._validators: Validators | None = None
        """The probe's, pinned: every later answer must carry the same."""
        self._streams = OpenStreams()

    def probe(self) -> Probe:
        def attempt() -> Probe:
            with self._get(0, HEAD_BYTES - 1, checked=False) as response:
                head = response.raw.read(HEAD_BYTES, decode_content=False)
                kind = response.headers.get("Content-Type")
                self._validators = _validators(response)
                if response.status_code == 206:
                    total = _total_from_content_range(response.headers.get("Content-Range", ""))
                    self._size = total
                    return Probe(size=total, ranged=total is not None, head=head,
                                 content_type=kind, validators=self._validators)
                length = response.headers.get("Content-Length")
                self._size = int(length) if length and length.isdigit() else None
                return Probe(size=self._size, ranged=False, head=head, content_type=kind,
                             validators=self._validators)

        return call_with_retries(self.config, f"probe {self._safe_url()}", attempt)

    def read_range(self, start: int, length: int) -> bytes:
        def attempt() -> bytes:
            with self._get(start, start + length - 1) as response:
                if response.status_code != 206:
                    raise TransferError(f"expected 206 for a range, got {response.status_code}")
                try:
                    # One read of the whole range (``.content`` would take 10 KiB at a time).
                    data: bytes = response.raw.read(decode_content=False)
                except (requests.RequestException, urllib3.exceptions.HTTPError) as err:
                    raise TransferError(f"reading {self._safe_url()}: {err}", cause=err) from err
                if len(data) != length:
                    raise TransferError(f"short read: {len(data)} of {length} bytes at {start}")
                return data

        return call_with_retries(self.config, f"read {length} bytes at {start}", attempt)

    def stream(self, offset: int = 0) -> Iterator[bytes]:
        response = self._get(offset, None)
        with self._streams.held(response):
            skip = offset if offset and response.status_code == 200 else 0
            try:
                for chunk in response.iter_content(CHUNK):
                    if skip:
                        cut = min(skip, len(chunk))
                        chunk, skip = chunk[cut:], skip - cut
                        if not chunk:
                            continue
                    yield chunk
            except requests.RequestException as err:
                raise TransferError(f"reading {self._safe_url()}: {err}", cause=err) from err

    def fork(self) -> HTTPSource:
        """A second reader of the probed object (a requests session is not thread-safe):
        same size and validators, so its answers are checked against the probe's."""
        if self._validators is None:
            raise ImporterError("an HTTP source is forked only once it has been probed")
        other = HTTPSource(self.config)
        other._size, other._validators = self._size, self._validators
        return other

    def close(self) -> None:
        self._streams.close()
        _close_pools(self.session)
        self.session.close()
        if self._bundle is not None:
            self._bundle.close()

    def _get(self, start: int, end: int | None, *, checked: bool = True) -> requests.Response:
        headers = {"Accept-Encoding": "identity"}
        if start or end is not None:
            headers["Range"] = f"bytes={start}-{'' if end is None else end}"
        try:
            response = self.session.get(self.url, headers=headers, stream=True,
                                        timeout=(CONNECT_TIMEOUT, self.config.read_timeout),
                                        verify=self.verify)
        except requests.exceptions.SSLError as err:
            raise ImporterError(f"TLS verification of {self._safe_url()} failed: {err}",
                                cause=err) from err
        except requests.exceptions.TooManyRedirects as err:
            raise TooManyRedirects(f"{self._safe_url()}: redirect loop or too many redirects"
                                   f" ({err})", cause=err) from err
        except (requests.exceptions.InvalidSchema, requests.exceptions.MissingSchema,
                requests.exceptions.InvalidURL) as err:
            raise ConfigError(f"IMPORTER_ENDPOINT: {self._safe_url()} leads to a URL the"
                              f" importer does not fetch (only http and https): {err}",
                              cause=err) from err
        except requests.RequestException as err:
            raise TransferError(f"connecting to {self._safe_url()}: {err}", cause=err) from err
        if response.status_code == 416 and start == 0:
            response.close()
            raise InvalidImage(f"{self._safe_url()} is empty")
        if response.status_code in (200, 206):
            if checked:
                try:
                    self._check_answer(response, start, end)
                except ImporterError:
                    response.close()
                    raise
            return response
        response.close()
        raise status_error(response.status_code, self._safe_url())

    def _check_answer(self, response: requests.Response, start: int, end: int | None) -> None:
        """The answer is the object the probe saw, and (206) exactly the range asked for:
        a resumed read from a cache that answers from byte 0 must not be written at the
        resume offset."""
        if self._validators is not None:
            self._validators.check(_validators(response), self._safe_url())
        if response.status_code == 200:
            length = response.headers.get("Content-Length")
            if self._size is not None and length and length.isdigit() \
                    and int(length) != self._size:
                raise SourceChanged(f"{self._safe_url()} changed during the import: it was"
                                    f" {self._size} bytes, is now {length}")
            return
        value = response.headers.get("Content-Range", "")
        match = _CONTENT_RANGE.match(value.strip())
        if match is None:
            raise InvalidResponse(f"{self._safe_url()} answered a Range request with"
                                  f" Content-Range {value[:80]!r}")
        first, last, total = int(match.group(1)), int(match.group(2)), match.group(3)
        if total != "*" and self._size is not None and int(total) != self._size:
            raise SourceChanged(f"{self._safe_url()} changed during the import: it was"
                                f" {self._size} bytes, is now {total}")
        size = self._size if total == "*" else int(total)
        want_last = end if end is not None else (size - 1 if size is not None else last)
        if size is not None:
            want_last = min(want_last, size - 1)
        if first != start or last != want_last:
            raise InvalidResponse(
                f"{self._safe_url()} answered the range {start}-{want_last} with bytes"
                f" {first}-{last}: refusing to write them at the wrong offset")

    def _safe_url(self) -> str:
        return redact_url(self.url)


def _close_pools(session: requests.Session) -> None:
    """Close the idle keep-alive connections of ``session``'s pools. ``Session.close``
    only forgets its pools: urllib3 2 closes a pool's connections when the pool is garbage
    collected, and a pool that an error's traceback still reaches waits for a collection
    with its sockets open."""
    for adapter in session.adapters.values():
        managers = [getattr(adapter, "poolmanager", None),
                    *getattr(adapter, "proxy_manager", {}).values()]
        for manager in managers:
            pools = getattr(manager, "pools", None)
            if pools is None:
                continue
            for key in list(pools.keys()):
                pool = pools.get(key)
                if pool is not None:
                    pool.close()


def status_error(code: int, url: str) -> ImporterError:
    message = f"Unable to connect to http data source {url}: expected status code 200, got {code}"
    if code == 404:
        return NotFound(message)
    if code in (401, 403):
        return Unauthorized(message)
    if code >= 500 or code in (408, 429):
        return TransferError(message)
    return ImporterError(message)


def _validators(response: requests.Response) -> Validators:
    etag = response.headers.get("ETag")
    if etag is not None and etag.startswith("W/"):
        etag = None  # a weak ETag says nothing about the bytes
    return Validators(etag=etag, last_modified=response.headers.get("Last-Modified"))


def _total_from_content_range(value: str) -> int | None:
    match = _CONTENT_RANGE.match(value.strip())
    if not match or match.group(3) == "*":
        return None
    return int(match.group(3))
