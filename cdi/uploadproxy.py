"""The upload proxy (``python -m cdi.uploadproxy``, Deployment and Service
``cdi-uploadproxy`` in the CDI namespace): the one door for uploads, as upstream's.

``POST|PUT /v1beta1/upload[-async]``, ``/v1beta1/upload-form[-async]`` (and the v1alpha1
aliases) with ``Authorization: Bearer <token>``. The token (:mod:`cdi.uploadtoken`) must
verify against the cdi-apiserver's public key (ConfigMap ``cdi-upload-signing-key``),
else 401 and nothing is forwarded. The claim it names must exist and be ready for upload
(its upload server ready, ``storage.pod.ready``, and not done yet), waited for up to
10 s as upstream (holding no thread; only so many uploads wait at once), else 503 with
the reason. The body is then streamed, byte for byte, to that claim's
upload server (Service ``cdi-upload-<PVC'>``, reached at its ready endpoint) over TLS
with the proxy's client certificate (Secret ``cdi-uploadproxy-client``), checking the
server's certificate for ``<service>.<namespace>.svc`` against the upload CA.

The proxy serves HTTPS with its own certificate (for the Service names and the pod's IP),
issued again at half its lifetime (``UPLOADPROXY_CERT_LIFETIME``, 24 h) by its own CA
(Secret ``cdi-uploadproxy-tls``), which rotates as :mod:`pki.rotation` describes
(``UPLOADPROXY_CA_CERT_LIFETIME``, 48 h); the CA bundle, next CA included, is published
in the ConfigMap ``cdi-uploadproxy-ca`` for clients such as ``rootdisk image-upload``.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import datetime as dt
import logging
import os
import re
import ssl
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import aiohttp
from aiohttp import web

from apiservice.answers import refused_closing
from cdi import certstore, uploadtoken
from cdi.kube import cdi_namespace
from kubeclient import Client, KubeError, Resource, load_configuration
from kubeclient.resources import CONFIGMAPS, ENDPOINTS, PVCS, SECRETS
from kubeclient.startup import retry_startup
from pki import certs, rotation, serving
from vocab import cdi as api

logger = logging.getLogger("cdi.uploadproxy")

SERVICE = api.UPLOAD_PROXY_SERVICE
TLS_SECRET = "cdi-uploadproxy-tls"  # noqa: S105 - names
CA_CONFIGMAP = "cdi-uploadproxy-ca"
CLIENT_SECRET = "cdi-uploadproxy-client"  # noqa: S105
SIGNING_CONFIGMAP = "cdi-upload-signing-key"
UPLOAD_KIND = "VolumeUploadSource"
PATHS = tuple(f"/{v}/{p}" for v in ("v1beta1", "v1alpha1")
              for p in ("upload", "upload-async", "upload-form", "upload-form-async"))
BEARER = re.compile(r"(?i)^Bearer\s+([A-Za-z0-9\-._~+/]+=*)$")
READY_WAIT = 10.0
SERVER_PORT = 8443
MAX_ANSWER = 64 * 1024
"""Bytes of the upload server's answer passed back (it is a line of text)."""
LOOKUP_THREADS = 4
"""Threads for the API lookups (the client blocks), apart from the event loop's pool."""
WAITING = 64
WAITING_PER_NAMESPACE = 8
"""Uploads waiting (READY_WAIT) for a claim that is not ready yet, in all and per
namespace: beyond that, 503 at once. A wait holds no thread, one lookup a second."""
BODY_IDLE = 120.0
"""Seconds the client's body may send nothing before the upload is ended (408)."""
CONNECT_TIMEOUT = 10.0
"""Seconds for the connection and TLS handshake to an upload server."""
POOL_WAIT = 30.0
"""Seconds an upload may wait for a connection (see POOL_SIZE) before 503."""
POOL_SIZE = 100
POOL_PER_SERVER = 4
"""Connections to upload servers, in all and to one (which takes one upload at a time)."""


@dataclass(frozen=True)
class Route:
    """Where an upload goes, or why it cannot (``error``, answered 503)."""
    service: str = ""
    namespace: str = ""
    archive: bool = False
    error: str = ""
    retry: bool = False
    """The claim may become ready: look again (within READY_WAIT)."""


