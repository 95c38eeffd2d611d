"""Admission webhooks registered through the API are called over HTTPS before writes:
mutation, denial, failurePolicy, namespaceSelector, and Service references."""

from __future__ import annotations

import base64
import json
import threading

import pytest
from aiohttp import web
from kubernetes import client as k8s

from localcluster.apiserver.tls import ensure_tls
from tests.fixtures.ports import free_port

from .server_fixtures import make_client


class WebhookServer:
    """A real HTTPS admission webhook: /mutate adds a label, /validate denies label deny."""

    def __init__(self, pki_dir) -> None:
        self.tls = ensure_tls(pki_dir, dns_names=("hooks.free.svc",))
        self.calls: list[dict] = []
        self.port = 0
        self._ready = threading.Event()
        self._stop: object = None
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        import asyncio

        async def review(request: web.Request) -> web.Response:
            body = await request.json()
            req = body["request"]
            self.calls.append({"path": request.path, "operation": req["operation"],
                               "name": req.get("name")})
            response = {"uid": req["uid"], "allowed": True}
            labels = ((req.get("object") or {}).get("metadata") or {}).get("labels") or {}
            if request.path == "/mutate":
                ops = [{"op": "add", "path": "/metadata/labels", "value": {
                    **labels, "mutated": "yes"}}]
                response.update(patchType="JSONPatch",
                                patch=base64.b64encode(json.dumps(ops).encode()).decode())
            elif labels.get("deny") == "yes":
                response.update(allowed=False, status={"code": 403,
                                                       "message": "denied by the test hook"})
            return web.json_response({"apiVersion": "admission.k8s.io/v1",
                                      "kind": "AdmissionReview", "response": response})

        async def main() -> None:
            app = web.Application()
            app.router.add_post("/mutate", review)
            app.router.add_post("/validate", review)
            runner = web.AppRunner(app, access_log=None)
            await runner.setup()
            site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=self.tls.server_context())
            await site.start()
            self.port = site._server.sockets[0].getsockname()[1]
            stop = asyncio.Event()
            self._stop = (asyncio.get_running_loop(), stop)
            self._ready.set()
            await stop.wait()
            await runner.cleanup()

        asyncio.run(main())

    def __enter__(self) -> WebhookServer:
        self._thread.start()
        self._ready.wait(10)
        return self

    def __exit__(self, *exc) -> None:
        loop, stop = self._stop
        loop.call_soon_threadsafe(stop.set)
        self._thread.join(10)

    @property
    def ca_bundle(self) -> str:
        return base64.b64encode(self.tls.ca_pem()).decode()


def _hook(name, client_config, *, namespace, policy="Fail", ops=("CREATE",)):
    return {"name": name, "clientConfig": client_config, "failurePolicy": policy,
            "sideEffects": "None", "admissionReviewVersions": ["v1"], "timeoutSeconds": 5,
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}},
            "rules": [{"operations": list(ops), "apiGroups": [""], "apiVersions": ["v1"],
                       "resources": ["configmaps"]}]}


@pytest.fixture
def cluster(fresh_server):
    server = fresh_server.server
    with make_client(server) as api:
        core = k8s.CoreV1Api(api)
        for ns in ("hooked", "free"):
            core.create_namespace({"metadata": {"name": ns}})
        yield api


