"""API aggregation: an APIService proxies its group/version to a real HTTPS backend
(``aggregated_backend``) registered through a Service and its Endpoints. The backend
trusts only the front proxy's client certificate, so every identity it reports came
through the API server."""

from __future__ import annotations

import asyncio
import base64
import gc
import json
import ssl
import subprocess
import time
import uuid
import warnings
from pathlib import Path

import aiohttp
import pytest
from kubernetes import client as k8s

from apiservice import frontproxy
from localcluster.apiserver.threaded import ServerThread
from localcluster.apiserver.tls import ensure_tls

from .aggregated_backend import GROUP, VERSION, AggregatedBackend
from .server_fixtures import Raw, make_client

KUBECTL = "/usr/bin/kubectl"
NS = "agg"
BASE = f"/apis/{GROUP}/{VERSION}"


def _wait(predicate, timeout=30.0, what="condition"):
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def _collect_handshake_leftovers():
    """asyncio (3.11) leaves the socket of a TLS handshake that failed (the tests make
    several on purpose) to the garbage collector, which warns; collect them here, with
    both event loops finished, rather than inside a later test."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ResourceWarning)
        gc.collect()


@pytest.fixture
def server(tmp_path):
    thread = ServerThread(tmp_path / "data", bookmark_interval=0.5,
                          aggregation_check_interval=0.3)
    server = thread.start()
    try:
        yield server
    finally:
        thread.stop()
        _collect_handshake_leftovers()


@pytest.fixture
def api(server):
    with make_client(server) as api:
        yield api


def _front_proxy_config(api) -> frontproxy.FrontProxyConfig:
    cm = k8s.CoreV1Api(api).read_namespaced_config_map(frontproxy.CONFIGMAP_NAME,
                                                         frontproxy.CONFIGMAP_NAMESPACE)
    return frontproxy.FrontProxyConfig.from_configmap_data(cm.data)


@pytest.fixture
def backend(api, tmp_path):
    be = AggregatedBackend(tmp_path / "backend-pki", _front_proxy_config(api)).start()
    try:
        yield be
    finally:
        be.stop()
        _collect_handshake_leftovers()


def _apiservice(*, ca_bundle=None, insecure=None, service="backend", port=443):
    spec = {"group": GROUP, "version": VERSION, "groupPriorityMinimum": 1000,
            "versionPriority": 15, "service": {"namespace": NS, "name": service, "port": port}}
    if ca_bundle is not None:
        spec["caBundle"] = ca_bundle
    if insecure is not None:
        spec["insecureSkipTLSVerify"] = insecure
    return {"apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService",
            "metadata": {"name": f"{VERSION}.{GROUP}"}, "spec": spec}


def _register(api, backend_port, apiservice):
    core = k8s.CoreV1Api(api)
    core.create_namespace({"metadata": {"name": NS}})
    core.create_namespaced_service(NS, {"metadata": {"name": "backend"}, "spec": {
        "ports": [{"name": "https", "port": 443, "targetPort": 8443}]}})
    core.create_namespaced_endpoints(NS, {"metadata": {"name": "backend"}, "subsets": [{
        "addresses": [{"ip": "127.0.0.1"}],
        "ports": [{"name": "https", "port": backend_port}]}]})
    k8s.ApiregistrationV1Api(api).create_api_service(apiservice)


def _condition(api, name=f"{VERSION}.{GROUP}"):
    obj = k8s.ApiregistrationV1Api(api).read_api_service(name)
    for c in (obj.status.conditions or []) if obj.status else []:
        if c.type == "Available":
            return c
    return None


def _wait_available(api, status="True"):
    return _wait(lambda: (c := _condition(api)) is not None and c.status == status and c,
                 what=f"Available={status}")


@pytest.fixture
def registered(api, backend):
    _register(api, backend.port, _apiservice(ca_bundle=backend.ca_bundle))
    _wait_available(api)
    return backend


def _robot(server, api, *, grant=True):
    """A ServiceAccount allowed (or not) to use things/echo and things/console."""
    core = k8s.CoreV1Api(api)
    name = "robot-" + uuid.uuid4().hex[:6]
    core.create_namespaced_service_account(NS, {"metadata": {"name": name}})
    if grant:
        rbac = k8s.RbacAuthorizationV1Api(api)
        rbac.create_namespaced_role(NS, {"metadata": {"name": name}, "rules": [{
            "apiGroups": [GROUP], "resources": ["things/echo", "things/console"],
            "verbs": ["get", "update"]}]})
        rbac.create_namespaced_role_binding(NS, {"metadata": {"name": name}, "roleRef": {
            "apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
            "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": NS}]})
    return name, server.token_for_service_account(NS, name)


def test_subresource_is_served_with_the_callers_identity(server, api, registered):
    name, token = _robot(server, api)
    code, body = Raw(server, token=token).request(
        "GET", f"{BASE}/namespaces/{NS}/things/vm1/echo?x=1",
        headers={"X-Remote-User": "system:admin", "X-Remote-Group": "system:masters"})
    assert code == 200, body
    user = f"system:serviceaccount:{NS}:{name}"
    assert body["user"] == user and body["name"] == "vm1" and body["query"] == {"x": "1"}
    # What the client claimed in front-proxy headers was dropped, not passed on.
    assert body["groups"] == ["system:serviceaccounts", f"system:serviceaccounts:{NS}",
                              "system:authenticated"]
    call = [c for c in registered.calls if c.get("path", "").endswith("/vm1/echo")][-1]
    assert call["user"] == user and call["authorization"] is None  # the token stays here
    assert any(k == "authentication.kubernetes.io/credential-id" for k in call["extra"])
    # A body is forwarded (KubeVirt's start/stop are PUTs with a body).
    code, body = Raw(server, token=token).request(
        "PUT", f"{BASE}/namespaces/{NS}/things/vm1/echo", {"gracePeriod": 0})
    assert code == 200 and body["method"] == "PUT" and json.loads(body["body"]) == {
        "gracePeriod": 0}


def test_the_server_authorizes_before_proxying(server, api, registered):
    _, token = _robot(server, api, grant=False)
    before = len(registered.calls)
    code, body = Raw(server, token=token).request(
        "GET", f"{BASE}/namespaces/{NS}/things/vm1/echo")
    assert code == 403 and f'resource "things/echo" in API group "{GROUP}"' in body["message"]
    code, _ = Raw(server, token="not-a-token").request(
        "GET", f"{BASE}/namespaces/{NS}/things/vm1/echo")
    assert code == 401
    assert not [c for c in registered.calls[before:] if c.get("path", "").endswith("/echo")]


def test_kubectl_and_the_python_client_reach_the_backend(server, api, registered):
    kubeconfig = str(server.kubeconfig_path)
    out = subprocess.run([KUBECTL, "--kubeconfig", kubeconfig, "get", "--raw",
                          f"{BASE}/namespaces/{NS}/things/vm2/echo"],
                         capture_output=True, text=True, timeout=60, check=True).stdout
    assert json.loads(out)["user"] == "admin" and json.loads(out)["name"] == "vm2"
    resources = subprocess.run([KUBECTL, "--kubeconfig", kubeconfig, "api-resources",
                                f"--api-group={GROUP}", "--no-headers"],
                               capture_output=True, text=True, timeout=60, check=True).stdout
    assert resources.split()[:4] == ["things", GROUP + "/" + VERSION, "true", "Thing"]
    data, status, _ = api.call_api(
        f"{BASE}/namespaces/{NS}/things/vm3/echo", "GET", auth_settings=["BearerToken"],
        response_types_map={200: "object"}, header_params={"Accept": "application/json"},
        _return_http_data_only=False)
    assert status == 200 and data["name"] == "vm3"


def test_discovery_is_merged(server, api, registered):
    raw = Raw(server)
    code, groups = raw.request("GET", "/apis")
    assert code == 200
    group = next(g for g in groups["groups"] if g["name"] == GROUP)
    assert group["preferredVersion"]["groupVersion"] == f"{GROUP}/{VERSION}"
    code, doc = raw.request("GET", f"/apis/{GROUP}")
    assert code == 200 and doc["kind"] == "APIGroup"
    code, doc = raw.request("GET", BASE)  # answered by the backend itself
    assert code == 200 and [r["name"] for r in doc["resources"]][:2] == ["things",
                                                                         "things/echo"]
    code, doc = raw.request("GET", "/apis", headers={
        "Accept": "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"})
    item = next(i for i in doc["items"] if i["metadata"]["name"] == GROUP)
    things = item["versions"][0]["resources"][0]
    assert things["resource"] == "things" and things["scope"] == "Namespaced"
    assert {s["subresource"] for s in things["subresources"]} == {"echo", "console"}


def test_websocket_console_through_the_proxy(server, api, registered):
    name, token = _robot(server, api)

    async def session():
        ctx = ssl.create_default_context(cafile=str(server.ca_path))
        url = (server.url.replace("https://", "wss://") +
               f"{BASE}/namespaces/{NS}/things/vm1/console")
        async with aiohttp.ClientSession() as http, http.ws_connect(
                url, ssl=ctx, protocols=["plain.kubevirt.io"],
                headers={"Authorization": f"Bearer {token}"},
                timeout=aiohttp.ClientWSTimeout(ws_close=30)) as ws:
            hello = await ws.receive_str(timeout=30)
            await ws.send_bytes(b"\x00\x01login:")
            echoed = await ws.receive_bytes(timeout=30)
            result = ws.protocol, json.loads(hello), echoed
        await asyncio.sleep(0.25)  # let the TLS connection shut down before the loop ends
        return result

    protocol, hello, echoed = asyncio.run(session())
    assert protocol == "plain.kubevirt.io"
    assert hello == {"user": f"system:serviceaccount:{NS}:{name}"}
    assert echoed == b"echo:\x00\x01login:"


def _refused_upgrade(server, token, thing):
    """A console upgrade for ``thing`` that the test expects refused: the status, and
    what the refusal said (apiservice.refusal)."""
    from apiservice.refusal import keep_refusal, last_refusal

    async def session():
        ctx = ssl.create_default_context(cafile=str(server.ca_path))
        url = (server.url.replace("https://", "wss://") +
               f"{BASE}/namespaces/{NS}/things/{thing}/console")
        try:
            async with aiohttp.ClientSession(middlewares=(keep_refusal,)) as http:
                with pytest.raises(aiohttp.WSServerHandshakeError) as err:
                    await http.ws_connect(url, ssl=ctx, protocols=["plain.kubevirt.io"],
                                          headers={"Authorization": f"Bearer {token}"})
                return err.value.status, last_refusal()
        finally:
            await asyncio.sleep(0.25)  # let the TLS connection shut down before the loop ends

    return asyncio.run(session())


def test_a_refused_websocket_upgrade_comes_back_as_the_backend_said(server, api, registered):
    """As kube-apiserver's upgrade-aware proxy: the backend's status and body (its reason),
    not the proxy's own "refused the WebSocket upgrade" without one."""
    _, token = _robot(server, api)
    status, refused = _refused_upgrade(server, token, "stopped")
    assert status == 409
    assert refused is not None and refused.status == 409
    assert refused.content_type == "application/json"
    assert json.loads(refused.body)["reason"] == "Conflict"
    assert refused.reason == "thing stopped is not running"