def route(target: Mapping[str, Any] | None, *, name: str) -> Route:
    """Which upload server takes an upload into the claim ``target`` (pure)."""
    if target is None:
        return Route(error=f"rejecting Upload Request for PVC {name} that doesn't exist")
    meta = target.get("metadata") or {}
    anns = meta.get("annotations") or {}
    ref = (target.get("spec") or {}).get("dataSourceRef") or {}
    if ref.get("kind") != UPLOAD_KIND or ref.get("apiGroup") != api.GROUP:
        return Route(error=f"rejecting Upload Request for PVC {name}: it is not an upload"
                     " target")
    if anns.get(api.POD_PHASE) == "Succeeded" or (
            (target.get("status") or {}).get("phase") == "Bound"):
        return Route(error=f"rejecting Upload Request for PVC {name} that already finished"
                     " uploading")
    if anns.get(api.POD_PHASE) == "Failed":
        return Route(error=f"rejecting Upload Request for PVC {name}: the upload failed:"
                     f" {anns.get(api.RUNNING_MESSAGE, '')}")
    prime = anns.get(api.PVC_PRIME)
    if not prime:
        return Route(error=f"rejecting Upload Request for PVC {name}, PVC' wasn't created yet",
                     retry=True)
    if anns.get(api.POD_READY) != "true":
        return Route(error=f"rejecting Upload Request for PVC {name}: the upload server is"
                     " not ready", retry=True)
    content = anns.get(api.CONTENT_TYPE) or "kubevirt"
    if content not in ("kubevirt", "archive"):
        return Route(error=f"rejecting upload request for PVC {name} - upload content-type"
                     f" {content} is invalid")
    return Route(service=f"cdi-upload-{prime}", namespace=str(meta.get("namespace")),
                 archive=content == "archive")


def upstream_path(path: str, *, archive: bool) -> str:
    if archive:
        return "/v1alpha1/upload-archive" if "alpha" in path else "/v1beta1/upload-archive"
    return path


def ready_address(endpoints: Mapping[str, Any] | None) -> str | None:
    for subset in (endpoints or {}).get("subsets") or []:
        for address in subset.get("addresses") or []:
            if address.get("ip"):
                return str(address["ip"])
    return None


