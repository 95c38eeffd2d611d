"""A registry that answers with endless bodies: a manifest, or an error's text, is read
only up to its bound (the DataImportCron controller reads manifests in its own process)."""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Iterator

import pytest
from aiohttp import web

from ociregistry.client import (
    ERROR_BODY_LIMIT,
    MANIFEST_LIMIT,
    Access,
    RegistryError,
    resolve_digest,
)
from ociregistry.reference import parse_docker_url
from tests.fixtures.appthread import AppThread

MiB = 1024 * 1024


class Hostile:
    """Counts what each endless answer managed to send before the client hung up."""

    def __init__(self) -> None:
        self.sent: dict[str, int] = {}

    async def endless(self, request: web.Request, *, status: int,
                      length: int | None) -> web.StreamResponse:
        tag = request.match_info["tag"]
        response = web.StreamResponse(status=status)
        response.content_type = "application/vnd.oci.image.manifest.v1+json"
        if length is not None:
            response.content_length = length
        chunk = b'{"errors": [' + b" " * (256 * 1024)
        self.sent[tag] = 0
        try:
            await response.prepare(request)
            for _ in range(4096):  # 1 GiB at most: bounded even if the client never stops
                await response.write(chunk)
                self.sent[tag] += len(chunk)
                await asyncio.sleep(0)
        except (ConnectionResetError, asyncio.CancelledError):
            pass
        return response

    async def manifests(self, request: web.Request) -> web.StreamResponse:
        tag = request.match_info["tag"]
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
