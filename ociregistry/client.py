"""Talking to a registry with python-dxf: connect with credentials, resolve a manifest digest.

python-dxf (``dxf``) does the registry HTTP API v2: Basic and Bearer-token auth, manifests
by tag or digest, blob pulls that verify the sha256 as they stream. This module adds what
CDI's users configure: credentials from the DataVolume's ``secretRef``, a CA bundle from
``certConfigMap``, and CDIConfig ``insecureRegistries`` (unverified TLS, falling back to
plain HTTP as containers/image does). Credentials are only ever held in memory. What a
registry sends is read bounded (the ``*_LIMIT`` constants), and :func:`resolve_digest` is
bounded in time (:data:`DEADLINE_READS`): the DataImportCron controller talks to
registries from its own process.
"""

from __future__ import annotations

import hashlib
import json
import ssl
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import requests
import urllib3
from dxf import DXF, DXFBase
from dxf import exceptions as dxf_errors

from ociregistry.deadline import Deadline
from ociregistry.reference import ImageReference

MEDIA_DOCKER_MANIFEST = "application/vnd.docker.distribution.manifest.v2+json"
MEDIA_DOCKER_LIST = "application/vnd.docker.distribution.manifest.list.v2+json"
MEDIA_OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
MEDIA_OCI_INDEX = "application/vnd.oci.image.index.v1+json"
MANIFEST_TYPES = (MEDIA_DOCKER_MANIFEST, MEDIA_OCI_MANIFEST)
INDEX_TYPES = (MEDIA_DOCKER_LIST, MEDIA_OCI_INDEX)
_ACCEPT = ", ".join((*MANIFEST_TYPES, *INDEX_TYPES))
DEFAULT_TIMEOUT = 60.0
DEADLINE_READS = 2
""":func:`resolve_digest` (an insecure registry's TLS sniff, the manifest's challenge, the
token and its redirects, the manifest: a handful of requests, each answered in well under
a second by a working registry) may last this many per-read timeouts in all, unless
:attr:`Access.deadline` says otherwise; past that it fails as :class:`RegistryUnavailable`,
retried at the next poll. One timeout's worth is what a single silent read may already
take; the second is for everything else. Ours: CDI (c07cdb6fb, v1.66) polls from a
CronJob's pod, not the controller, with ``GetImageDigest`` under ``context.WithCancel``
(no deadline), and containers/image v5.32.0 bounds only the dial (30 s) and the TLS
handshake (10 s)."""
MANIFEST_LIMIT = 4 * 1024 * 1024
"""containers/image's maxManifestBodySize: a manifest (or index) larger than this is
refused before more of it is read (a registry could send gigabytes, and the DataImportCron
controller reads manifests in its own process)."""
ERROR_BODY_LIMIT = 64 * 1024
"""Bytes of an error answer read for its message."""
TOKEN_LIMIT = 1024 * 1024
"""containers/image's MaxAuthTokenBodySize (internal/iolimits, v5.36.1; read by
docker_client.go's newBearerTokenFromHTTPResponseBody), also its MaxErrorBodySize: python-dxf
reads the Bearer-token answer whole, so every answer it does not stream is cut off here."""
CHALLENGE_LIMIT = 16 * 1024
"""The longest WWW-Authenticate challenge python-dxf is given to parse (ours; containers/image
has none): its parser (www-authenticate 0.9.2) takes time growing faster than the square of
the header's length (measured: 64 KiB 0.5 s, 256 KiB 8 s), and http.client lets a server send
100 header lines of 64 KiB, which requests joins into one. Docker Hub's, for
library/ubuntu, is 111 bytes."""
# containers/image's ErrUnauthorizedForCredentials, which CDI's importer reports as is
AUTH_FAILED = "unable to retrieve auth token: invalid username/password"


class RegistryError(RuntimeError):
    """A registry operation failed; the message follows containers/image's wording."""


class RegistryUnauthorized(RegistryError):
    """The registry refused the credentials (or wants some)."""


class RegistryNotFound(RegistryError):
    """No such repository, tag, manifest or blob."""