class UploadProxy:
    def __init__(self, kube: Client, namespace: str, *, ready_wait: float = READY_WAIT,
                 body_idle: float = BODY_IDLE, connect_timeout: float = CONNECT_TIMEOUT,
                 pool_wait: float = POOL_WAIT, server_port: int = SERVER_PORT) -> None:
        self.kube = kube
        self.namespace = namespace
        self.ready_wait = ready_wait
        self.body_idle = body_idle
        self.connect_timeout = connect_timeout
        self.pool_wait = pool_wait
        self.server_port = server_port
        self._public: bytes | None = None
        self._client_ctx: tuple[str, ssl.SSLContext] | None = None
        self._session: aiohttp.ClientSession | None = None
        # the API client blocks: its calls run on threads of their own, a bounded few,
        # so that no number of uploads waiting for their claim takes the loop's pool
        self._lookups = ThreadPoolExecutor(LOOKUP_THREADS, thread_name_prefix="uploadproxy-api")
        self._waiting: dict[str, int] = {}

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/healthz", self.healthz)
        for path in PATHS:
            for method in ("POST", "PUT"):
                app.router.add_route(method, path, self.upload)
        app.on_cleanup.append(self._close)
        return app

    async def healthz(self, _: web.Request) -> web.Response:
        return web.Response(text="OK")

    async def _close(self, _: web.Application) -> None:
        if self._session is not None:
            await self._session.close()
        self._lookups.shutdown(wait=False, cancel_futures=True)

    async def _get(self, kind: Resource, name: str, namespace: str) -> dict[str, Any] | None:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._lookups, self.kube.get_or_none, kind, name,
                                          namespace)

    async def _public_key(self) -> bytes:
        """The token key, read once (no thread, no lookup, once it is known)."""
        if self._public is None:
            cm = await self._get(CONFIGMAPS, SIGNING_CONFIGMAP, self.namespace)
            if cm is None:
                raise RuntimeError("the cdi-apiserver has not published its key yet")
            self._public = str((cm.get("data") or {})["public.pem"]).encode()
        return self._public

    async def _client_context(self) -> ssl.SSLContext:
        """The client certificate and the upload CA bundle, read for each upload and
        loaded again whenever the Secret changed (the populator rotates both)."""
        secret = await self._get(SECRETS, CLIENT_SECRET, self.namespace)
        if secret is None:
            raise RuntimeError("the upload client certificate does not exist yet")
        version = str((secret.get("metadata") or {}).get("resourceVersion") or "")
        if self._client_ctx is None or self._client_ctx[0] != version or not version:
            d = {k: base64.b64decode(v) for k, v in (secret.get("data") or {}).items()}
            ctx = ssl.create_default_context(cadata=d["ca.crt"].decode())
            with tempfile.TemporaryDirectory(prefix="uploadproxy-") as tmp:
                ctx.load_cert_chain(*certs.write_pair(tmp, d["tls.crt"], d["tls.key"]))
            self._client_ctx = (version, ctx)
            logger.info("loaded the upload client certificate (version %s)", version)
        return self._client_ctx[1]

    async def _find(self, namespace: str, name: str) -> tuple[Route, str | None]:
        """The claim's route and its server's address, looked for again every second
        while it may become ready (up to ready_wait). The wait holds no thread; only so
        many uploads may wait at once (WAITING, WAITING_PER_NAMESPACE), the others are
        answered at once."""
        deadline = time.monotonic() + self.ready_wait
        waiting = False
        try:
            while True:
                found = route(await self._get(PVCS, name, namespace), name=name)
                address = None
                if not found.error:
                    address = ready_address(await self._get(ENDPOINTS, found.service,
                                                             namespace))
                    if address is None:
                        found = Route(error=f"rejecting Upload Request for PVC {name}: the"
                                      " upload server has no ready endpoint", retry=True)
                if not found.error or not found.retry or time.monotonic() > deadline:
                    return found, address
                if not waiting:
                    if (sum(self._waiting.values()) >= WAITING
                            or self._waiting.get(namespace, 0) >= WAITING_PER_NAMESPACE):
                        return Route(error=f"{found.error} (too many uploads are waiting for"
                                     " their volume; try again)"), None
                    self._waiting[namespace] = self._waiting.get(namespace, 0) + 1
                    waiting = True
                await asyncio.sleep(max(0.0, min(1.0, deadline - time.monotonic())))
        finally:
            if waiting:
                self._waiting[namespace] -= 1
                if not self._waiting[namespace]:
                    del self._waiting[namespace]

    async def upload(self, request: web.Request) -> web.StreamResponse:
        match = BEARER.match(request.headers.get("Authorization", ""))
        if match is None:
            return web.Response(status=400, text="an Authorization: Bearer token is required\n")
        if (request.headers.get("Content-Encoding") or "identity").lower() != "identity":
            # never inflated here (auto_decompress is off): the bytes go on as sent
            logger.info("an upload with Content-Encoding %r: passed on as sent",
                        request.headers["Content-Encoding"][:40])
        try:
            public = await self._public_key()
            claims = uploadtoken.verify(token=match.group(1), public_pem=public)
        except uploadtoken.TokenError as err:
            logger.warning("refused an upload: %s", err)
            return web.Response(status=401, text=f"{err}\n")
        except (RuntimeError, KubeError) as err:
            return web.Response(status=503, text=f"{err}\n")
        try:
            found, address = await self._find(claims.namespace, claims.name)
            client_ctx = await self._client_context()
        except (RuntimeError, KubeError) as err:
            return web.Response(status=503, text=f"{err}\n")
        if found.error or address is None:
            return web.Response(status=503, text=f"{found.error}\n")
        host = f"[{address}]" if ":" in address else address
        url = (f"https://{host}:{self.server_port}"
               f"{upstream_path(request.path, archive=found.archive)}")
        headers = {k: v for k, v in request.headers.items()
                   if k.lower() in ("content-type", "content-length")}
        logger.info("upload into %s/%s → %s", claims.namespace, claims.name, found.service)
        if self._session is None:
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=POOL_SIZE, limit_per_host=POOL_PER_SERVER),
                # connect: waiting for a pooled connection and making it; sock_connect:
                # the TCP connection and TLS handshake alone
                timeout=aiohttp.ClientTimeout(total=None, connect=self.pool_wait,
                                              sock_connect=self.connect_timeout,
                                              sock_read=3600))
        body = _Body(request.content, idle=self.body_idle)
        try:
            async with self._session.request(
                    request.method, url, data=body.chunks(), headers=headers,
                    ssl=client_ctx, server_hostname=f"{found.service}.{found.namespace}.svc",
                    ) as resp:
                answer = await resp.content.read(MAX_ANSWER)
                return web.Response(status=resp.status, body=answer,
                                    content_type="text/plain")
        except (aiohttp.ClientError, OSError) as err:
            if body.idle:
                logger.warning("upload into %s/%s ended: no data for %.0f s", claims.namespace,
                               claims.name, self.body_idle)
                return await refused_closing(request, 408, f"no upload data for"
                                      f" {self.body_idle:.0f} s")
            if isinstance(err, aiohttp.ConnectionTimeoutError):  # connect or pool wait
                return web.Response(status=503, text=f"the upload server could not be reached"
                                    f" in time ({err}); try again\n")
            return web.Response(status=502, text=f"forwarding to the upload server failed:"
                                f" {err}\n")


