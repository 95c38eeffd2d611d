"""virt-api's HTTPS server (aiohttp): admission webhooks, subresources.kubevirt.io/v1.

Routes:
- ``POST /validate/virtualmachines`` and ``/validate/virtualmachineinstances``: the
  validating webhooks (called by the API server; TLS only, as upstream);
- ``GET /apis/subresources.kubevirt.io[/v1]``: discovery for the aggregator;
- ``PUT …/namespaces/NS/virtualmachines/NAME/{start,stop,restart}``: the lifecycle
  subresources (202 Accepted, 409 with upstream's reasons, 400 for bad options);
- ``GET …/namespaces/NS/virtualmachineinstances/NAME/console``: a WebSocket
  (subprotocol ``plain.kubevirt.io``) relayed to the node handler of the VMI's node; a
  handler's refusal is passed on with its reason (see :func:`refused`);
- ``GET …/namespaces/NS/{virtualmachineinstances,virtualmachines}/NAME/portforward/PORT[/PROTO]``:
  a WebSocket (``plain.kubevirt.io``) carrying one connection to the VMI's pod IP and
  port (:mod:`vm.api.portforward`).

Subresource requests are accepted only from the API server's front proxy (its client
certificate, see ``apiservice.frontproxy``) and only for users a SubjectAccessReview
allows on that subresource. Blocking API calls run in threads.
"""

from __future__ import annotations

import asyncio
import json
import logging
import ssl
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp
from aiohttp import WSMsgType, web

from apiservice import frontproxy
from apiservice.refusal import keep_refusal, last_refusal
from kubeclient import Client, KubeError
from vm import nodeports
from vm.api import guestinfo, lifecycle, pause, portforward
from vm.api import kube as api_kube
from vm.api.certs import handler_server_name
from vm.errors import Refused
from vm.webhooks.review import BadReview, respond
from vocab import kubevirt

logger = logging.getLogger(__name__)
GROUP = kubevirt.SUBRESOURCE_GROUP
VERSION = kubevirt.VERSION
BASE = f"/apis/{GROUP}/{VERSION}"
CONSOLE_PROTOCOL = kubevirt.PLAIN_PROTOCOL
CONNECT_TIMEOUT = 10
HANDSHAKE_TIMEOUT = 15.0
"""Bound of the console's handshake with the node handler (connect, TLS, its answer,
a refusal's body): the handler gives its launcher 10 s of it."""
MAX_BODY = 64 * 1024

RESOURCES = {
    "kind": "APIResourceList", "apiVersion": "v1", "groupVersion": f"{GROUP}/{VERSION}",
    "resources": [
        {"name": f"virtualmachines/{a}", "singularName": "", "namespaced": True,
         "kind": "VirtualMachine", "verbs": ["update"]} for a in ("start", "stop", "restart")
    ] + [{"name": f"virtualmachineinstances/{sub}", "singularName": "", "namespaced": True,
          "kind": "VirtualMachineInstance", "verbs": ["get"]}
         for sub in ("console", "guestosinfo", "userlist", "filesystemlist")
    ] + [{"name": f"virtualmachineinstances/{sub}", "singularName": "", "namespaced": True,
          "kind": "VirtualMachineInstance", "verbs": ["update"]}
         for sub in ("softreboot", "pause", "unpause")]
    + [{"name": f"{r}/portforward", "singularName": "", "namespaced": True, "kind": k,
        "verbs": ["get"]} for r, k in (("virtualmachineinstances", "VirtualMachineInstance"),
                                       ("virtualmachines", "VirtualMachine"))],
}
GROUP_DOC = {"kind": "APIGroup", "apiVersion": "v1", "name": GROUP,
             "versions": [{"groupVersion": f"{GROUP}/{VERSION}", "version": VERSION}],
             "preferredVersion": {"groupVersion": f"{GROUP}/{VERSION}", "version": VERSION}}


