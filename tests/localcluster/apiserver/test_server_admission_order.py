"""The order of a write as kube-apiserver runs it, against a real HTTPS webhook server
that counts its calls: decode and defaults, mutating webhooks (defaults filled again after
each patch), validation (422), validating webhooks, then storage (409). Also what a
webhook's refusal and warnings become in the answer, and ``metadata: null``."""

from __future__ import annotations

import base64
import json
import ssl
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from localcluster.apiserver.threaded import ServerThread
from localcluster.apiserver.tls import ensure_tls
from tests.fixtures.appthread import AppThread

from .server_fixtures import WIDGET_CRD

WIDGETS = "/apis/example.com/v1/namespaces/hooked/widgets"
CONFIGMAPS = "/api/v1/namespaces/hooked/configmaps"
GIZMOS = "/apis/example.com/v1alpha3/namespaces/hooked/gizmos"
GIZMO_CRD: dict[str, Any] = {
    "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
    "metadata": {"name": "gizmos.example.com"},
    "spec": {"group": "example.com", "scope": "Namespaced",
             "names": {"plural": "gizmos", "kind": "Gizmo"},
             "versions": [{"name": name, "served": True, "storage": name == "v1",
                           "deprecated": name == "v1alpha3",
                           "schema": {"openAPIV3Schema": {
                               "type": "object", "x-kubernetes-preserve-unknown-fields": True}}}
                          for name in ("v1alpha3", "v1")]}}
CAUSE = {"reason": "FieldValueInvalid", "message": "too big for the test", "field": "spec.size"}


@dataclass
class Hooks:
    """What the webhook server saw: (path, operation, name) per call."""

    calls: list[tuple[str, str, str]] = field(default_factory=list)

    def count(self, path: str) -> int:
        return sum(1 for c in self.calls if c[0] == path)


def _answer(review: dict[str, Any], **response: Any) -> web.Response:
    return web.json_response({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                              "response": {"uid": review["request"]["uid"], **response}})


def _app(hooks: Hooks) -> web.Application:
    async def handle(request: web.Request) -> web.Response:
        review = await request.json()
        req = review["request"]
        obj = req.get("object") or {}
        labels = (obj.get("metadata") or {}).get("labels") or {}
        hooks.calls.append((request.path, req["operation"], req.get("name", "")))
        warnings = ["the test webhooks warn", f"{request.path} saw it"] \
            if labels.get("warn") else []
        if request.path == "/mutate":
            ops = []
            if labels.get("drop-color"):
                ops.append({"op": "remove", "path": "/spec/color"})
            if labels.get("bad-color"):
                ops.append({"op": "replace", "path": "/spec/color", "value": "green"})
            if labels.get("resize") and req["operation"] == "UPDATE":
                ops.append({"op": "replace", "path": "/spec/size", "value": 7})
                ops.append({"op": "add", "path": "/status", "value": {"phase": "Forged"}})
            extra = {"patchType": "JSONPatch",
                     "patch": base64.b64encode(json.dumps(ops).encode()).decode()} \
                if ops else {}
            return _answer(review, allowed=True, warnings=warnings, **extra)
        if labels.get("deny-again") and request.path == "/again":
            return _answer(review, allowed=False, warnings=warnings)
        if labels.get("deny") and request.path == "/validate":
            return _answer(review, allowed=False, warnings=warnings, status={
                "code": 422, "reason": "Invalid", "message": "spec.size: too big for the test",
                "details": {"causes": [CAUSE]}})
        return _answer(review, allowed=True, warnings=warnings)

    app = web.Application()
    app.router.add_post("/{tail:.*}", handle)
    return app


@dataclass
class Cluster:
    server: Any
    hooks: Hooks

    def request(self, method: str, path: str, body: Any = None) -> tuple[int, Any, list[str]]:
        """(status, JSON body, the Warning headers)."""
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.server.url + path, data=data, method=method)
        req.add_header("Authorization", f"Bearer {self.server.admin_token}")
        req.add_header("Content-Type", "application/merge-patch+json" if method == "PATCH"
                       else "application/json")
        ctx = ssl.create_default_context(cafile=str(self.server.ca_path))
        try:
            with urllib.request.urlopen(req, context=ctx, timeout=30) as resp:
                return resp.status, json.loads(resp.read()), resp.headers.get_all("Warning") or []
        except urllib.error.HTTPError as err:
            return err.code, json.loads(err.read()), err.headers.get_all("Warning") or []


