"""A registry that answers with endless bodies: a manifest, an error's text, a Bearer
token or a redirect is read only up to its bound (the DataImportCron controller reads
manifests, and fetches tokens, in its own process). One that trickles them, a byte well
within the per-read timeout, is cut off at the operation's deadline."""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import hashlib
import ssl
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from multidict import MultiDict

from ociregistry.client import (
    AUTH_FAILED,
    ERROR_BODY_LIMIT,
    MANIFEST_LIMIT,
    TOKEN_LIMIT,
    Access,
    Credentials,
    RegistryError,
    RegistryUnauthorized,
    RegistryUnavailable,
    connect,
    get_manifest,
    resolve_digest,
)
from ociregistry.reference import parse_docker_url
from tests.fixtures.appthread import AppThread
from tests.fixtures.tls import TlsMaterial, make_tls

MiB = 1024 * 1024


class _UntilClose(web.StreamResponse):
    """An answer without a length or chunks: its body ends when the connection does (as
    aiohttp's WebSocketResponse turns the length check off)."""

    _length_check = False

    def __init__(self) -> None:
        super().__init__()
        self.force_close()


class Hostile:
    """Counts what each endless answer managed to send before the client hung up."""

    def __init__(self) -> None:
        self.sent: dict[str, int] = {}
        self.closed: dict[str, threading.Event] = {}
        self.trickled: dict[str, int] = {}  # requests answered by a trickle, by key

    async def endless(self, request: web.Request, *, status: int, length: int | None,
                      key: str | None = None, chunks: int = 4096,
                      headers: dict[str, str] | None = None) -> web.StreamResponse:
        key = key or request.match_info["tag"]
        response = web.StreamResponse(status=status, headers=headers)
        response.content_type = "application/vnd.oci.image.manifest.v1+json"
        if length is not None:
            response.content_length = length
        chunk = b'{"errors": [' + b" " * (256 * 1024)
        self.sent[key] = 0
        try:
            await response.prepare(request)
            for _ in range(chunks):  # 1 GiB at most: bounded even if the client never stops
                await response.write(chunk)
                self.sent[key] += len(chunk)
                await asyncio.sleep(0)
        except (ConnectionResetError, asyncio.CancelledError):
            pass
        return response

    async def trickle(self, request: web.Request, body: bytes, *, key: str,
                      until_close: bool = False) -> web.StreamResponse:
        """``body`` a byte every TRICKLE seconds, chunked or (``until_close``) ended by
        closing the connection; ``closed[key]`` is set when the client has hung up (the
        transport is closing, or a write fails)."""
        response = _UntilClose() if until_close else web.StreamResponse()
        response.content_type = "application/json"
        self.sent[key] = 0
        self.trickled[key] = self.trickled.get(key, 0) + 1
        closed = self.closed.setdefault(key, threading.Event())
        try:
            await response.prepare(request)
            for i in range(len(body)):
                if request.transport is None or request.transport.is_closing():
                    break
                await response.write(body[i:i + 1])
                self.sent[key] += 1
                await asyncio.sleep(TRICKLE)
        except (ConnectionResetError, asyncio.CancelledError):
            pass
        if request.transport is None or request.transport.is_closing():
            closed.set()
        return response

    async def trickle_head(self, request: web.Request, *, key: str) -> web.StreamResponse:
        """The status line, then a header a byte every TRICKLE seconds, then TRICKLED:
        written to the connection itself (aiohttp sends a head whole), which is then
        closed."""
        transport = request.transport
        assert transport is not None
        self.sent[key] = 0
        closed = self.closed.setdefault(key, threading.Event())
        transport.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nX-Trickle: ")
        for _ in range(len(TRICKLED)):
            if transport.is_closing():
                closed.set()
                break
            transport.write(b"a")
            self.sent[key] += 1
            await asyncio.sleep(TRICKLE)
        else:
            transport.write(b"\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s"
                            % (len(TRICKLED), TRICKLED))
        transport.close()
        return web.Response()  # not sent: the connection is closed

    async def manifests(self, request: web.Request) -> web.StreamResponse:
        tag = request.match_info["tag"]
        if tag == "head":
            return await self.trickle_head(request, key=tag)
        if tag in ("trickle", "untilclose"):
            return await self.trickle(request, TRICKLED, key=tag,
                                      until_close=tag == "untilclose")
        if tag == "announced":
            return await self.endless(request, status=200, length=1024 * MiB)
        if tag == "error":
            return await self.endless(request, status=500, length=None)
        return await self.endless(request, status=200, length=None)