def test_a_backend_that_never_answers_an_upgrade_is_a_503_in_time(server, api, registered,
                                                                  monkeypatch):
    """The proxy bounds the upgrade's handshake (UPGRADE_TIMEOUT, 1 s here): before, only
    the connect was, and a backend that took the request and never answered held it."""
    from localcluster.apiserver.aggregation import proxy

    monkeypatch.setattr(proxy, "UPGRADE_TIMEOUT", 1.0)
    _, token = _robot(server, api)
    started = time.monotonic()
    status, refused = _refused_upgrade(server, token, "hang")
    assert time.monotonic() - started < 4
    assert status == 503
    assert refused is not None and "no answer to the upgrade in 1 s" in refused.reason


def test_an_unreachable_backend_is_unavailable_with_503(server, api, backend):
    _register(api, backend.port, _apiservice(ca_bundle=backend.ca_bundle))
    _wait_available(api)
    backend.stop()
    cond = _wait_available(api, "False")
    assert cond.reason == "FailedDiscoveryCheck"
    assert f"127.0.0.1:{backend.port}" in cond.message
    code, body = Raw(server).request("GET", f"{BASE}/namespaces/{NS}/things/vm1/echo")
    assert code == 503 and body["reason"] == "ServiceUnavailable"
    assert f"APIService {VERSION}.{GROUP}" in body["message"]
    assert "FailedDiscoveryCheck" in body["message"]
    code, groups = Raw(server).request("GET", "/apis")
    assert GROUP not in [g["name"] for g in groups["groups"]]
    table = subprocess.run([KUBECTL, "--kubeconfig", str(server.kubeconfig_path), "get",
                            "apiservices", f"{VERSION}.{GROUP}", "v1.apps", "--no-headers"],
                           capture_output=True, text=True, timeout=60, check=True).stdout
    rows = [line.split() for line in table.splitlines()]
    assert rows[0][:4] == [f"{VERSION}.{GROUP}", f"{NS}/backend", "False",
                           "(FailedDiscoveryCheck)"]
    assert rows[1][:3] == ["v1.apps", "Local", "True"]


