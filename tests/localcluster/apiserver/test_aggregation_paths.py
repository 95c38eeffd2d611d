"""The aggregation proxy forwards exactly the path it authorized.

The server reads RBAC attributes from the decoded path; a URL library on the way to the
backend must not turn that path into another one. A namespace's user allowed
``things/echo`` in ``agg`` once reached ``victim``'s objects (and paths outside
``/apis/<group>/<version>``) as ``…/agg/things/vm1/echo/../../../../victim/…``: the path
was authorized as ``agg`` and yarl resolved the ``..`` on the way out. Now any path with a
``.``/``..`` segment (percent-encoded or not) or an encoded ``/`` is refused with 400 at the
server's entry, and whatever is forwarded goes byte for byte.

The backend (``aggregated_backend``, real, over TLS behind the front proxy) records the
raw path of every request that reaches it, routed or not.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Iterator
from typing import Any

import aiohttp
import pytest
import yarl
from aiohttp import web

from localcluster.apiserver.threaded import ServerThread

from .aggregated_backend import GROUP, VERSION, AggregatedBackend
from .server_fixtures import exact_request, make_client
from .test_aggregation import (
    NS,
    _apiservice,
    _collect_handshake_leftovers,
    _front_proxy_config,
    _register,
    _robot,
    _wait_available,
)

BASE = f"/apis/{GROUP}/{VERSION}"
OWN = f"{BASE}/namespaces/{NS}/things/vm1/echo"


class RecordingBackend(AggregatedBackend):
    """The test backend, recording the raw path (query included) of every request, and
    answering any path it does not serve with 200 and that path (``/validate/…`` too)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.seen: list[str] = []

    async def _app(self) -> tuple[web.Application, ssl.SSLContext]:
        app, ctx = await super()._app()

        @web.middleware
        async def record(request: web.Request, handler: Any) -> web.StreamResponse:
            self.seen.append(request.raw_path)
            return await handler(request)

        async def anything(request: web.Request) -> web.StreamResponse:
            return web.json_response({"raw_path": request.raw_path})

        app.middlewares.append(record)
        app.router.add_route("*", "/{tail:.*}", anything)
        return app, ctx

    def requests(self) -> list[str]:
        """What reached it, less the availability checks."""
        return [p for p in self.seen if p != BASE]


@pytest.fixture(scope="module")
def server(tmp_path_factory) -> Iterator[Any]:
    thread = ServerThread(tmp_path_factory.mktemp("apiserver"), bookmark_interval=0.5,
                          aggregation_check_interval=0.3)
    server = thread.start()
    try:
        yield server
    finally:
        thread.stop()
        _collect_handshake_leftovers()


@pytest.fixture(scope="module")
def backend(server, tmp_path_factory) -> Iterator[RecordingBackend]:
    with make_client(server) as api:
        be = RecordingBackend(tmp_path_factory.mktemp("backend-pki"),
                              _front_proxy_config(api)).start()
        try:
            _register(api, be.port, _apiservice(ca_bundle=be.ca_bundle))
            _wait_available(api)
            yield be
        finally:
            be.stop()
            _collect_handshake_leftovers()


@pytest.fixture(scope="module")
def token(server, backend) -> str:
    """A ServiceAccount's token, allowed things/echo and things/console in NS only."""
    with make_client(server) as api:
        return _robot(server, api)[1]


def _get(server, raw_path: str, token: str, method: str = "GET") -> tuple[int, Any]:
    return exact_request(server, raw_path, f"Bearer {token}", method=method)