@pytest.fixture
def hostile() -> Iterator[tuple[Hostile, int]]:
    state = Hostile()

    async def base(_: web.Request) -> web.Response:
        return web.json_response({})

    async def build() -> tuple[web.Application, ssl.SSLContext | None]:
        app = web.Application()
        app.router.add_get("/v2/", base)
        app.router.add_get("/v2/golden/manifests/{tag}", state.manifests)
        return app, None

    server = AppThread(build, name="hostile registry")
    server.start()
    try:
        yield state, server.port
    finally:
        server.stop()


@pytest.mark.parametrize("tag", ["endless", "announced"])
def test_a_manifest_beyond_the_bound_is_refused_unread(hostile: tuple[Hostile, int],
                                                       tag: str) -> None:
    state, port = hostile
    ref = parse_docker_url(f"docker://127.0.0.1:{port}/golden:{tag}")
    with pytest.raises(RegistryError, match="exceeded maximum allowed size of 4194304 bytes"):
        resolve_digest(ref, Access(insecure=True, timeout=10))
    # what the server got out before the client hung up: the bound and socket buffers,
    # not the gigabyte it offered
    assert state.sent[tag] < MANIFEST_LIMIT + 16 * MiB


def test_an_error_answer_is_read_only_for_its_message(hostile: tuple[Hostile, int]) -> None:
    state, port = hostile
    ref = parse_docker_url(f"docker://127.0.0.1:{port}/golden:error")
    with pytest.raises(RegistryError, match="500"):
        resolve_digest(ref, Access(insecure=True, timeout=10))
    assert state.sent["error"] < ERROR_BODY_LIMIT + 16 * MiB


# ------------------------------------------------------------ the deadline
# A byte every TRICKLE seconds, far within the per-read timeout (5 s) and for longer in
# all (5 s) than the deadline (1 s) and its margin: without the deadline, the answer is
# read whole and the operation succeeds, late.
TRICKLE = 0.05
DEADLINE, MARGIN = 1.0, 1.5
TRICKLED = b"{}" + b" " * 98
"""Valid JSON wherever it is cut after its first two bytes."""


def _deadline_threads() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name.startswith("registry deadline")]


def _cut_off(state: Hostile, key: str, pull: Any) -> None:
    """``pull`` fails at the deadline, not before, not much after; nothing of it is left."""
    started = time.monotonic()
    with pytest.raises(RegistryUnavailable,
                       match=r"^reading manifest \w+ in 127\.0\.0\.1:\d+/golden: context "
                       r"deadline exceeded \(127\.0\.0\.1:\d+ did not answer in full "
                       r"within 1 s\)$"):
        pull()
    elapsed = time.monotonic() - started
    assert DEADLINE <= elapsed < DEADLINE + MARGIN
    assert state.closed[key].wait(10), "the client never hung up"
    assert 0 < state.sent[key] < len(TRICKLED)
    assert _deadline_threads() == []


@pytest.mark.parametrize("tag", ["trickle", "untilclose", "head"])
def test_a_trickled_manifest_is_cut_off_at_the_deadline(hostile: tuple[Hostile, int],
                                                        tag: str) -> None:
    state, port = hostile
    ref = parse_docker_url(f"docker://127.0.0.1:{port}/golden:{tag}")
    # insecure: the TLS sniff, then plain HTTP, under the one deadline. A body that ends
    # with its connection, cut off, would read as a shorter manifest: not a digest. A
    # head is read by http.client, a line at a time: a trickled one holds it as long.
    _cut_off(state, tag,
             lambda: resolve_digest(ref, Access(insecure=True, timeout=5.0, deadline=DEADLINE)))


# ------------------------------------------------------------ Bearer-token realms
# A TLS registry (python-dxf fetches a token only over https) whose manifests want a
# Bearer token from its realm, /token/<how> on the same server, <how> being the tag asked
# for. 64 MiB at most of each endless answer: far over the bound, and a scratch run
# without the bound stays small.
TOKEN_CHUNKS = 256
MANIFEST = b'{"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json"}'
DIGEST = "sha256:" + hashlib.sha256(MANIFEST).hexdigest()
USER, PASSWORD = "rootdisk-user", "s3cret-Pa55"