class RegistryUnavailable(RegistryError):
    """The registry could not be reached or failed (5xx, timeout): worth retrying."""


def classify(ref: ImageReference, e: Exception) -> RegistryError:
    """The RegistryError for a failed request of ``ref`` (its kind decides retries)."""
    text = describe_error(ref, e)
    status = None
    if isinstance(e, requests.exceptions.HTTPError) and e.response is not None:
        status = e.response.status_code
    if status in (401, 403) or isinstance(e, dxf_errors.DXFUnauthorizedError):
        return RegistryUnauthorized(text)
    if status == 404:
        return RegistryNotFound(text)
    if isinstance(e, requests.exceptions.SSLError):
        return RegistryError(text)  # an untrusted certificate stays untrusted: no retry
    if (status is None and isinstance(e, requests.exceptions.RequestException)) \
            or (status is not None and status >= 500):
        return RegistryUnavailable(text)
    return RegistryError(text)


@dataclass(frozen=True)
class Credentials:
    """Registry user and password (CDI secret keys ``accessKeyId``/``secretKey``)."""

    username: str
    password: str

    def __repr__(self) -> str:  # never print the password
        return f"Credentials(username={self.username!r}, password=<hidden>)"


@dataclass(frozen=True)
class Access:
    """How to reach one registry: credentials, CA bundle, and whether it is insecure."""

    credentials: Credentials | None = None
    ca_file: str | None = None  # PEM bundle added to verification; None: system roots
    insecure: bool = False  # listed in CDIConfig spec.insecureRegistries
    timeout: float = DEFAULT_TIMEOUT
    """requests' timeout: for a connection, and for each read from it."""
    deadline: float | None = None
    """The longest :func:`resolve_digest` may take, all its requests included; None:
    :data:`DEADLINE_READS` times ``timeout``."""


def is_insecure(host: str, insecure_registries: list[str] | tuple[str, ...]) -> bool:
    """CDI's rule: an exact match of ``host[:port]`` in ``spec.insecureRegistries``."""
    return host in insecure_registries


def _auth(ref: ImageReference, creds: Credentials | None) -> Any:
    def auth(dxf: DXFBase, response: requests.Response) -> None:
        challenge = response.headers.get("WWW-Authenticate")
        if challenge is None:
            return  # no challenge to answer: dxf reports the 401 (containers/image alike)
        if len(challenge) > CHALLENGE_LIMIT:
            raise RegistryError(f"{ref}: requesting bearer token: the WWW-Authenticate "
                                f"challenge is longer than {CHALLENGE_LIMIT} bytes")
        try:
            if creds is None:
                dxf.authenticate(response=response)
            else:
                dxf.authenticate(creds.username, creds.password, response=response)
        except (ValueError, KeyError, TypeError, AttributeError, _AnswerTooLarge) as e:
            # the challenge or the token answer is not what python-dxf expects (a realm it
            # cannot fetch, no realm, an answer too large, not JSON, no token in it): the
            # server's doing, reported as such rather than as an internal error
            what = f"missing {e}" if isinstance(e, KeyError) else str(e)
            raise RegistryError(f"{ref}: requesting bearer token: {what}") from e

    return auth


def _speaks_tls(ref: ImageReference, timeout: float, deadline: Deadline | None) -> bool:
    """For an insecure registry: does ``host`` answer TLS at all (else plain HTTP)?"""
    try:
        with warnings.catch_warnings(), requests.Session() as session:
            # unverified on purpose: the host is listed insecure
            warnings.simplefilter("ignore", urllib3.exceptions.InsecureRequestWarning)
            # the answer's body unread, even a redirect's (which requests reads whole
            # even when not following it, for Response.next)
            _bounded(session, deadline).get(
                f"https://{ref.api_host}/v2/", verify=False, timeout=timeout, stream=True,
                allow_redirects=False).close()
    except requests.exceptions.SSLError:
        return False
    except requests.exceptions.ConnectionError as e:
        if isinstance(e.__context__, ssl.SSLError) or "SSL" in str(e):
            return False
        raise
    return True