def status(code: int, message: str) -> web.Response:
    reasons = {400: "BadRequest", 401: "Unauthorized", 403: "Forbidden", 404: "NotFound",
               409: "Conflict", 500: "InternalError", 503: "ServiceUnavailable"}
    return web.json_response({"kind": "Status", "apiVersion": "v1", "metadata": {},
                              "status": "Failure", "message": message,
                              "reason": reasons.get(code, "Unknown"), "code": code},
                             status=code)


class VirtAPI:
    def __init__(self, kube: Client, proxy: frontproxy.FrontProxyConfig | None,
                 handler_ssl: ssl.SSLContext | None, namespace: str) -> None:
        self.kube = kube
        self.proxy = proxy
        self.handler_ssl = handler_ssl
        self.namespace = namespace

    async def _call(self, fn: Callable[..., Any], *args: Any, **kw: Any) -> Any:
        return await asyncio.to_thread(fn, *args, **kw)

    async def _authorize(self, request: web.Request, *, verb: str, resource: str,
                         sub: str) -> web.Response | None:
        if self.proxy is None:
            return status(401, "this server takes requests only through the API server")
        try:
            who = frontproxy.authenticate_aiohttp(request, self.proxy)
        except frontproxy.FrontProxyError as err:
            return status(401, str(err))
        ns, name = request.match_info["ns"], request.match_info["name"]
        ok, reason = await self._call(api_kube.allowed, self.kube, who, verb=verb,
                                      resource=resource, subresource=sub, namespace=ns,
                                      name=name)
        if not ok:
            return status(403, f'{resource}.{GROUP} "{name}" is forbidden: User '
                          f'"{who.username}" cannot {verb} resource "{resource}/{sub}" in '
                          f'API group "{GROUP}" in the namespace "{ns}"'
                          + (f": {reason}" if reason else ""))
        return None

    # -- admission -------------------------------------------------------------
    async def validate(self, request: web.Request) -> web.Response:
        if request.content_length and request.content_length > 4 * 1024 * 1024:
            return status(400, "AdmissionReview too large")
        try:
            review = await request.json()
            return web.json_response(respond(review))
        except (ValueError, BadReview) as err:
            return status(400, f"bad AdmissionReview: {err}")

    # -- lifecycle subresources ------------------------------------------------
    async def lifecycle(self, request: web.Request) -> web.Response:
        action = request.match_info["action"]
        denied = await self._authorize(request, verb="update", resource="virtualmachines",
                                       sub=action)
        if denied is not None:
            return denied
        ns, name = request.match_info["ns"], request.match_info["name"]
        raw = await request.content.read(MAX_BODY + 1)
        if len(raw) > MAX_BODY:
            return status(400, "options body too large")
        try:
            body = json.loads(raw) if raw.strip() else None
        except ValueError:
            return status(400, f"{action.capitalize()}Options: the body is not JSON")
        try:
            opts = lifecycle.options(action.capitalize(), body)
            vm = await self._call(api_kube.get_vm, self.kube, ns, name)
            if vm is None:
                return status(404, f'virtualmachines.kubevirt.io "{name}" not found')
            vmi = await self._call(api_kube.get_vmi, self.kube, ns, name)
            decide = {"start": lifecycle.start, "stop": lifecycle.stop,
                      "restart": lifecycle.restart}[action]
            patches = decide(vm, vmi, opts)
            await self._call(api_kube.apply, self.kube, ns, name, patches,
                             dry_run=opts.dry_run)
        except Refused as err:
            return status(err.code, err.message)
        except KubeError as err:
            code = 409 if err.status in (409, 422) else 500
            return status(code, f"{action}: {err.message}")
        return web.Response(status=202)

    # -- console ----------------------------------------------------------------
    async def console(self, request: web.Request) -> web.StreamResponse:
        denied = await self._authorize(request, verb="get", resource="virtualmachineinstances",
                                       sub="console")
        if denied is not None:
            return denied
        ns, name = request.match_info["ns"], request.match_info["name"]
        vmi = await self._call(api_kube.get_vmi, self.kube, ns, name)
        if vmi is None:
            return status(404, f'virtualmachineinstances.kubevirt.io "{name}" not found')
        st = vmi.get("status") or {}
        if st.get("phase") != "Running" or not st.get("nodeName"):
            return status(409, f"VMI {name} is not running")
        where = await self._call(api_kube.handler_address, self.kube, self.namespace,
                                 str(st["nodeName"]))
        if where is None or self.handler_ssl is None:
            return status(503, f"no node handler serves node {st['nodeName']}")
        url = (f"https://{where[0]}:{where[1]}/v1/namespaces/{ns}/virtualmachineinstances/"
               f"{name}/console?uid={vmi['metadata']['uid']}")
        session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(
            total=None, sock_connect=CONNECT_TIMEOUT), middlewares=(keep_refusal,))
        try:
            try:
                async with asyncio.timeout(HANDSHAKE_TIMEOUT):
                    upstream = await session.ws_connect(
                        url, ssl=self.handler_ssl, protocols=(CONSOLE_PROTOCOL,),
                        heartbeat=30, server_hostname=handler_server_name(self.namespace))
            except aiohttp.WSServerHandshakeError as err:
                said = last_refusal()
                if err.status == 101 or said is None:  # upgraded, but not as it should be
                    return status(503, f"cannot reach the node handler: {err.message}")
                return refused(err.status, said.reason)
            except aiohttp.ClientError as err:  # a connect timeout too
                return status(503, f"cannot reach the node handler: {err}")
            except TimeoutError:  # before OSError, which it is
                return status(503, "cannot reach the node handler: no answer in"
                              f" {HANDSHAKE_TIMEOUT:g} s")
            except OSError as err:
                return status(503, f"cannot reach the node handler: {err}")
            ws = web.WebSocketResponse(protocols=(CONSOLE_PROTOCOL,), heartbeat=30)
            await ws.prepare(request)
            await relay(ws, upstream)
            return ws
        finally:
            await session.close()

    # -- portforward ----------------------------------------------------------------
    async def portforward(self, request: web.Request) -> web.StreamResponse:
        resource = request.match_info["resource"]
        denied = await self._authorize(request, verb="get", resource=resource,
                                       sub="portforward")
        if denied is not None:
            return denied
        ns, name = request.match_info["ns"], request.match_info["name"]
        try:
            vmi = await self._call(api_kube.get_vmi, self.kube, ns, name)
            if resource == "virtualmachines":
                vm = await self._call(api_kube.get_vm, self.kube, ns, name)
                vmi = portforward.vmi_for_vm(name, vm, vmi)
            target = portforward.target_of(
                name, vmi, request.match_info["port"], request.match_info.get("protocol"),
                unprivileged_start=nodeports.unprivileged_port_start())
            if portforward.forwarded_on_request(vmi):
                got = await self._call_handler(
                    dict(vmi), "PUT", "forward",
                    f"&port={request.match_info['port']}&protocol={target.protocol}")
                if isinstance(got, web.Response):
                    return got
                code, body = got
                if code != 200:
                    return status(code, str(body.get("message") or body)[:500])
                target = portforward.Target(host=str(body.get("address") or target.host),
                                            port=int(body.get("port") or target.port),
                                            protocol=target.protocol)
            if target.protocol == "udp":
                return await portforward.serve_udp(request, target)
            return await portforward.serve_tcp(request, target)
        except Refused as err:
            return status(err.code, err.message)
        except KubeError as err:
            return status(500, f"Internal error occurred: unable to retrieve {name}: "
                          f"{err.message}")

    # -- guest agent ---------------------------------------------------------------
    async def _call_handler(self, vmi: dict[str, Any], method: str, sub: str,
                            query: str = "") -> tuple[int, dict[str, Any]] | web.Response:
        """One bounded HTTPS call to the handler of the VMI's node: (status, JSON body),
        or virt-api's own answer when the handler cannot be reached or answers nonsense."""
        st = vmi.get("status") or {}
        where = await self._call(api_kube.handler_address, self.kube, self.namespace,
                                 str(st.get("nodeName") or ""))
        if where is None or self.handler_ssl is None:
            return status(503, f"no node handler serves node {st.get('nodeName')}")
        meta = vmi["metadata"]
        url = (f"https://{where[0]}:{where[1]}/v1/namespaces/{meta['namespace']}/"
               f"virtualmachineinstances/{meta['name']}/{sub}?uid={meta['uid']}{query}")
        try:
            async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(
                    total=HANDSHAKE_TIMEOUT)) as session, session.request(
                    method, url, ssl=self.handler_ssl,
                    server_hostname=handler_server_name(self.namespace)) as answer:
                raw = await answer.content.read(guestinfo.MAX_ANSWER + 1)
                code = answer.status
        except (aiohttp.ClientError, TimeoutError, OSError) as err:
            return status(503, f"cannot reach the node handler: {err or type(err).__name__}")
        if len(raw) > guestinfo.MAX_ANSWER:
            return status(503, "the node handler's answer is too long")
        try:
            body = json.loads(raw)
        except ValueError:
            body = None
        if not isinstance(body, dict):
            return status(503, f"the node handler answered HTTP {code} without a JSON object")
        return code, body

    async def _agent_vmi(self, request: web.Request, *, verb: str,
                         sub: str) -> dict[str, Any] | web.Response:
        """The VMI of a guest agent subresource, once the user may ``verb`` it."""
        denied = await self._authorize(request, verb=verb, resource="virtualmachineinstances",
                                       sub=sub)
        if denied is not None:
            return denied
        ns, name = request.match_info["ns"], request.match_info["name"]
        vmi: dict[str, Any] | None = await self._call(api_kube.get_vmi, self.kube, ns, name)
        if vmi is None:
            return status(404, f'virtualmachineinstances.kubevirt.io "{name}" not found')
        return vmi

    async def guest_agent_info(self, request: web.Request) -> web.Response:
        """GET guestosinfo, userlist, filesystemlist (upstream's shapes and 409s)."""
        sub = request.match_info["sub"]
        vmi = await self._agent_vmi(request, verb="get", sub=sub)
        if isinstance(vmi, web.Response):
            return vmi
        refusal = guestinfo.refuse_info(vmi)
        if refusal is not None:
            return status(409, refusal)
        got = await self._call_handler(vmi, "GET", "guestinfo")
        if isinstance(got, web.Response):
            return got
        code, body = got
        if code != 200:
            return _handler_refused(code, body)
        return web.json_response(guestinfo.shape(sub, body))

    async def softreboot(self, request: web.Request) -> web.Response:
        vmi = await self._agent_vmi(request, verb="update", sub="softreboot")
        if isinstance(vmi, web.Response):
            return vmi
        refusal = guestinfo.refuse_softreboot(vmi)
        if refusal is not None:
            return status(409, refusal)
        got = await self._call_handler(vmi, "PUT", "softreboot")
        if isinstance(got, web.Response):
            return got
        code, body = got
        if code == 409:  # the launcher's refusal (paused meanwhile, neither agent nor ACPI)
            return status(409, str(body.get("message") or "")[:500])
        if code != 200:
            return _handler_refused(code, body)
        return web.Response(status=200)

    async def pause_unpause(self, request: web.Request) -> web.Response:
        """PUT pause | unpause: upstream's refusals (``vm.api.pause``), then the node
        handler asks the launcher (QMP stop / cont); the handler's poll sets or clears the
        Paused condition. A dry run stops after the checks."""
        action = request.match_info["action"]
        vmi = await self._agent_vmi(request, verb="update", sub=action)
        if isinstance(vmi, web.Response):
            return vmi
        raw = await request.content.read(MAX_BODY + 1)
        if len(raw) > MAX_BODY:
            return status(400, "options body too large")
        try:
            dry = pause.dry_run(raw, f"{action.capitalize()}Options")
        except pause.BadOptions as err:
            return status(400, str(err))
        refusal = pause.refuse(action, vmi)
        if refusal is not None:
            return status(refusal.code, refusal.message)
        if dry:
            return web.Response(status=200)
        got = await self._call_handler(vmi, "PUT", action)
        if isinstance(got, web.Response):
            return got
        code, body = got
        if code == 409:  # the launcher's refusal (the domain ended meanwhile)
            return status(409, str(body.get("message") or "")[:500])
        if code != 200:
            return _handler_refused(code, body)
        return web.Response(status=200)

    # -- discovery ----------------------------------------------------------------
    async def resources(self, request: web.Request) -> web.Response:
        return web.json_response(RESOURCES)

    async def group(self, request: web.Request) -> web.Response:
        return web.json_response(GROUP_DOC)

    async def healthz(self, request: web.Request) -> web.Response:
        return web.Response(text="ok")

    def app(self) -> web.Application:
        app = web.Application(client_max_size=4 * 1024 * 1024)
        app.router.add_get("/healthz", self.healthz)
        app.router.add_post("/validate/virtualmachines", self.validate)
        app.router.add_post("/validate/virtualmachineinstances", self.validate)
        app.router.add_get(f"/apis/{GROUP}", self.group)
        app.router.add_get(BASE, self.resources)
        app.router.add_put(BASE + "/namespaces/{ns}/virtualmachines/{name}/"
                           "{action:start|stop|restart}", self.lifecycle)
        vmis = BASE + "/namespaces/{ns}/virtualmachineinstances/{name}"
        app.router.add_get(vmis + "/console", self.console)
        app.router.add_get(vmis + "/{sub:guestosinfo|userlist|filesystemlist}",
                           self.guest_agent_info)
        app.router.add_put(vmis + "/softreboot", self.softreboot)
        app.router.add_put(vmis + "/{action:pause|unpause}", self.pause_unpause)
        pf = (BASE + "/namespaces/{ns}/{resource:virtualmachineinstances|virtualmachines}/"
              "{name}/portforward/{port}")
        app.router.add_get(pf, self.portforward)
        app.router.add_get(pf + "/{protocol}", self.portforward)
        return app