class Realm(Hostile):
    """The registry and its token realm; records what each token request carried."""

    def __init__(self) -> None:
        super().__init__()
        self.token_requests: list[tuple[str, bool, str | None]] = []  # host, TLS, Authorization
        self.ping = "ok"

    async def v2(self, request: web.Request) -> web.StreamResponse:
        if self.ping == "head":  # a head the insecure-registry TLS sniff waits for
            return await self.trickle_head(request, key="ping")
        if self.ping == "redirect":  # what the insecure-registry TLS sniff gets
            return await self.endless(request, status=302, length=None, key="ping",
                                      chunks=TOKEN_CHUNKS, headers={"Location": "/v2/x"})
        return web.json_response({})

    async def manifests(self, request: web.Request) -> web.StreamResponse:
        if request.headers.get("Authorization") == "Bearer good":
            return web.Response(body=MANIFEST, headers={"Docker-Content-Digest": DIGEST},
                                content_type="application/vnd.oci.image.manifest.v1+json")
        how = request.match_info["tag"]
        if how == "nochallenge":
            return web.Response(status=401)
        if how == "longchallenge":  # a long scope, repeated header lines: parsed, hours of CPU
            long = "Bearer " + f'realm="https://{request.host}/token/ok",' + "a=b," * 4096
            headers = MultiDict([("WWW-Authenticate", long)] * 2)
            return web.Response(status=401, headers=headers)
        realm = {"http": f"http://{request.host}/token/ok",
                 "file": "file:///etc/passwd"}.get(how, f"https://{request.host}/token/{how}")
        challenge = f'Bearer realm="{realm}",service="hostile",scope="repository:golden:pull"'
        return web.json_response({"errors": [{"code": "UNAUTHORIZED", "message": "no"}]},
                                 status=401, headers={"WWW-Authenticate": challenge})

    async def token(self, request: web.Request) -> web.StreamResponse:
        how = request.match_info["how"]
        self.token_requests.append((request.host, request.secure,
                                    request.headers.get("Authorization")))
        port = request.host.rsplit(":", 1)[1]
        if how == "endless":
            return await self.endless(request, status=200, length=None, key=how,
                                      chunks=TOKEN_CHUNKS)
        if how == "announced":
            return await self.endless(request, status=200, length=1024 * MiB, key=how,
                                      chunks=TOKEN_CHUNKS)
        if how == "redirect":  # an endless redirect body, then a good token
            return await self.endless(request, status=302, length=None, key=how,
                                      chunks=TOKEN_CHUNKS, headers={"Location": "/token/ok"})
        if how == "elsewhere":  # the same server under another name: another host
            return web.Response(status=302,
                                headers={"Location": f"https://localhost:{port}/token/ok"})
        if how == "trickle":
            return await self.trickle(request, b'{"token": "good"}' + b" " * 84, key=how)
        if how == "notoken":
            return web.json_response({"expires_in": 60})
        if how == "notjson":
            return web.Response(text="<html>sign in</html>")
        return web.json_response({"token": "good"})


@pytest.fixture
def realm(tmp_path: Path) -> Iterator[tuple[Realm, int, TlsMaterial]]:
    state = Realm()
    tls = make_tls(tmp_path / "tls")

    async def build() -> tuple[web.Application, ssl.SSLContext | None]:
        app = web.Application()
        app.router.add_get("/v2/", state.v2)
        app.router.add_get("/v2/golden/manifests/{tag}", state.manifests)
        app.router.add_get("/token/{how}", state.token)
        return app, tls.server_context()

    server = AppThread(build, name="hostile token realm")
    server.start()
    try:
        yield state, server.port, tls
    finally:
        server.stop()


def _pull(port: int, tag: str, tls: TlsMaterial, **changes: Any) -> str:
    ref = parse_docker_url(f"docker://127.0.0.1:{port}/golden:{tag}")
    access = Access(credentials=Credentials(USER, PASSWORD), ca_file=str(tls.ca_cert),
                    timeout=10.0)
    return resolve_digest(ref, dataclasses.replace(access, **changes))


BASIC = "Basic " + base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()


@pytest.mark.parametrize("how", ["ok", "http"])
def test_a_token_flow_answers_the_challenge(realm: tuple[Realm, int, TlsMaterial],
                                            how: str) -> None:
    state, port, tls = realm
    assert _pull(port, how, tls) == DIGEST
    assert _deadline_threads() == []  # the deadline's timer is gone with the operation
    # the credentials went to the realm, over TLS even when the challenge said http://
    # (python-dxf's rule; containers/image would follow an http realm as given)
    assert state.token_requests == [(f"127.0.0.1:{port}", True, BASIC)]


