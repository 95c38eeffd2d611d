"""A real aggregated-API backend for the tests: an aiohttp HTTPS server on 127.0.0.1 in its
own thread, trusting the API server's front proxy through ``apiservice.frontproxy`` (the
helper the VM and CDI API servers use), serving ``subresources.example.com/v1``:

- ``GET /apis/subresources.example.com/v1``: its APIResourceList (discovery, health);
- ``* .../namespaces/NS/things/NAME/echo``: answers what it received (identity, method,
  body) as JSON;
- ``GET .../namespaces/NS/things/NAME/console``: a WebSocket (subprotocol
  ``plain.kubevirt.io``, as KubeVirt's console) that first sends the caller's username
  (the thing named ``stopped`` refuses the upgrade: 409 and a Status; ``hang`` answers
  only after 5 s),
  then echoes every binary message.

Every request it accepts or refuses is recorded in ``calls``.
"""

from __future__ import annotations

import asyncio
import base64
import json
import ssl
from pathlib import Path
from typing import Any

from aiohttp import WSMsgType, web

from apiservice import frontproxy
from localcluster.apiserver.tls import ensure_tls
from tests.fixtures.appthread import AppThread

GROUP = "subresources.example.com"
VERSION = "v1"
RESOURCES = {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": f"{GROUP}/{VERSION}",
             "resources": [
                 {"name": "things", "singularName": "thing", "namespaced": True, "kind": "Thing",
                  "verbs": ["get"]},
                 {"name": "things/echo", "singularName": "", "namespaced": True,
                  "kind": "Thing", "verbs": ["get", "update"]},
                 {"name": "things/console", "singularName": "", "namespaced": True,
                  "kind": "Thing", "verbs": ["get"]}]}


class AggregatedBackend:
    def __init__(self, pki_dir: Path, config: frontproxy.FrontProxyConfig, *,
                 service: str = "backend", namespace: str = "agg") -> None:
        self.tls = ensure_tls(pki_dir, dns_names=(f"{service}.{namespace}.svc",))
        self.config = config
        self.calls: list[dict[str, Any]] = []
        self._server = AppThread(self._app, name="aggregated backend")

    @property
    def ca_bundle(self) -> str:
        return base64.b64encode(self.tls.ca_pem()).decode()

    def _identity(self, request: web.Request) -> frontproxy.Identity | None:
        try:
            who = frontproxy.authenticate_aiohttp(request, self.config)
        except frontproxy.FrontProxyError as err:
            self.calls.append({"path": request.path, "refused": str(err)})
            return None
        self.calls.append({"path": request.path, "method": request.method,
                           "user": who.username, "groups": list(who.groups),
                           "extra": {k: list(v) for k, v in who.extra.items()},
                           "authorization": request.headers.get("Authorization")})
        return who

    @property
    def port(self) -> int:
        return self._server.port

    async def _app(self) -> tuple[web.Application, ssl.SSLContext]:
        async def discovery(request: web.Request) -> web.StreamResponse:
            if self._identity(request) is None:
                return web.json_response({"message": "unauthorized"}, status=401)
            return web.json_response(RESOURCES)

        async def echo(request: web.Request) -> web.StreamResponse:
            who = self._identity(request)
            if who is None:
                return web.json_response({"message": "unauthorized"}, status=401)
            body = await request.text()
            return web.json_response({
                "user": who.username, "groups": list(who.groups), "method": request.method,
                "namespace": request.match_info["ns"], "name": request.match_info["name"],
                "body": body, "query": dict(request.query)})

        async def console(request: web.Request) -> web.StreamResponse:
            who = self._identity(request)
            if who is None:
                return web.json_response({"message": "unauthorized"}, status=401)
            if request.match_info["name"] == "hang":  # no answer (for a while)
                await asyncio.sleep(5)
                return web.Response(status=500)
            if request.match_info["name"] == "stopped":  # a refusal, before the upgrade
                return web.json_response({"kind": "Status", "apiVersion": "v1",
                                          "status": "Failure", "reason": "Conflict",
                                          "message": "thing stopped is not running",
                                          "code": 409}, status=409)
            ws = web.WebSocketResponse(protocols=["plain.kubevirt.io"])
            await ws.prepare(request)
            await ws.send_str(json.dumps({"user": who.username}))
            async for msg in ws:
                if msg.type == WSMsgType.BINARY:
                    await ws.send_bytes(b"echo:" + msg.data)
                else:
                    break
            await ws.close()
            return ws

        app = web.Application()
        base = f"/apis/{GROUP}/{VERSION}"
        app.router.add_get(base, discovery)
        app.router.add_route("*", base + "/namespaces/{ns}/things/{name}/echo", echo)
        app.router.add_get(base + "/namespaces/{ns}/things/{name}/console", console)
        ctx = frontproxy.server_ssl_context(self.config, cert_file=str(self.tls.server_cert),
                                            key_file=str(self.tls.server_key))
        return app, ctx

    def start(self) -> AggregatedBackend:
        self._server.start()
        return self

    def stop(self) -> None:
        self._server.stop()
