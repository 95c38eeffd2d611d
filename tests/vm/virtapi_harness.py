"""Run virt-api (``vm.api.server``) in a thread against a localcluster API server that
aggregates it, registered as the manifests register it (Service, Endpoints, APIService,
ValidatingWebhookConfiguration from manifests/deploy/virt-api.yaml)."""

from __future__ import annotations

import asyncio
import os
import ssl
import tempfile
import threading
from pathlib import Path
from typing import Any

import yaml
from aiohttp import web

from apiservice import frontproxy
from vm.api import kube as api_kube
from vm.api.server import VirtAPI
from vm.kube import Kube, Res

ROOT = Path(__file__).resolve().parents[2]
NS = "kubevirt"
SERVICES = Res("", "v1", "services")
ENDPOINTS = Res("", "v1", "endpoints")
NAMESPACES = Res("", "v1", "namespaces", namespaced=False)


class VirtAPIThread:
    def __init__(self, kube: Kube, handler_ssl: ssl.SSLContext | None = None) -> None:
        self.kube = kube
        self.handler_ssl = handler_ssl
        self.port = 0
        self._ready = threading.Event()
        self._stop: Any = None
        self._tmp = tempfile.TemporaryDirectory(prefix="virtapi-test-")
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        async def main() -> None:
            ca, serving = api_kube.ensure_pki(self.kube, NS)
            cert = os.path.join(self._tmp.name, "tls.crt")
            key = os.path.join(self._tmp.name, "tls.key")
            Path(cert).write_bytes(serving.cert_pem)
            Path(key).write_bytes(serving.key_pem)
            proxy = api_kube.front_proxy(self.kube)
            ctx = frontproxy.server_ssl_context(proxy, cert_file=cert, key_file=key)
            handler_ctx = self.handler_ssl
            if handler_ctx is None:
                handler_ctx = ssl.create_default_context(cadata=ca.cert_pem.decode())
                handler_ctx.load_cert_chain(cert, key)
            runner = web.AppRunner(VirtAPI(self.kube, proxy, handler_ctx, NS).app(),
                                   access_log=None)
            await runner.setup()
            site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=ctx)
            await site.start()
            self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
            stop = asyncio.Event()
            self._stop = (asyncio.get_running_loop(), stop)
            self.ca_pem = ca.cert_pem
            self._ready.set()
            await stop.wait()
            server = runner.server
            for conn in list(getattr(server, "connections", []) if server else []):
                if conn.transport is not None:
                    conn.transport.abort()
            await runner.cleanup()

        asyncio.run(main())

    def start(self) -> VirtAPIThread:
        self._thread.start()
        assert self._ready.wait(30), "virt-api did not start"
        return self

    def stop(self) -> None:
        if self._stop is not None:
            loop, stop = self._stop
            loop.call_soon_threadsafe(stop.set)
            self._thread.join(10)
        self._tmp.cleanup()


def register(kube: Kube, port: int) -> None:
    """The namespace, then virt-api's Service (+ Endpoints at ``port``), APIService and
    webhook configuration from the manifests, then the CA published as virt-api does."""
    if kube.get(NAMESPACES, NS) is None:
        kube.create(NAMESPACES, {"apiVersion": "v1", "kind": "Namespace",
                                 "metadata": {"name": NS}})
    docs = list(yaml.safe_load_all((ROOT / "manifests/deploy/virt-api.yaml").read_text()))
    for doc in docs:
        if doc["kind"] == "Service":
            kube.create(SERVICES, doc, NS)
            kube.create(ENDPOINTS, {"apiVersion": "v1", "kind": "Endpoints",
                                    "metadata": {"name": "virt-api"}, "subsets": [{
                                        "addresses": [{"ip": "127.0.0.1"}],
                                        "ports": [{"name": "https", "port": port}]}]}, NS)
        elif doc["kind"] == "APIService":
            kube.create(api_kube.APISERVICES, doc)
        elif doc["kind"] == "ValidatingWebhookConfiguration":
            kube.create(api_kube.WEBHOOKS, doc)