def _handler_refused(code: int, body: dict[str, Any]) -> web.Response:
    """A handler's non-200 answer to a guest agent call: 503 for its 5xx (the launcher
    unreachable), 500 otherwise, with its reason."""
    return status(503 if code >= 500 else 500, "the node handler refused: "
                  + str(body.get("message") or code)[:500])


def refused(code: int, reason: str) -> web.Response:
    """virt-api's answer for a console the node handler refused (``code``, not 101), with
    the handler's ``reason``: 404 if the VMI is not on that handler's node (it moved, or
    is another one by now), 503 for the handler's 5xx (its launcher unreachable or mute,
    a transient state), and 500 for anything else (say a 401 for virt-api's own client
    certificate): a fault between virt-api and the handler, not the user's request, so
    not passed on as a 4xx that would speak of the user's credentials."""
    said = f": {reason}" if reason else f" with HTTP {code}"
    answer = 404 if code == 404 else 503 if code >= 500 else 500
    return status(answer, f"the node handler refused the console{said}")


Sender = Callable[[bytes], Awaitable[None]]


async def relay(ws: web.WebSocketResponse, upstream: aiohttp.ClientWebSocketResponse) -> None:
    """Binary frames both ways until either side closes."""

    async def down() -> None:
        async for msg in upstream:
            if msg.type == WSMsgType.BINARY:
                await ws.send_bytes(msg.data)
            elif msg.type == WSMsgType.TEXT:
                await ws.send_bytes(msg.data.encode())
            else:
                break

    async def up() -> None:
        async for msg in ws:
            if msg.type == WSMsgType.BINARY:
                await upstream.send_bytes(msg.data)
            elif msg.type == WSMsgType.TEXT:
                await upstream.send_bytes(msg.data.encode())
            else:
                break

    tasks = [asyncio.create_task(down()), asyncio.create_task(up())]
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await upstream.close()
        await ws.close()
