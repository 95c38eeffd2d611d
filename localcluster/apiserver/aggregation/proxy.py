"""API aggregation: requests for an APIService's group/version are forwarded to its
Service, as kube-aggregator does in front of kube-apiserver.

The server authenticates (and, as kube-apiserver does, authorizes with RBAC) the caller,
then forwards the request over TLS, verifying the backend against the APIService's
``caBundle`` for the name ``<service>.<namespace>.svc`` (or not at all with
``insecureSkipTLSVerify``), presenting the front-proxy client certificate and naming the
caller in ``X-Remote-User``/``X-Remote-Group``/``X-Remote-Extra-*``. Whatever the caller
sent in those headers is dropped first. WebSocket upgrades (KubeVirt's VMI console) are
relayed message by message.

The backend gets the request's path and query exactly as the caller sent them, the
bytes the server parsed and authorized, percent-encoding and all: the URL is built with
``encoded=True`` so that the client neither re-quotes it nor resolves dot segments (yarl
would turn ``…/alice/things/x/console/../../../../victim/…`` into ``…/victim/…``, a path
nobody authorized). Paths with ``.``/``..`` segments or an encoded ``/`` are refused at the
server's entry (``server.path_error``) before they get here.

A check loop keeps each proxied APIService's ``Available`` condition: the Service and its
endpoints are resolved as for webhooks, then ``GET /apis/<group>/<version>`` must answer
2xx; the answer is kept for aggregated discovery. Requests to an unavailable APIService
get 503 with the reason, as upstream.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import logging
import ssl
import urllib.parse
from typing import Any

import aiohttp
import yarl
from aiohttp import web

from apiservice.refusal import keep_refusal, last_refusal

from ..auth.authn import UserInfo
from ..backend import Backend
from ..errors import APIError
from ..kinds import apiservices
from ..kinds.apiservices import APISERVICE_GR, Route
from ..rules.meta import format_time
from ..storage.store import Event
from .frontproxy_pki import FrontProxyFiles

logger = logging.getLogger(__name__)

Obj = dict[str, Any]
CHECK_INTERVAL = 10.0
CHECK_TIMEOUT = 5.0
CONNECT_TIMEOUT = 5.0
UPGRADE_TIMEOUT = 30.0
"""Bound of a WebSocket upgrade's handshake with the backend (its answer included): a
backend that never answers does not hold the request for ever."""
MIN_PAUSE = 0.1
AGGREGATOR_USER = UserInfo("system:kube-aggregator", ("system:masters",))
_HOP_BY_HOP = frozenset({
    "connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te",
    "trailer", "transfer-encoding", "upgrade", "host", "content-length", "authorization",
})
_DROPPED_PREFIXES = ("x-remote-", "impersonate-")
_WATCHED_GRS = frozenset({APISERVICE_GR, "/services", "/endpoints"})


class Aggregator:
    def __init__(self, *, backend: Backend, pki: FrontProxyFiles,
                 check_interval: float = CHECK_INTERVAL) -> None:
        self.backend = backend
        self.pki = pki
        self.check_interval = check_interval
        self._routes: dict[tuple[str, str], Route] = {}
        self._discovery: dict[tuple[str, str], Obj] = {}
        self._contexts: dict[tuple[str, bool], ssl.SSLContext] = {}
        self._changed = asyncio.Event()
        self._session: aiohttp.ClientSession | None = None
        self._reload()
        backend.add_listener(self._on_event)

    # -- the APIService index -----------------------------------------------------------

    def _on_event(self, event: Event) -> None:
        if event.gr in _WATCHED_GRS:
            if event.gr == APISERVICE_GR:
                self._reload()
            self._changed.set()

    def _reload(self) -> None:
        routes = {}
        for _, stored in self.backend.store.items(APISERVICE_GR):
            route = apiservices.route_of(stored.obj)
            if route is not None:
                routes[(route.group, route.version)] = route
        self._routes = routes
        self._discovery = {k: v for k, v in self._discovery.items() if k in routes}

    def route_for(self, group: str, version: str) -> Route | None:
        return self._routes.get((group, version)) if self._routes else None

    def _objects(self) -> list[Obj]:
        return [s.obj for _, s in self.backend.store.items(APISERVICE_GR)]

    # -- discovery ----------------------------------------------------------------------

    def group_versions(self) -> dict[str, list[str]]:
        return apiservices.group_versions(self._objects()) if self._routes else {}

    def merge_group_list(self, doc: Obj) -> Obj:
        for group, versions in sorted(self.group_versions().items()):
            if any(g["name"] == group for g in doc["groups"]):
                continue
            gvs = [{"groupVersion": f"{group}/{v}", "version": v} for v in versions]
            doc["groups"].append({"name": group, "versions": gvs, "preferredVersion": gvs[0]})
        return doc

    def group_doc(self, group: str) -> Obj | None:
        versions = self.group_versions().get(group)
        if not versions:
            return None
        gvs = [{"groupVersion": f"{group}/{v}", "version": v} for v in versions]
        return {"kind": "APIGroup", "apiVersion": "v1", "name": group, "versions": gvs,
                "preferredVersion": gvs[0]}

    def resource_lists(self) -> dict[tuple[str, str], Obj]:
        """(group, version) -> the APIResourceList its backend last answered, for every
        APIService that has answered one (the OpenAPI documents describe their kinds)."""
        return {gv: doc for gv, doc in self._discovery.items() if gv in self._routes}

    def merge_aggregated(self, doc: Obj) -> Obj:
        for group, versions in sorted(self.group_versions().items()):
            docs = {v: self._discovery[(group, v)] for v in versions
                    if (group, v) in self._discovery}
            if docs and not any(i["metadata"]["name"] == group for i in doc["items"]):
                doc["items"].append(apiservices.aggregated_group(group, docs))
        return doc

    # -- connections --------------------------------------------------------------------

    def _ssl(self, route: Route) -> ssl.SSLContext:
        key = (route.ca_bundle, route.insecure)
        ctx = self._contexts.get(key)
        if ctx is None:
            ctx = self.pki.client_context(ca_pem=route.ca_bundle or None,
                                          verify=not route.insecure)
            self._contexts[key] = ctx
        return ctx

    def _client(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            # No pooled keep-alive connections: a backend's certificate or address may
            # change under a pooled connection, and an idle one would outlive the server.
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(force_close=True),
                timeout=aiohttp.ClientTimeout(total=None, sock_connect=CONNECT_TIMEOUT),
                auto_decompress=False, middlewares=(keep_refusal,))
        return self._session

    async def _address(self, route: Route) -> tuple[str, int]:
        webhooks = self.backend.webhooks
        key = (route.service_namespace, route.service_name, route.service_port)
        if webhooks.resolver is not None:
            loop = asyncio.get_running_loop()
            return await loop.run_in_executor(None, webhooks.resolver, *key)
        return webhooks.resolve_from_store(*key)

    @staticmethod
    def _url(host: str, port: int, raw_path: str, raw_query: str = "") -> yarl.URL:
        """The backend's URL for ``raw_path``/``raw_query`` as received (percent-encoded),
        taken verbatim: neither re-quoted nor normalized."""
        netloc = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        return yarl.URL.build(scheme="https", authority=netloc, path=raw_path,
                              query_string=raw_query, encoded=True)

    @staticmethod
    def _server_name(route: Route) -> str:
        return f"{route.service_name}.{route.service_namespace}.svc"

    @staticmethod
    def identity_headers(user: UserInfo) -> list[tuple[str, str]]:
        headers = [("X-Remote-User", user.username)]
        headers += [("X-Remote-Group", g) for g in user.groups]
        for key, values in user.extra:
            escaped = urllib.parse.quote(key, safe="")
            headers += [(f"X-Remote-Extra-{escaped}", v) for v in values]
        return headers

    def _forward_headers(self, request: web.Request, user: UserInfo) -> list[tuple[str, str]]:
        out = [(k, v) for k, v in request.headers.items()
               if k.lower() not in _HOP_BY_HOP and not k.lower().startswith(_DROPPED_PREFIXES)
               and not k.lower().startswith("sec-websocket-")]
        return out + self.identity_headers(user)

    # -- proxying -----------------------------------------------------------------------

    def _unavailable(self, route: Route, why: str) -> APIError:
        return APIError(503, "ServiceUnavailable",
                        f"the server is currently unable to handle the request: APIService "
                        f"{route.name} (service {route.service_namespace}/"
                        f"{route.service_name}): {why}")

    async def proxy(self, request: web.Request, user: UserInfo,
                    route: Route) -> web.StreamResponse:
        stored = self.backend.store.get(APISERVICE_GR, "", route.name)
        if stored is None or not apiservices.is_available(stored.obj):
            why = "not available yet"
            for cond in ((stored.obj.get("status") or {}).get("conditions") or []
                         if stored else []):
                if cond.get("type") == "Available":
                    why = f"{cond.get('reason')}: {cond.get('message')}"
            raise self._unavailable(route, why)
        try:
            host, port = await self._address(route)
        except Exception as err:
            raise self._unavailable(route, f"cannot resolve the service: {err}") from None
        url = self._url(host, port, request.rel_url.raw_path,
                        request.rel_url.raw_query_string)
        headers = self._forward_headers(request, user)
        if request.headers.get("Upgrade", "").lower() == "websocket":
            return await self._websocket(request, route, url, headers)
        body = request.content if request.can_read_body else None
        try:
            upstream = await self._client().request(
                request.method, url, headers=headers, data=body, ssl=self._ssl(route),
                server_hostname=self._server_name(route), allow_redirects=False)
        except (aiohttp.ClientError, OSError) as err:
            raise self._unavailable(route, f"error trying to reach service: {err}") from None
        async with upstream:
            response = web.StreamResponse(status=upstream.status)
            for k, v in upstream.headers.items():
                if k.lower() not in _HOP_BY_HOP:
                    response.headers.add(k, v)
            if upstream.content_length is not None:
                response.content_length = upstream.content_length
            await response.prepare(request)
            with contextlib.suppress(ConnectionError, aiohttp.ClientError):
                async for chunk in upstream.content.iter_any():
                    await response.write(chunk)
            with contextlib.suppress(ConnectionError, RuntimeError):
                await response.write_eof()
        return response

    async def _websocket(self, request: web.Request, route: Route, url: yarl.URL,
                         headers: list[tuple[str, str]]) -> web.StreamResponse:
        protocols = [p.strip() for p in request.headers.get("Sec-WebSocket-Protocol",
                                                            "").split(",") if p.strip()]
        try:
            async with asyncio.timeout(UPGRADE_TIMEOUT):
                upstream = await self._client().ws_connect(
                    url, headers=headers, protocols=protocols, ssl=self._ssl(route),
                    server_hostname=self._server_name(route), autoping=True,
                    max_msg_size=0)
        except aiohttp.WSServerHandshakeError as err:
            said = last_refusal()
            if err.status >= 400 and said is not None:
                # passed on as it came, as kube-apiserver's upgrade-aware proxy does: the
                # backend's status and its reason (its first BODY_LIMIT bytes)
                return web.Response(status=said.status, body=said.body,
                                    content_type=said.content_type or None)
            raise APIError(err.status if err.status >= 400 else 502, "BadGateway" if
                           err.status < 400 else "Unknown",
                           f"the backend refused the WebSocket upgrade: {err.message}") \
                from None
        except TimeoutError as err:  # before OSError, which it is
            why = str(err) if isinstance(err, aiohttp.ClientError) else (
                f"no answer to the upgrade in {UPGRADE_TIMEOUT:g} s")
            raise self._unavailable(route, f"error trying to reach service: {why}") from None
        except (aiohttp.ClientError, OSError) as err:
            raise self._unavailable(route, f"error trying to reach service: {err}") from None
        client = web.WebSocketResponse(protocols=[upstream.protocol] if upstream.protocol
                                       else (), max_msg_size=0, autoping=True)
        await client.prepare(request)

        async def pump(src: Any, dst: Any) -> None:
            async for msg in src:
                if msg.type == aiohttp.WSMsgType.TEXT:
                    await dst.send_str(msg.data)
                elif msg.type == aiohttp.WSMsgType.BINARY:
                    await dst.send_bytes(msg.data)
                else:
                    break
            await dst.close()

        tasks = [asyncio.ensure_future(pump(client, upstream)),
                 asyncio.ensure_future(pump(upstream, client))]
        try:
            await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in tasks:
                task.cancel()
            for task in tasks:
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
            await upstream.close()
            await client.close()
        return client

    # -- availability -------------------------------------------------------------------

    async def check(self, route: Route) -> tuple[bool, str, str, Obj | None]:
        """(available, reason, message, the backend's APIResourceList)."""
        store = self.backend.store
        svc = store.get("/services", route.service_namespace, route.service_name)
        if svc is None:
            return False, "ServiceNotFound", (f'service/{route.service_name} in '
                                              f'"{route.service_namespace}" is not present'), None
        ports = [p for p in (svc.obj.get("spec") or {}).get("ports") or []
                 if int(p.get("port", 0)) == route.service_port]
        if not ports:
            return False, "ServicePortError", (f"service/{route.service_name} in "
                                               f'"{route.service_namespace}" is not listening '
                                               f"on port {route.service_port}"), None
        try:
            host, port = await self._address(route)
        except Exception as err:
            return False, "EndpointsNotFound", f"cannot find endpoints: {err}", None
        path = f"/apis/{route.group}/{route.version}"
        try:
            async with self._client().get(
                    self._url(host, port, path), ssl=self._ssl(route),
                    headers=self.identity_headers(AGGREGATOR_USER),
                    server_hostname=self._server_name(route),
                    timeout=aiohttp.ClientTimeout(total=CHECK_TIMEOUT)) as resp:
                text = await resp.text()
                if not 200 <= resp.status < 300:
                    return False, "FailedDiscoveryCheck", (
                        f"failing or missing response from https://{host}:{port}{path}: "
                        f"bad status from https://{host}:{port}{path}: {resp.status}"), None
        except (aiohttp.ClientError, OSError, TimeoutError) as err:
            return False, "FailedDiscoveryCheck", (
                f"failing or missing response from https://{host}:{port}{path}: "
                f"{type(err).__name__}: {err}"), None
        try:
            doc = json.loads(text)
        except ValueError:
            doc = None
        if isinstance(doc, dict) and not isinstance(doc.get("resources"), list):
            doc = None
        return True, "Passed", "all checks passed", doc if isinstance(doc, dict) else None

    async def check_all(self) -> None:
        routes = list(self._routes.values())
        results = await asyncio.gather(*(self.check(r) for r in routes))
        now = format_time(self.backend.clock())
        for route, (ok, reason, message, doc) in zip(routes, results, strict=True):
            if doc is not None:
                self._discovery[(route.group, route.version)] = doc
            condition = apiservices.available_condition(status=ok, reason=reason,
                                                        message=message, now=now)
            if not ok:
                logger.info("APIService %s unavailable: %s", route.name, message)
            self.backend.mutate_internal(APISERVICE_GR, "", route.name,
                                         functools.partial(apiservices.with_available,
                                                           condition=condition))

    async def run(self) -> None:
        try:
            while True:
                self._changed.clear()
                try:
                    await self.check_all()
                except Exception:
                    logger.exception("APIService availability check failed")
                await asyncio.sleep(MIN_PAUSE)  # a status write wakes the loop once more
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._changed.wait(), self.check_interval)
        finally:
            if self._session is not None:
                await self._session.close()