class _AnswerTooLarge(RegistryError):
    """An answer python-dxf would read whole is larger than :data:`TOKEN_LIMIT`."""


def _bound_answer(response: requests.Response, *, stream: bool = False, **_: Any) -> None:
    """requests' response hook on a client's session. It runs once the headers are in and
    before requests reads a body whole, as it does for a request made without ``stream``
    (python-dxf's Bearer-token fetch) and for every redirect, followed (to free the
    connection) or not (for ``Response.next``): those are read here, bounded, or not at all."""
    if response.is_redirect:
        # only the Location is used; Go's client (containers/image) discards such a body
        # too. Closed, its body reads as empty.
        response.close()
    elif stream:
        if response.status_code == 401:
            # dxf answers a challenge from its headers alone, then drops it: close it so
            # its connection is not left holding the unread body
            response.close()
    else:
        try:
            response._content = read_bounded(response, TOKEN_LIMIT)
        except ValueError as e:
            response.close()
            raise _AnswerTooLarge(str(e)) from None


def _bounded(session: requests.Session, deadline: Deadline | None) -> requests.Session:
    """``session`` with :func:`_bound_answer` on every answer, and its connections under
    ``deadline`` if one is given."""
    session.hooks["response"].append(_bound_answer)
    if deadline is not None:
        deadline.mount(session)
    return session


class _Unopened:
    """A client's session outside its ``with`` block, where python-dxf would use requests'
    module functions, whose answers nothing bounds: refused."""

    def __getattr__(self, name: str) -> Any:
        raise RuntimeError("a registry client is used only inside its with block")