def test_a_missing_service_is_reported(server, api):
    k8s.CoreV1Api(api).create_namespace({"metadata": {"name": NS}})
    k8s.ApiregistrationV1Api(api).create_api_service(_apiservice(insecure=True))
    cond = _wait_available(api, "False")
    assert cond.reason == "ServiceNotFound" and 'service/backend in "agg"' in cond.message


def test_a_backend_with_another_ca_is_refused(server, api, backend, tmp_path):
    other = ensure_tls(tmp_path / "other-ca")
    _register(api, backend.port, _apiservice(
        ca_bundle=base64.b64encode(other.ca_pem()).decode()))
    cond = _wait_available(api, "False")
    assert cond.reason == "FailedDiscoveryCheck" and "CERTIFICATE_VERIFY_FAILED" in \
        cond.message
    code, body = Raw(server).request("GET", f"{BASE}/namespaces/{NS}/things/vm1/echo")
    assert code == 503 and "CERTIFICATE_VERIFY_FAILED" in body["message"]
    assert not [c for c in backend.calls if c.get("path", "").endswith("/echo")]
    # insecureSkipTLSVerify trusts any serving certificate.
    apis = k8s.ApiregistrationV1Api(api)
    apis.patch_api_service(f"{VERSION}.{GROUP}", {"spec": {"caBundle": None,
                                                           "insecureSkipTLSVerify": True}})
    _wait_available(api)
    code, body = Raw(server).request("GET", f"{BASE}/namespaces/{NS}/things/vm1/echo")
    assert code == 200 and body["user"] == "admin"