def _hook(name: str, path: str, port: int, bundle: str, resources: list[str],
          group: str, version: str = "v1") -> dict[str, Any]:
    return {"name": name, "sideEffects": "None", "admissionReviewVersions": ["v1"],
            "timeoutSeconds": 5, "failurePolicy": "Fail",
            "clientConfig": {"url": f"https://127.0.0.1:{port}{path}", "caBundle": bundle},
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "hooked"}},
            "rules": [{"operations": ["CREATE", "UPDATE"], "apiGroups": [group],
                       "apiVersions": [version], "resources": resources}]}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    tmp: Path = tmp_path_factory.mktemp("order")
    tls = ensure_tls(tmp / "hook-pki")
    hooks = Hooks()

    async def build() -> tuple[web.Application, ssl.SSLContext]:
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(tls.server_cert, tls.server_key)
        return _app(hooks), context

    webhooks = AppThread(build, name="webhooks")
    webhooks.start()
    thread = ServerThread(tmp / "api")
    try:
        cluster = Cluster(thread.start(), hooks)
        bundle = base64.b64encode(tls.ca_cert.read_bytes()).decode()
        assert cluster.request("POST", "/apis/apiextensions.k8s.io/v1/"
                               "customresourcedefinitions", WIDGET_CRD)[0] == 201
        assert cluster.request("POST", "/apis/apiextensions.k8s.io/v1/"
                               "customresourcedefinitions", GIZMO_CRD)[0] == 201
        assert cluster.request("POST", "/api/v1/namespaces",
                               {"metadata": {"name": "hooked"}})[0] == 201
        port = webhooks.port
        assert cluster.request(
            "POST", "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations",
            {"metadata": {"name": "m"}, "webhooks": [
                _hook("mutate.test.io", "/mutate", port, bundle, ["widgets"],
                      "example.com")]})[0] == 201
        assert cluster.request(
            "POST", "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations",
            {"metadata": {"name": "v"}, "webhooks": [
                _hook("validate.test.io", "/validate", port, bundle, ["widgets"],
                      "example.com"),
                _hook("validate-cm.test.io", "/validate", port, bundle, ["configmaps"], ""),
                _hook("again.test.io", "/again", port, bundle,
                      ["widgets", "configmaps", "gizmos"], "*", "*")]})[0] == 201
        for _ in range(200):  # the CRDs are served once their status says so
            if cluster.request("GET", WIDGETS)[0] == cluster.request("GET", GIZMOS)[0] == 200:
                break
        yield cluster
    finally:
        thread.stop()
        webhooks.stop()


def widget(name: str, size: Any = 5, **labels: str) -> dict[str, Any]:
    return {"apiVersion": "example.com/v1", "kind": "Widget",
            "metadata": {"name": name, "labels": labels}, "spec": {"size": size}}


def _calls(cluster: Cluster, name: str) -> list[str]:
    return [path for path, _, n in cluster.hooks.calls if n == name]


def test_a_schema_invalid_object_never_reaches_a_validating_webhook(cluster: Cluster) -> None:
    code, status, _ = cluster.request("POST", WIDGETS, widget("invalid", size="big"))
    assert code == 422 and status["reason"] == "Invalid"
    assert status["details"]["causes"][0]["field"] == "spec.size"
    # the mutating webhook ran (before validation), no validating one did
    assert _calls(cluster, "invalid") == ["/mutate"]
    code, _, _ = cluster.request("POST", WIDGETS, widget("invalid", size=5))
    assert code == 201
    assert sorted(_calls(cluster, "invalid")) == ["/again", "/mutate", "/mutate", "/validate"]


def test_an_object_a_mutating_webhook_made_invalid_is_refused(cluster: Cluster) -> None:
    code, status, _ = cluster.request("POST", WIDGETS, widget("painted", **{"bad-color": "1"}))
    assert code == 422, status
    assert status["details"]["causes"][0]["field"] == "spec.color"
    assert _calls(cluster, "painted") == ["/mutate"]


def test_defaults_are_filled_again_after_a_patch(cluster: Cluster) -> None:
    code, obj, _ = cluster.request("POST", WIDGETS, widget("recolored",
                                                           **{"drop-color": "1"}))
    assert code == 201 and obj["spec"]["color"] == "blue"


@pytest.mark.parametrize(("labels", "code", "reason"), [
    ({"deny": "1"}, 422, "Invalid"),  # the webhook's refusal wins over the duplicate
    ({}, 409, "AlreadyExists"),
])
def test_a_duplicate_is_a_conflict_only_after_the_webhooks(cluster: Cluster,
                                                           labels: dict[str, str], code: int,
                                                           reason: str) -> None:
    name = f"dup-{code}"
    assert cluster.request("POST", WIDGETS, widget(name))[0] == 201
    before = len(_calls(cluster, name))
    got, status, _ = cluster.request("POST", WIDGETS, widget(name, **labels))
    assert (got, status["reason"]) == (code, reason), status
    assert len(_calls(cluster, name)) == before + 3  # mutate, validate, again


