"""Run virt-api (``vm.api.server``) in a thread against a localcluster API server that
aggregates it, registered as the manifests register it (Service, Endpoints, APIService,
ValidatingWebhookConfiguration from manifests/deploy/virt-api.yaml)."""

from __future__ import annotations

import os
import ssl
import tempfile
from pathlib import Path

import yaml
from aiohttp import web

from apiservice import frontproxy
from tests.fixtures.appthread import AppThread
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
        self.ca_pem = b""
        self._tmp = tempfile.TemporaryDirectory(prefix="virtapi-test-")
        self._server = AppThread(self._app, name="virt-api", startup_timeout=30)

    @property
    def port(self) -> int:
        return self._server.port

    async def _app(self) -> tuple[web.Application, ssl.SSLContext]:
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
        self.ca_pem = ca.cert_pem
        return VirtAPI(self.kube, proxy, handler_ctx, NS).app(), ctx

    def start(self) -> VirtAPIThread:
        self._server.start()
        return self

    def stop(self) -> None:
        self._server.stop()
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