class _Body:
    """The client's body, passed on as sent (never inflated: the proxy's server runs
    with auto_decompress off), in pieces of up to 1 MiB: fewer, larger TLS writes to the
    server. A client silent for ``idle`` seconds ends it."""

    def __init__(self, content: aiohttp.StreamReader, *, idle: float) -> None:
        self.content = content
        self.limit = idle
        self.idle = False

    async def chunks(self) -> AsyncIterator[bytes]:
        while True:
            try:
                async with asyncio.timeout(self.limit):  # no task per read, as wait_for makes
                    chunk = await self.content.read(1 << 20)
            except TimeoutError:
                self.idle = True
                raise
            if not chunk:
                return
            yield chunk


SERVER_OPTIONS: dict[str, Any] = {"auto_decompress": False}
"""The proxy's aiohttp server: a body is passed on byte for byte, as upstream's Go
ReverseProxy does, never inflated here under the sender's Content-Length."""


def ensure_tls(kube: Client, namespace: str, pod_ip: str, *,
               lifetimes: tuple[dt.timedelta, dt.timedelta] = (rotation.CA_LIFETIME,
                                                               rotation.LEAF_LIFETIME),
               now: dt.datetime | None = None) -> certs.KeyPair:
    """A fresh serving certificate (Service names and the pod's IP) from the proxy's CA,
    which rotates as :mod:`pki.rotation` describes (Secret ``cdi-uploadproxy-tls``); its
    bundle, next CA included, is published in ConfigMap ``cdi-uploadproxy-ca``."""
    ca_lifetime, lifetime = lifetimes
    now = now or dt.datetime.now(dt.UTC)

    ca = certstore.kept_authority(kube, namespace, TLS_SECRET, ca_name=CA_CONFIGMAP, now=now,
                                  lifetime=ca_lifetime)
    bundle = ca.bundle_pem().decode()
    cm = kube.get_or_none(CONFIGMAPS, CA_CONFIGMAP, namespace)
    if cm is None:
        kube.create_if_absent(CONFIGMAPS, {"apiVersion": "v1", "kind": "ConfigMap",
                                 "metadata": {"name": CA_CONFIGMAP, "namespace": namespace},
                                 "data": {"ca.crt": bundle}})
    elif (cm.get("data") or {}).get("ca.crt") != bundle and not certstore.patched(
            kube, CONFIGMAPS, CA_CONFIGMAP, namespace,
            {"metadata": {"resourceVersion": cm["metadata"].get("resourceVersion")},
             "data": {"ca.crt": bundle}}):
        raise RuntimeError(f"ConfigMap {CA_CONFIGMAP} changed while it was being updated")
    return certs.issue(ca=ca.current, common_name=SERVICE,
                       dns_names=certs.service_names(SERVICE, namespace),
                       ips=(pod_ip,) if pod_ip else (), now=now, validity=lifetime)


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m cdi.uploadproxy")
    p.add_argument("--address", default=os.environ.get("POD_IP") or "127.0.0.1")
    p.add_argument("--port", type=int, default=8443)
    p.add_argument("--namespace", default=cdi_namespace())
    p.add_argument("--kubeconfig", default=None)
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        lifetimes = rotation.lifetimes_from_env(os.environ, ca_var="UPLOADPROXY_CA_CERT_LIFETIME",
                                                leaf_var="UPLOADPROXY_CERT_LIFETIME")
    except ValueError as err:
        p.error(str(err))
    kube = Client(load_configuration(args.kubeconfig))

    def issue() -> serving.Issued:
        return serving.Issued(ensure_tls(kube, args.namespace, args.address,
                                         lifetimes=lifetimes))

    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    renewal = serving.Serving(issue, lifetime=lifetimes[1], contexts=(ctx,))
    renewal.load(retry_startup("cdi-uploadproxy", "certificates", issue,
                               errors=(KubeError, RuntimeError), first=2.0, longest=2.0))
    app = UploadProxy(kube, args.namespace).app()
    app.cleanup_ctx.append(renewal.keep_fresh)
    logger.info("upload proxy on %s:%d", args.address, args.port)
    web.run_app(app, host=args.address, port=args.port, ssl_context=ctx,
                print=None, access_log=None, **SERVER_OPTIONS)
    return 0


if __name__ == "__main__":
    sys.exit(main())