def test_mutating_and_validating_webhooks(cluster, tmp_path):
    core = k8s.CoreV1Api(cluster)
    adm = k8s.AdmissionregistrationV1Api(cluster)
    with WebhookServer(tmp_path / "hook-pki") as hook:
        base = f"https://127.0.0.1:{hook.port}"
        adm.create_mutating_webhook_configuration({"metadata": {"name": "m"}, "webhooks": [
            _hook("mutate.example.com", {"url": base + "/mutate", "caBundle": hook.ca_bundle},
                  namespace="hooked")]})
        adm.create_validating_webhook_configuration({"metadata": {"name": "v"}, "webhooks": [
            _hook("validate.example.com", {"url": base + "/validate",
                                           "caBundle": hook.ca_bundle},
                  namespace="hooked", ops=("CREATE", "UPDATE"))]})
        cm = core.create_namespaced_config_map("hooked", {"metadata": {"name": "a"}})
        assert cm.metadata.labels == {"mutated": "yes"}
        with pytest.raises(k8s.ApiException) as err:
            core.create_namespaced_config_map("hooked", {"metadata": {
                "name": "b", "labels": {"deny": "yes"}}})
        status = json.loads(err.value.body)
        assert err.value.status == 403 and "denied by the test hook" in status["message"]
        with pytest.raises(k8s.ApiException) as err:
            core.patch_namespaced_config_map("a", "hooked", {"metadata": {"labels": {
                "deny": "yes"}}})
        assert err.value.status == 403
        assert core.read_namespaced_config_map("a", "hooked").metadata.labels == {
            "mutated": "yes"}
        assert [n.metadata.name for n in core.list_namespaced_config_map("hooked").items] \
            == ["a", "kube-root-ca.crt"]
        # other namespaces are not selected
        free = core.create_namespaced_config_map("free", {"metadata": {
            "name": "c", "labels": {"deny": "yes"}}})
        assert free.metadata.labels == {"deny": "yes"}
        assert {c["path"] for c in hook.calls} == {"/mutate", "/validate"}


def test_failure_policy_when_the_webhook_is_down(cluster):
    core = k8s.CoreV1Api(cluster)
    adm = k8s.AdmissionregistrationV1Api(cluster)
    dead = f"https://127.0.0.1:{free_port()}/validate"
    adm.create_validating_webhook_configuration({"metadata": {"name": "down"}, "webhooks": [
        _hook("fail.example.com", {"url": dead}, namespace="hooked"),
        _hook("ignore.example.com", {"url": dead}, namespace="free", policy="Ignore")]})
    with pytest.raises(k8s.ApiException) as err:
        core.create_namespaced_config_map("hooked", {"metadata": {"name": "x"}})
    assert err.value.status >= 500 and "fail.example.com" in err.value.body
    assert [n.metadata.name for n in core.list_namespaced_config_map("hooked").items] == [
        "kube-root-ca.crt"]
    core.create_namespaced_config_map("free", {"metadata": {"name": "y"}})


def test_webhook_behind_a_service(cluster, tmp_path):
    core = k8s.CoreV1Api(cluster)
    adm = k8s.AdmissionregistrationV1Api(cluster)
    with WebhookServer(tmp_path / "hook-pki") as hook:
        core.create_namespaced_service("free", {"metadata": {"name": "hooks"}, "spec": {
            "ports": [{"name": "https", "port": 443, "targetPort": hook.port}]}})
        adm.create_mutating_webhook_configuration({"metadata": {"name": "svc"}, "webhooks": [
            _hook("svc.example.com", {"service": {"namespace": "free", "name": "hooks",
                                                  "path": "/mutate", "port": 443},
                                      "caBundle": hook.ca_bundle}, namespace="hooked")]})
        cm = core.create_namespaced_config_map("hooked", {"metadata": {"name": "s"}})
        assert cm.metadata.labels == {"mutated": "yes"}


def test_a_resolver_may_call_the_server_itself(fresh_server, cluster, tmp_path):
    core = k8s.CoreV1Api(cluster)
    adm = k8s.AdmissionregistrationV1Api(cluster)
    asked = []

    def resolver(namespace, name, port):
        # a blocking request to this very server, as a cache-less resolver would make
        svc = core.read_namespaced_service(name, namespace)
        asked.append((namespace, name, port))
        return "127.0.0.1", svc.spec.ports[0].target_port

    fresh_server.server.set_service_resolver(resolver)
    with WebhookServer(tmp_path / "hook-pki") as hook:
        core.create_namespaced_service("free", {"metadata": {"name": "hooks"}, "spec": {
            "ports": [{"port": 8443, "targetPort": hook.port}]}})
        adm.create_mutating_webhook_configuration({"metadata": {"name": "svc"}, "webhooks": [
            _hook("svc.example.com", {"service": {"namespace": "free", "name": "hooks",
                                                  "path": "/mutate", "port": 8443},
                                      "caBundle": hook.ca_bundle}, namespace="hooked")]})
        cm = core.create_namespaced_config_map("hooked", {"metadata": {"name": "s"}})
        assert cm.metadata.labels == {"mutated": "yes"}
    assert asked == [("free", "hooks", 8443)]