def test_a_duplicate_of_an_object_being_deleted(cluster: Cluster) -> None:
    body = {"metadata": {"name": "held", "finalizers": ["test.io/hold"]}}
    assert cluster.request("POST", CONFIGMAPS, body)[0] == 201
    assert cluster.request("DELETE", f"{CONFIGMAPS}/held")[0] == 200
    code, status, _ = cluster.request("POST", CONFIGMAPS, body)
    assert code == 409 and status["reason"] == "AlreadyExists"
    assert status["message"] == 'object is being deleted: configmaps "held" already exists'
    cluster.request("PATCH", f"{CONFIGMAPS}/held", {"metadata": {"finalizers": None}})


def test_an_update_is_validated_before_the_validating_webhooks(cluster: Cluster) -> None:
    code, obj, _ = cluster.request("POST", WIDGETS, widget("updated"))
    assert code == 201
    calls = len(_calls(cluster, "updated"))
    obj["spec"]["size"] = 1000
    code, status, _ = cluster.request("PUT", f"{WIDGETS}/updated", obj)
    assert code == 422 and status["details"]["causes"][0]["field"] == "spec.size"
    assert _calls(cluster, "updated")[calls:] == ["/mutate"]
    code, status, _ = cluster.request("PATCH", f"{WIDGETS}/updated",
                                      {"metadata": {"labels": {"deny": "1"}}})
    assert code == 422 and status["message"] == (
        'admission webhook "validate.test.io" denied the request: spec.size: too big for the '
        "test")
    assert sorted(_calls(cluster, "updated")[calls + 1:]) == ["/again", "/mutate", "/validate"]


def test_a_denial_carries_the_webhooks_status(cluster: Cluster) -> None:
    code, status, _ = cluster.request("POST", WIDGETS, widget("denied", deny="1"))
    assert code == 422
    assert status == {
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": 'admission webhook "validate.test.io" denied the request: spec.size: too '
                   "big for the test",
        "reason": "Invalid", "code": 422, "details": {"causes": [CAUSE]}}


@pytest.mark.parametrize(("name", "labels", "code"), [
    ("warned", {"warn": "1"}, 201),
    ("warned-and-denied", {"warn": "1", "deny": "1"}, 422),
])
def test_webhook_warnings_are_headers_once_each(cluster: Cluster, name: str,
                                                labels: dict[str, str], code: int) -> None:
    got, _, warnings = cluster.request("POST", WIDGETS, widget(name, **labels))
    assert got == code
    # three webhooks sent "the test webhooks warn": one header; each path's own too
    assert sorted(warnings) == sorted([
        '299 - "the test webhooks warn"', '299 - "/mutate saw it"',
        '299 - "/validate saw it"', '299 - "/again saw it"'])


@pytest.mark.parametrize("path", [CONFIGMAPS, WIDGETS])
def test_null_metadata_is_empty_metadata(cluster: Cluster, path: str) -> None:
    body: dict[str, Any] = {"metadata": None, "data": {"a": "b"}} if path == CONFIGMAPS else {
        "apiVersion": "example.com/v1", "kind": "Widget", "metadata": None,
        "spec": {"size": 1}}
    code, status, _ = cluster.request("POST", path, body)
    assert code == 422, status
    assert status["details"]["causes"] == [{
        "reason": "FieldValueRequired", "field": "metadata.name",
        "message": "Required value: name or generateName is required"}]


def test_a_deprecated_versions_warning_survives_a_refusal(cluster: Cluster) -> None:
    gizmo = {"apiVersion": "example.com/v1alpha3", "kind": "Gizmo",
             "metadata": {"name": "old", "labels": {"warn": "1", "deny-again": "1"}}}
    code, status, warnings = cluster.request("POST", GIZMOS, gizmo)
    assert code == 400 and status["message"] == (
        'admission webhook "again.test.io" denied the request without explanation')
    assert warnings == ['299 - "example.com/v1alpha3 Gizmo is deprecated"',
                        '299 - "the test webhooks warn"', '299 - "/again saw it"']


def test_a_webhooks_change_on_update_is_an_update_too(cluster: Cluster) -> None:
    """The spec a webhook changed moves the generation; a status it wrote through the main
    resource is undone (the status subresource owns it), as upstream's PrepareForUpdate."""
    code, obj, _ = cluster.request("POST", WIDGETS, widget("resized"))
    assert code == 201 and obj["metadata"]["generation"] == 1
    code, obj, _ = cluster.request("PATCH", f"{WIDGETS}/resized",
                                   {"metadata": {"labels": {"resize": "1"}}})
    assert code == 200, obj
    assert obj["spec"]["size"] == 7 and obj["metadata"]["generation"] == 2
    assert "status" not in obj
