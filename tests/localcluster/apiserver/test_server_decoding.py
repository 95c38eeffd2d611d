"""Built-in kinds decoded as kube-apiserver decodes them (Kubernetes v1.32's schemas):
unknown fields under fieldValidation Strict/Warn/Ignore, duplicate keys, values of the
wrong type, ``metadata`` unknown fields, YAML bodies, nesting limits. Real server on
loopback; each check has its refused and its accepted case."""

from __future__ import annotations

import json
import ssl
import urllib.error
import urllib.request
from typing import Any

import pytest


class Http:
    def __init__(self, server) -> None:
        self.base = server.url
        self.token = server.admin_token
        self.ctx = ssl.create_default_context(cafile=str(server.ca_path))

    def __call__(self, method: str, path: str, data: bytes | None = None,
                 content_type: str = "application/json") -> tuple[int, list[str], Any]:
        req = urllib.request.Request(self.base + path, data=data, method=method)
        req.add_header("Authorization", f"Bearer {self.token}")
        if data is not None:
            req.add_header("Content-Type", content_type)
        try:
            with urllib.request.urlopen(req, context=self.ctx, timeout=30) as resp:
                status, headers, text = resp.status, resp.headers, resp.read()
        except urllib.error.HTTPError as err:
            status, headers, text = err.code, err.headers, err.read()
        return status, headers.get_all("Warning") or [], json.loads(text)

    def stream(self, path: str):
        """A streaming GET (watch); the caller reads lines and closes it."""
        req = urllib.request.Request(self.base + path)
        req.add_header("Authorization", f"Bearer {self.token}")
        return urllib.request.urlopen(req, context=self.ctx, timeout=30)


@pytest.fixture
def http(shared_server):
    return Http(shared_server)


def _pod(name: str, **container: Any) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"containers": [{"name": "c", "image": "busybox", **container}]}}


def test_unknown_field_strict_refused_with_kubectl_wording(http, namespace):
    body = json.dumps(_pod("typo", imagePullPolcy="Always")).encode()
    code, _, status = http("POST", f"/api/v1/namespaces/{namespace}/pods"
                                   "?fieldValidation=Strict", body)
    assert code == 400
    assert status["reason"] == "BadRequest"
    assert status["message"] == ('strict decoding error: unknown field '
                                 '"spec.containers[0].imagePullPolcy"')
    code, _, _ = http("GET", f"/api/v1/namespaces/{namespace}/pods/typo")
    assert code == 404
    good = json.dumps(_pod("typo", imagePullPolicy="Always")).encode()
    code, warnings, created = http("POST", f"/api/v1/namespaces/{namespace}/pods"
                                           "?fieldValidation=Strict", good)
    assert code == 201 and warnings == []
    assert created["spec"]["containers"][0]["imagePullPolicy"] == "Always"


@pytest.mark.parametrize("mode", ["Warn", ""])
def test_unknown_field_warn_is_a_warning_header_and_dropped(http, namespace, mode):
    query = f"?fieldValidation={mode}" if mode else ""
    pod = _pod("warned", imagePullPolcy="Always")
    pod["metadata"]["colour"] = "blue"
    code, warnings, _ = http("POST", f"/api/v1/namespaces/{namespace}/pods{query}",
                             json.dumps(pod).encode())
    assert code == 201
    assert sorted(warnings) == ['299 - "unknown field \\"metadata.colour\\""',
                                '299 - "unknown field \\"spec.containers[0].imagePullPolcy\\""']
    _, _, stored = http("GET", f"/api/v1/namespaces/{namespace}/pods/warned")
    assert "imagePullPolcy" not in stored["spec"]["containers"][0]
    assert "colour" not in stored["metadata"]


def test_unknown_field_ignore_is_dropped_silently(http, namespace):
    body = json.dumps({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "ign"},
                       "data": {"a": "1"}, "dta": {"b": "2"}}).encode()
    code, warnings, created = http("POST", f"/api/v1/namespaces/{namespace}/configmaps"
                                           "?fieldValidation=Ignore", body)
    assert code == 201 and warnings == []
    assert "dta" not in created and created["data"] == {"a": "1"}


def test_unknown_field_on_update_and_patch(http, namespace):
    cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "upd"},
          "data": {"a": "1"}}
    http("POST", f"/api/v1/namespaces/{namespace}/configmaps", json.dumps(cm).encode())
    code, _, status = http("PATCH", f"/api/v1/namespaces/{namespace}/configmaps/upd"
                                    "?fieldValidation=Strict",
                           json.dumps({"imutable": True}).encode(),
                           "application/merge-patch+json")
    assert code == 400 and status["message"] == \
        'strict decoding error: unknown field "imutable"'
    code, _, patched = http("PATCH", f"/api/v1/namespaces/{namespace}/configmaps/upd"
                                     "?fieldValidation=Strict",
                            json.dumps({"immutable": True}).encode(),
                            "application/merge-patch+json")
    assert code == 200 and patched["immutable"] is True


def test_wrong_type_is_400_naming_the_field(http, namespace):
    body = json.dumps({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "typed"},
                       "data": {"a": 1}}).encode()
    code, _, status = http("POST", f"/api/v1/namespaces/{namespace}/configmaps", body)
    assert code == 400
    assert "data.a" in status["message"] and "of type string" in status["message"]
    assert status["message"].startswith('ConfigMap in version "v1" cannot be handled as a '
                                        "ConfigMap")
    body = json.dumps({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "typed"},
                       "data": {"a": "1"}}).encode()
    assert http("POST", f"/api/v1/namespaces/{namespace}/configmaps", body)[0] == 201


