"""Fixtures that run the real API server (in a background thread, on 127.0.0.1) and
clients configured from what it writes. Import the fixtures you use into the test module."""

from __future__ import annotations

import http.client
import json
import ssl
import time
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client as k8s

from localcluster.apiserver.server import APIServer
from localcluster.apiserver.threaded import ServerThread


def make_client(server: APIServer, token: str | None = None) -> k8s.ApiClient:
    config = k8s.Configuration()
    config.host = server.url
    config.ssl_ca_cert = str(server.ca_path)
    config.api_key = {"authorization": f"Bearer {token or server.admin_token}"}
    return k8s.ApiClient(config)


class Raw:
    """Plain HTTPS requests, for what the typed client hides (bodies, content types)."""

    def __init__(self, server: APIServer, token: str | None = None) -> None:
        self.base = server.url
        self.token = server.admin_token if token is None else token
        self.ctx = ssl.create_default_context(cafile=str(server.ca_path))

    def request(self, method: str, path: str, body: Any = None, *,
                content_type: str = "application/json", raw: bytes | None = None,
                headers: dict[str, str] | None = None) -> tuple[int, Any]:
        data = raw if raw is not None else (
            json.dumps(body).encode() if body is not None else None)
        req = urllib.request.Request(self.base + path, data=data, method=method)
        if self.token:
            req.add_header("Authorization", f"Bearer {self.token}")
        if data is not None:
            req.add_header("Content-Type", content_type)
        for k, v in (headers or {}).items():
            req.add_header(k, v)
        try:
            with urllib.request.urlopen(req, context=self.ctx, timeout=30) as resp:
                text = resp.read()
                status = resp.status
        except urllib.error.HTTPError as err:
            text = err.read()
            status = err.code
        try:
            return status, json.loads(text)
        except ValueError:
            return status, text.decode()


def exact_request(server: APIServer, path: str, authorization: bytes | str, *,
                  method: str = "GET") -> tuple[int, Any]:
    """One HTTPS request sent exactly as given, for what urllib would fix first: the
    request line carries ``path`` unquoted and unnormalized (``..``, ``%2F``), and the
    Authorization header's bytes go as they are (non-ASCII, control bytes)."""
    conn = http.client.HTTPSConnection(
        "127.0.0.1", server.port, timeout=30,
        context=ssl.create_default_context(cafile=str(server.ca_path)))
    try:
        conn.putrequest(method, path)
        conn.putheader("Authorization", authorization)
        conn.endheaders()
        resp = conn.getresponse()
        data = resp.read()
    finally:
        conn.close()
    try:
        return resp.status, json.loads(data)
    except ValueError:
        return resp.status, data


@pytest.fixture(scope="module")
def shared_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[APIServer]:
    thread = ServerThread(tmp_path_factory.mktemp("apiserver"), bookmark_interval=0.5)
    server = thread.start()
    try:
        yield server
    finally:
        thread.stop()


@pytest.fixture
def fresh_server(tmp_path: Path) -> Iterator[ServerThread]:
    thread = ServerThread(tmp_path / "data", bookmark_interval=0.5)
    thread.start()
    try:
        yield thread
    finally:
        thread.stop()


@pytest.fixture
def api(shared_server: APIServer) -> Iterator[k8s.ApiClient]:
    with make_client(shared_server) as c:
        yield c


@pytest.fixture
def raw(shared_server: APIServer) -> Raw:
    return Raw(shared_server)


@pytest.fixture
def namespace(api: k8s.ApiClient) -> str:
    name = "t-" + uuid.uuid4().hex[:8]
    core = k8s.CoreV1Api(api)
    core.create_namespace({"metadata": {"name": name}})
    deadline = time.monotonic() + 5  # the server adds the default ServiceAccount
    while not core.list_namespaced_service_account(name).items:
        assert time.monotonic() < deadline, "no default ServiceAccount"
        time.sleep(0.01)
    return name


WIDGET_CRD: dict[str, Any] = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "widgets.example.com"},
    "spec": {
        "group": "example.com",
        "scope": "Namespaced",
        "names": {"plural": "widgets", "singular": "widget", "kind": "Widget",
                  "shortNames": ["wd"]},
        "versions": [{
            "name": "v1", "served": True, "storage": True,
            "subresources": {"status": {}},
            "additionalPrinterColumns": [
                {"name": "Size", "type": "integer", "jsonPath": ".spec.size"},
                {"name": "Phase", "type": "string", "jsonPath": ".status.phase"},
                {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
            ],
            "schema": {"openAPIV3Schema": {
                "type": "object",
                "properties": {
                    "spec": {"type": "object", "required": ["size"], "properties": {
                        "size": {"type": "integer", "minimum": 1, "maximum": 100},
                        "color": {"type": "string", "default": "blue",
                                  "enum": ["blue", "red"]},
                        "tags": {"type": "array", "items": {"type": "string"}},
                    }},
                    "status": {"type": "object", "properties": {
                        "phase": {"type": "string"},
                        "conditions": {"type": "array", "items": {
                            "type": "object",
                            "x-kubernetes-preserve-unknown-fields": True}},
                    }},
                },
            }},
        }],
    },
}


@pytest.fixture
def widgets(api: k8s.ApiClient) -> str:
    """The Widget CRD exists (created once per server)."""
    ext = k8s.ApiextensionsV1Api(api)
    try:
        ext.create_custom_resource_definition(WIDGET_CRD)
    except k8s.ApiException as err:
        if err.status != 409:
            raise
    return "widgets"