def test_the_backend_refuses_requests_that_bypass_the_proxy(server, api, registered,
                                                            tmp_path):
    url = f"https://127.0.0.1:{registered.port}{BASE}/namespaces/{NS}/things/vm1/echo"
    ctx = ssl.create_default_context(cadata=registered.tls.ca_pem().decode())
    ctx.check_hostname = False
    forged = {"X-Remote-User": "system:admin", "X-Remote-Group": "system:masters"}

    async def direct(client_ctx):
        async with aiohttp.ClientSession() as http:
            async with http.get(url, ssl=client_ctx, headers=forged,
                                timeout=aiohttp.ClientTimeout(30)) as r:
                status = r.status
            await asyncio.sleep(0.25)  # the TLS shutdown, before the loop ends
            return status

    assert asyncio.run(direct(ctx)) == 401
    refused = [c for c in registered.calls if c["path"].endswith("/vm1/echo")]
    assert "no verified client certificate" in refused[-1]["refused"]
    # A client certificate from another CA does not even complete the handshake.
    other = ensure_tls(tmp_path / "other")
    ctx.load_cert_chain(str(other.server_cert), str(other.server_key))
    with pytest.raises(aiohttp.ClientError):
        asyncio.run(direct(ctx))


def test_local_apiservices_and_the_published_front_proxy_settings(server, api):
    apis = k8s.ApiregistrationV1Api(api)
    names = {a.metadata.name: a for a in apis.list_api_service().items}
    for name in ("v1.", "v1.apps", "v1.apiregistration.k8s.io", "v1.authentication.k8s.io"):
        assert names[name].spec.service is None
        assert names[name].status.conditions[0].reason == "Local"
    cm = k8s.CoreV1Api(api).read_namespaced_config_map(frontproxy.CONFIGMAP_NAME,
                                                         frontproxy.CONFIGMAP_NAMESPACE)
    assert json.loads(cm.data["requestheader-allowed-names"]) == ["front-proxy-client"]
    assert json.loads(cm.data["requestheader-username-headers"]) == ["X-Remote-User"]
    assert cm.data["client-ca-file"] == server.ca_path.read_text()
    proxy_ca = Path(server.data_dir / "pki" / "front-proxy-ca.crt").read_text()
    assert cm.data["requestheader-client-ca-file"] == proxy_ca != cm.data["client-ca-file"]


def test_apiservice_validation(server, api):
    apis = k8s.ApiregistrationV1Api(api)
    bad = _apiservice(insecure=True)
    bad["metadata"]["name"] = "v2.wrong.example.com"
    with pytest.raises(k8s.ApiException) as err:
        apis.create_api_service(bad)
    assert err.value.status == 422 and "metadata.name" in err.value.body
    bad = _apiservice(ca_bundle="bm90IGEgY2VydA==")  # "not a cert"
    with pytest.raises(k8s.ApiException) as err:
        apis.create_api_service(bad)
    assert err.value.status == 422 and "spec.caBundle" in err.value.body


def test_request_attributes_of_proxied_paths():
    from localcluster.apiserver.kinds.apiservices import request_attributes

    assert request_attributes("GET", [], watch=False) is None
    assert request_attributes("PUT", ["namespaces", "ns", "vms", "a", "start"], watch=False) \
        == {"verb": "update", "resource": "vms", "subresource": "start", "name": "a",
            "namespace": "ns"}
    assert request_attributes("GET", ["namespaces", "ns", "vms"], watch=True)["verb"] == \
        "watch"
    assert request_attributes("GET", ["watch", "vms"], watch=False)["verb"] == "watch"
    assert request_attributes("DELETE", ["vms"], watch=False)["verb"] == "deletecollection"
    assert request_attributes("GET", ["namespaces", "ns"], watch=False) == {
        "verb": "get", "resource": "namespaces", "subresource": "", "name": "ns",
        "namespace": "ns"}