@pytest.mark.parametrize("how", ["endless", "announced"])
def test_a_token_beyond_the_bound_is_refused_unread(realm: tuple[Realm, int, TlsMaterial],
                                                    how: str) -> None:
    state, port, tls = realm
    with pytest.raises(RegistryError, match=r"^127\.0\.0\.1:\d+/golden:\w+: "
                       r"requesting bearer token: exceeded maximum allowed size of 1048576 bytes$"):
        _pull(port, how, tls)
    assert state.sent[how] < TOKEN_LIMIT + 16 * MiB


def test_a_redirects_body_is_not_read(realm: tuple[Realm, int, TlsMaterial]) -> None:
    state, port, tls = realm
    assert _pull(port, "redirect", tls) == DIGEST
    assert state.sent["redirect"] < 16 * MiB
    assert [(secure, auth) for _, secure, auth in state.token_requests] == [(True, BASIC)] * 2


def test_a_redirect_to_another_host_drops_the_credentials(
        realm: tuple[Realm, int, TlsMaterial]) -> None:
    state, port, tls = realm
    assert _pull(port, "elsewhere", tls) == DIGEST
    assert state.token_requests == [(f"127.0.0.1:{port}", True, BASIC),
                                    (f"localhost:{port}", True, None)]


@pytest.mark.parametrize(("how", "error"), [
    ("file", r"requesting bearer token: Invalid URL 'https:///etc/passwd\?"),
    ("longchallenge", r"requesting bearer token: the WWW-Authenticate challenge is longer "
                      r"than 16384 bytes$"),
    ("notoken", r"requesting bearer token: missing 'token'$"),
    ("notjson", r"requesting bearer token: Expecting value"),
])
def test_a_challenge_or_token_answer_out_of_shape_is_a_registry_error(
        realm: tuple[Realm, int, TlsMaterial], how: str, error: str) -> None:
    _, port, tls = realm
    with pytest.raises(RegistryError, match=error):
        _pull(port, how, tls)


def test_a_trickled_token_is_cut_off_at_the_deadline(
        realm: tuple[Realm, int, TlsMaterial]) -> None:
    state, port, tls = realm
    _cut_off(state, "trickle", lambda: _pull(port, "trickle", tls, timeout=5.0,
                                             deadline=DEADLINE))


def test_a_trickled_tls_sniff_is_cut_off_at_the_deadline(
        realm: tuple[Realm, int, TlsMaterial]) -> None:
    state, port, tls = realm
    state.ping = "head"
    _cut_off(state, "ping", lambda: _pull(port, "ok", tls, ca_file=None, insecure=True,
                                          timeout=5.0, deadline=DEADLINE))


def test_the_deadline_defaults_to_twice_the_read_timeout(
        realm: tuple[Realm, int, TlsMaterial]) -> None:
    _, port, tls = realm
    started = time.monotonic()
    with pytest.raises(RegistryUnavailable, match=r"within 1 s\)$"):
        _pull(port, "trickle", tls, timeout=DEADLINE / 2)
    assert time.monotonic() - started < DEADLINE + MARGIN


def test_the_insecure_tls_sniff_reads_no_redirect(realm: tuple[Realm, int, TlsMaterial]) -> None:
    state, port, tls = realm
    state.ping = "redirect"
    assert _pull(port, "ok", tls, ca_file=None, insecure=True) == DIGEST
    assert state.sent["ping"] < 16 * MiB


def test_a_401_without_a_challenge_is_unauthorized(realm: tuple[Realm, int, TlsMaterial]) -> None:
    _, port, tls = realm
    with pytest.raises(RegistryUnauthorized,
                       match=f"^{AUTH_FAILED}: unauthorized: authentication required$"):
        _pull(port, "nochallenge", tls)


def test_a_client_outside_its_with_block_is_refused(realm: tuple[Realm, int, TlsMaterial]) -> None:
    # there python-dxf would call requests' module functions, which no hook bounds
    _, port, tls = realm
    ref = parse_docker_url(f"docker://127.0.0.1:{port}/golden:ok")
    client = connect(ref, Access(ca_file=str(tls.ca_cert), timeout=10.0))
    with pytest.raises(RuntimeError, match="used only inside its with block"):
        get_manifest(client, ref)
    with client as dxf:
        assert get_manifest(dxf, ref).digest == DIGEST