VICTIM = "/../../../../victim/things/vm1/echo"
DOT_DOT = "a path segment may not be '..'"
REFUSED = {
    # The reviewer's request: authorized as NS, forwarded as victim.
    "dot-dot": (OWN + VICTIM, DOT_DOT),
    "encoded dot-dot": (OWN + VICTIM.replace("..", "%2e%2e"), DOT_DOT),
    "upper-case encoding": (OWN + VICTIM.replace("..", "%2E%2E"), DOT_DOT),
    "mixed": (OWN + "/.%2e/%2E./..%2f..%2F/victim/things/vm1/echo", DOT_DOT),
    "out of the group version": (OWN + "/../../../../../../../../validate/x", DOT_DOT),
    "dot-dot with a query": (OWN + VICTIM + "?x=1", DOT_DOT),
    "dot": (f"{BASE}/namespaces/{NS}/./things/vm1/echo", "a path segment may not be '.'"),
    "encoded dot": (f"{BASE}/namespaces/{NS}/%2e/things/vm1/echo",
                    "a path segment may not be '.'"),
    "encoded slash": (f"{BASE}/namespaces/{NS}/things/vm1%2F..%2F..%2Fvictim/echo",
                      "a path segment may not contain '/' (%2F)"),
}


@pytest.mark.parametrize("raw_path, why", REFUSED.values(), ids=REFUSED.keys())
def test_a_path_with_dot_segments_is_refused_before_the_backend(server, backend, token,
                                                                 raw_path, why):
    victim = f"{BASE}/namespaces/victim/things/vm1/echo"
    assert _get(server, victim, token)[0] == 403  # what the path would have reached
    assert _get(server, OWN, token)[0] == 200
    before = len(backend.requests())
    for method in ("GET", "PUT"):
        code, body = _get(server, raw_path, token, method)
        assert code == 400, body
        assert body["reason"] == "BadRequest"
        assert body["message"] == f"the request path is invalid: {why}"
    assert backend.requests()[before:] == []


def test_the_console_websocket_with_dot_segments_is_refused(server, backend, token):
    async def connect() -> int:
        url = yarl.URL(server.url.replace("https://", "wss://") + OWN.replace(
            "/echo", "/console") + VICTIM.replace("echo", "console"), encoded=True)
        async with aiohttp.ClientSession() as http_:
            try:
                ws = await http_.ws_connect(
                    url, protocols=["plain.kubevirt.io"],
                    ssl=ssl.create_default_context(cafile=str(server.ca_path)),
                    headers={"Authorization": f"Bearer {token}"})
            except aiohttp.WSServerHandshakeError as err:
                status = err.status
            else:
                await ws.close()
                status = 101
        await asyncio.sleep(0.25)  # the TLS shutdown, before the loop ends
        return status

    before = len(backend.requests())
    assert asyncio.run(connect()) == 400
    assert backend.requests()[before:] == []


def test_built_in_paths_with_dot_segments_are_refused(server):
    for raw_path in ("/api/v1/namespaces/../configmaps", "/api/v1/namespaces/%2e%2e/secrets",
                     "/api/v1/namespaces/default/configmaps/.",
                     "/apis/apps/v1/namespaces/default/deployments/a%2Fb"):
        code, body = _get(server, raw_path, server.admin_token)
        assert code == 400 and body["reason"] == "BadRequest", (raw_path, body)
    # Dots inside a segment are names like any other.
    assert _get(server, "/api/v1/namespaces/default/configmaps/a..b", server.admin_token)[0] \
        == 404
    assert _get(server, "/api/v1/namespaces/default/configmaps/...", server.admin_token)[0] \
        == 404


def test_the_backend_gets_the_path_as_sent(server, backend, token):
    """Percent-encodings are neither decoded nor re-encoded on the way: the backend decodes
    the same bytes the server authorized."""
    cases = [
        (f"{BASE}/namespaces/{NS}/things/vm%41%7E1/echo", "vmA~1", {}),
        (f"{BASE}/namespaces/{NS}/things/a%3Fb%25c%20d/echo?x=%41&y=a%2Fb&z", "a?b%c d",
         {"x": "A", "y": "a/b", "z": ""}),
        (f"{BASE}/namespaces/{NS}/things/x..y/echo?p=../..", "x..y", {"p": "../.."}),
        (f"{BASE}/namespaces/%61%67%67/things/vm1/echo", "vm1", {}),  # NS, encoded
    ]
    for raw_path, name, query in cases:
        code, body = _get(server, raw_path, token)
        assert code == 200, (raw_path, body)
        assert (body["namespace"], body["name"], body["query"]) == (NS, name, query)
        assert backend.requests()[-1] == raw_path