class _Client(DXF):
    """python-dxf's client whose session (one per ``with`` block) bounds every answer that
    python-dxf reads whole (:func:`_bound_answer`), and whose connections are under
    ``deadline`` if one is given."""

    def __init__(self, *args: Any, deadline: Deadline | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._deadline = deadline
        # python-dxf (pinned in pyproject.toml) keeps its sessions in _sessions, [requests]
        # until __enter__ puts a new requests.Session in front
        self._sessions = [_Unopened()]  # type: ignore[list-item]

    def __enter__(self) -> _Client:
        super().__enter__()
        session = self._sessions[0]
        assert isinstance(session, requests.Session)
        _bounded(session, self._deadline)
        return self


def connect(ref: ImageReference, access: Access, deadline: Deadline | None = None) -> DXF:
    """A DXF client for ``ref``'s repository, to use in a ``with`` block; not yet
    authenticated (done on the first 401). Its requests, the insecure TLS sniff's
    included, are cut off when ``deadline`` passes."""
    tlsverify: bool | str = access.ca_file if access.ca_file else True
    plain_http = False
    if access.insecure:
        tlsverify = False
        plain_http = not _speaks_tls(ref, access.timeout, deadline)
    return _Client(
        ref.api_host,
        ref.repository,
        auth=_auth(ref, access.credentials),
        insecure=plain_http,
        tlsverify=tlsverify,
        timeout=access.timeout,
        deadline=deadline,
    )


def describe_error(ref: ImageReference, e: Exception) -> str:
    """containers/image-like text for a failed manifest read of ``ref``."""
    where = f"reading manifest {ref.alias} in {ref.host}/{ref.repository}"
    if isinstance(e, requests.exceptions.HTTPError) and e.response is not None:
        status = e.response.status_code
        if status == 401:
            return f"{AUTH_FAILED}: {_registry_message(e.response)}"
        return f"{where}: {_registry_message(e.response)}"
    if isinstance(e, dxf_errors.DXFUnauthorizedError):
        # the registry's 401 body (UNAUTHORIZED, "authentication required") as c/image wraps it
        return f"{AUTH_FAILED}: unauthorized: authentication required"
    return f"{where}: {e}"


def read_bounded(response: requests.Response, limit: int) -> bytes:
    """A response's body, refused (``ValueError``, containers/image's words) as soon as it
    announces or sends more than ``limit`` bytes."""
    announced = response.headers.get("Content-Length", "")
    if announced.isdigit() and int(announced) > limit:
        raise ValueError(f"exceeded maximum allowed size of {limit} bytes")
    body = bytearray()
    for chunk in response.iter_content(64 * 1024):
        body += chunk
        if len(body) > limit:
            raise ValueError(f"exceeded maximum allowed size of {limit} bytes")
    return bytes(body)


def _registry_message(response: requests.Response) -> str:
    """The registry's own ``errors[0]`` as ``code: message`` (lower-cased code), from at
    most ``ERROR_BODY_LIMIT`` bytes of the answer."""
    try:
        errors = json.loads(read_bounded(response, ERROR_BODY_LIMIT)).get("errors") or []
        first = errors[0]
        return f"{str(first.get('code', '')).lower().replace('_', ' ')}: {first.get('message', '')}"
    except (ValueError, AttributeError, IndexError, TypeError):
        return f"{response.status_code} {response.reason}"


@dataclass(frozen=True)
class Manifest:
    """One manifest as fetched: its digest, media type and parsed JSON."""

    digest: str
    media_type: str
    body: Mapping[str, Any]


def get_manifest(dxf: DXF, ref: ImageReference, alias: str | None = None) -> Manifest:
    """Fetch the manifest (or index) for ``alias`` (default: ``ref``'s), digest checked."""
    alias = alias or ref.alias
    try:
        # dxf's get_manifest_and_response reads the whole body before it returns; its
        # request method (python-dxf pinned in pyproject.toml) passes stream=True through,
        # so the body is read here, bounded.
        r: requests.Response = dxf._request(  # type: ignore[no-untyped-call]
            "get", "manifests/" + alias, headers={"Accept": _ACCEPT}, stream=True)
        try:
            content = read_bounded(r, MANIFEST_LIMIT)
        finally:
            r.close()
    except ValueError as e:
        raise RegistryError(f"{ref}: reading the manifest: {e}") from e
    except (requests.exceptions.RequestException, dxf_errors.DXFError) as e:
        error = classify(ref, e)  # reads at most ERROR_BODY_LIMIT of an error's answer
        response = getattr(e, "response", None)
        if response is not None:
            response.close()
        raise error from e
    digest = "sha256:" + hashlib.sha256(content).hexdigest()
    announced = r.headers.get("Docker-Content-Digest")
    if announced and announced != digest:
        raise RegistryError(f"{ref}: manifest digest {digest} does not match {announced}")
    if alias.startswith("sha256:") and alias != digest:
        raise RegistryError(f"{ref}: manifest digest {digest} does not match {alias}")
    try:
        body = json.loads(content)
    except ValueError as e:
        raise RegistryError(f"{ref}: manifest is not JSON: {e}") from e
    media_type = body.get("mediaType") or r.headers.get("Content-Type", "").split(";")[0]
    return Manifest(digest=digest, media_type=media_type, body=body)


def resolve_digest(ref: ImageReference, access: Access) -> str:
    """The digest of what ``ref`` names now (the index's digest for a manifest list).

    This is the value a DataImportCron compares between polls. The whole of it is bounded
    by the access's deadline (:data:`DEADLINE_READS`): past it, :class:`RegistryUnavailable`.
    """
    seconds = access.deadline if access.deadline is not None \
        else DEADLINE_READS * access.timeout
    with Deadline(seconds, name=f"registry deadline {ref.host}") as deadline:
        try:
            with connect(ref, access, deadline) as dxf:
                digest = get_manifest(dxf, ref).digest
        except Exception as e:
            if deadline.passed:  # whatever the cut-off read raised
                raise _deadline_passed(ref, seconds) from e
            raise
        if deadline.passed:  # a body cut off at the deadline may read as a short one
            raise _deadline_passed(ref, seconds)
        return digest


def _deadline_passed(ref: ImageReference, seconds: float) -> RegistryUnavailable:
    return RegistryUnavailable(
        f"reading manifest {ref.alias} in {ref.host}/{ref.repository}: context deadline "
        f"exceeded ({ref.host} did not answer in full within {seconds:g} s)")
