"""Run virt-api (``vm.api.server``) in a thread against a localcluster API server that
aggregates it, registered as the manifests register it (Service, Endpoints, APIService,
ValidatingWebhookConfiguration from manifests/deploy/virt-api.yaml)."""

from __future__ import annotations

import asyncio
import datetime as dt
import ssl
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import yaml
from aiohttp import web

from kubeclient import Client
from kubeclient.resources import ENDPOINTS, NAMESPACES, SERVICES
from localcluster.apiserver.threaded import ServerThread
from pki import certs as pki_certs
from pki import rotation, serving
from tests.fixtures.appthread import AppThread
from vm.api import certs
from vm.api import kube as api_kube
from vm.api.server import VirtAPI

from .conftest import CRD_FILES, CRDS, kube_for, wait_served

ROOT = Path(__file__).resolve().parents[2]
NS = "kubevirt"


class VirtAPIThread:
    """virt-api as ``python -m vm.api`` wires it (``vm.api.certs.virt_api_tls``: the CA
    kept and rotated in its Secret, the certificate renewed at half ``lifetimes[1]``)."""

    def __init__(self, kube: Client, *, lifetimes: tuple[dt.timedelta, dt.timedelta] = (
            certs.CA_LIFETIME, certs.LEAF_LIFETIME)) -> None:
        self.kube = kube
        self.lifetimes = lifetimes
        self.bundle = b""
        self.tls: certs.VirtAPITLS | None = None
        self._server = AppThread(self._app, name="virt-api", startup_timeout=30)

    @property
    def port(self) -> int:
        return self._server.port

    def _issue(self) -> serving.Issued:
        return api_kube.issue_serving(self.kube, NS, lifetimes=self.lifetimes)

    async def _app(self) -> tuple[web.Application, ssl.SSLContext]:
        first = await asyncio.to_thread(self._issue)
        proxy = await asyncio.to_thread(api_kube.front_proxy, self.kube)
        self.tls = certs.virt_api_tls(self._issue, first, proxy, lifetime=self.lifetimes[1])
        self.bundle = first.bundle
        app = VirtAPI(self.kube, proxy, self.tls.handlers, NS).app()
        app.cleanup_ctx.append(self.tls.renewal.keep_fresh)
        return app, self.tls.server

    def start(self) -> VirtAPIThread:
        self._server.start()
        return self

    def stop(self) -> None:
        self._server.stop()


def register(kube: Client, port: int) -> None:
    """The namespace, then virt-api's Service (+ Endpoints at ``port``), APIService and
    webhook configuration from the manifests (their caBundle is virt-api's to write)."""
    if kube.get_or_none(NAMESPACES, NS) is None:
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
            kube.create(api_kube.VALIDATING_WEBHOOKS, doc)


def read_ca(kube: Client, namespace: str) -> tuple[pki_certs.KeyPair, bytes] | None:
    """(the CA that signs now, PEM of every CA to trust) from virt-api's Secret; None while
    it holds no CA. A Secret of an earlier version (one CA, no bundle) gives that CA as
    the bundle."""
    secret = kube.get_or_none(api_kube.SECRETS, api_kube.CERT_SECRET, namespace)
    parsed = rotation.authority_from(rotation.secret_data(secret)[0]) if secret else None
    if parsed is None:
        return None
    current, _next, bundle = parsed
    return current, b"".join(bundle) or current.cert_pem


@contextmanager
def running(data_dir: Path) -> Iterator[tuple[Any, Client, int]]:
    """(the API server, a client, virt-api's port): a fresh API server with the CRDs and
    virt-api running behind it, registered, its subresources served."""
    thread = ServerThread(data_dir, bookmark_interval=0.5, aggregation_check_interval=0.3)
    server = thread.start()
    kube = kube_for(server)
    virtapi = None
    try:
        for name in CRD_FILES:
            kube.create(CRDS, yaml.safe_load((ROOT / "manifests" / "crds" / name).read_text()))
        wait_served(kube, "/apis/kubevirt.io/v1/virtualmachines")
        kube.create(NAMESPACES, {"apiVersion": "v1", "kind": "Namespace",
                                 "metadata": {"name": NS}})
        virtapi = VirtAPIThread(kube).start()
        register(kube, virtapi.port)
        api_kube.publish_ca(kube, virtapi.bundle)  # they came after its start
        wait_served(kube, "/apis/subresources.kubevirt.io/v1")
        yield server, kube, virtapi.port
    finally:
        if virtapi is not None:
            virtapi.stop()
        kube.api.close()
        thread.stop()