def test_wrong_type_deep_in_a_pod_and_int_or_string(http, namespace):
    pod = _pod("ports", ports=[{"containerPort": "80"}])
    code, _, status = http("POST", f"/api/v1/namespaces/{namespace}/pods",
                           json.dumps(pod).encode())
    assert code == 400
    assert "Pod.spec.containers[0].ports[0].containerPort of type integer" in status["message"]
    # IntOrString takes both; a Quantity takes a number.
    pod = _pod("ports", ports=[{"containerPort": 80}], resources={"limits": {"cpu": 1}},
               readinessProbe={"httpGet": {"port": "http"}})
    assert http("POST", f"/api/v1/namespaces/{namespace}/pods",
                json.dumps(pod).encode())[0] == 201
    pod = _pod("ports2", readinessProbe={"httpGet": {"port": True}})
    code, _, status = http("POST", f"/api/v1/namespaces/{namespace}/pods",
                           json.dumps(pod).encode())
    assert code == 400 and "readinessProbe.httpGet.port" in status["message"]


def test_secret_data_must_be_base64(http, namespace):
    body = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "b64"},
            "data": {"k": "not base64!"}}
    code, _, status = http("POST", f"/api/v1/namespaces/{namespace}/secrets",
                           json.dumps(body).encode())
    assert code == 400 and "data.k" in status["message"]
    body["data"]["k"] = "aGVsbG8="
    assert http("POST", f"/api/v1/namespaces/{namespace}/secrets",
                json.dumps(body).encode())[0] == 201


def test_duplicate_keys(http, namespace):
    text = (b'{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"dup"},'
            b'"data":{"a":"1","a":"2"}}')
    code, _, status = http("POST", f"/api/v1/namespaces/{namespace}/configmaps"
                                   "?fieldValidation=Strict", text)
    assert code == 400
    assert status["message"] == 'strict decoding error: duplicate field "a"'
    code, warnings, created = http("POST", f"/api/v1/namespaces/{namespace}/configmaps"
                                           "?fieldValidation=Warn", text)
    assert code == 201
    assert warnings == ['299 - "duplicate field \\"a\\""']
    assert created["data"] == {"a": "2"}  # the last one wins, as in Go


def test_custom_resource_metadata_unknown_field(http, namespace, widgets):
    body = {"apiVersion": "example.com/v1", "kind": "Widget",
            "metadata": {"name": "w", "lables": {"a": "b"}}, "spec": {"size": 1}}
    code, _, status = http("POST", f"/apis/example.com/v1/namespaces/{namespace}/widgets"
                                   "?fieldValidation=Strict", json.dumps(body).encode())
    assert code == 400
    assert status["message"] == 'strict decoding error: unknown field "metadata.lables"'
    body["metadata"]["labels"] = body["metadata"].pop("lables")
    code, _, created = http("POST", f"/apis/example.com/v1/namespaces/{namespace}/widgets"
                                    "?fieldValidation=Strict", json.dumps(body).encode())
    assert code == 201 and created["metadata"]["labels"] == {"a": "b"}


def test_custom_resource_unknown_spec_field_warns(http, namespace, widgets):
    body = {"apiVersion": "example.com/v1", "kind": "Widget",
            "metadata": {"name": "w2"}, "spec": {"size": 1, "colour": "red"}}
    code, warnings, created = http("POST",
                                   f"/apis/example.com/v1/namespaces/{namespace}/widgets",
                                   json.dumps(body).encode())
    assert code == 201
    assert warnings == ['299 - "unknown field \\"spec.colour\\""']
    assert "colour" not in created["spec"]


def test_yaml_body(http, namespace):
    text = b"""apiVersion: v1
kind: ConfigMap
metadata:
  name: from-yaml
data:
  when: 2024-01-01
  flag: "yes"
"""
    code, _, created = http("POST", f"/api/v1/namespaces/{namespace}/configmaps", text,
                            "application/yaml")
    assert code == 201, created
    assert created["data"] == {"when": "2024-01-01", "flag": "yes"}
    # An unquoted boolean where a string goes is a type error, as on a real cluster.
    code, _, status = http("POST", f"/api/v1/namespaces/{namespace}/configmaps",
                           text.replace(b'"yes"', b"yes"), "application/yaml")
    assert code == 400 and "data.flag" in status["message"]
    code, _, status = http("POST", f"/api/v1/namespaces/{namespace}/configmaps",
                           b"a: [unclosed", "application/yaml")
    assert code == 400 and "not valid YAML" in status["message"]


def test_yaml_alias_bomb_is_refused(http, namespace):
    lines = ['a0: &a0 ["x","x","x","x","x","x","x","x","x","x"]']
    for i in range(1, 9):
        lines.append(f"a{i}: &a{i} [" + ",".join([f"*a{i - 1}"] * 10) + "]")
    lines += ["apiVersion: v1", "kind: ConfigMap", "metadata: {name: bomb}"]
    code, _, status = http("POST", f"/api/v1/namespaces/{namespace}/configmaps",
                           "\n".join(lines).encode(), "application/yaml")
    assert code == 400
    assert "expands to more than" in status["message"]


@pytest.mark.parametrize("depth", [250, 100_000])
def test_json_nested_too_deep_is_400(http, namespace, depth):
    text = (b'{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"deep",'
            b'"annotations":{"a":"b"}},"x":' + b"[" * depth + b"]" * depth + b"}")
    code, _, status = http("POST", f"/api/v1/namespaces/{namespace}/configmaps", text)
    assert code == 400, status
    assert "nests deeper than" in status["message"]
    shallow = text.replace(b"[" * depth + b"]" * depth, b"[[[]]]")
    assert http("POST", f"/api/v1/namespaces/{namespace}/configmaps"
                        "?fieldValidation=Ignore", shallow)[0] == 201
