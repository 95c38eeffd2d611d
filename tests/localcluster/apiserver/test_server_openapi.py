"""/openapi/v3 and /openapi/v2 carry Kubernetes' own schemas for built-in kinds (v1.32),
with every definition they reference, and custom resources' schemas with ObjectMeta."""

from __future__ import annotations

import json
import re
import urllib.request

from localcluster.apiserver.wire.protobuf import fields


def _resolve(doc, ref):
    return doc["components"]["schemas"][ref.rsplit("/", 1)[-1]]


def _ref_of(node):
    if "$ref" in node:
        return node["$ref"]
    return node["allOf"][0]["$ref"]


def test_v3_core_has_pod_schemas_all_the_way_down(raw):
    code, index = raw.request("GET", "/openapi/v3")
    assert code == 200
    url = index["paths"]["api/v1"]["serverRelativeURL"]
    code, doc = raw.request("GET", url)
    assert code == 200
    pod = doc["components"]["schemas"]["io.k8s.api.core.v1.Pod"]
    assert pod["x-kubernetes-group-version-kind"] == [
        {"group": "", "kind": "Pod", "version": "v1"}]
    spec = _resolve(doc, _ref_of(pod["properties"]["spec"]))
    container = _resolve(doc, _ref_of(spec["properties"]["containers"]["items"]))
    assert container["properties"]["imagePullPolicy"]["type"] == "string"
    assert "imagePullPolcy" not in container["properties"]
    assert container["required"] == ["name"]
    # Every reference in the document resolves inside it.
    refs = set(re.findall(r"'\$ref': '#/components/schemas/([^']+)'", str(doc)))
    assert len(refs) > 50
    assert refs <= set(doc["components"]["schemas"])
    meta = _resolve(doc, _ref_of(pod["properties"]["metadata"]))
    assert "annotations" in meta["properties"]
    # No JSON-Schema leftovers: one type per node, no nulls.
    assert "null" not in str(container)


def test_v3_apps_uses_upstream_names(raw):
    code, doc = raw.request("GET", "/openapi/v3/apis/apps/v1")
    assert code == 200
    assert "io.k8s.api.apps.v1.Deployment" in doc["components"]["schemas"]
    assert "io.k8s.api.core.v1.PodTemplateSpec" in doc["components"]["schemas"]
    ops = doc["paths"]["/apis/apps/v1/namespaces/{namespace}/deployments/{name}"]
    assert "fieldValidation" in [p["name"] for p in ops["patch"]["parameters"]]
    ref = ops["get"]["responses"]["200"]["content"]["application/json"]["schema"]["$ref"]
    assert ref == "#/components/schemas/io.k8s.api.apps.v1.Deployment"
    assert "io.k8s.apps.v1.Deployment" not in doc["components"]["schemas"]


def test_v3_custom_resource_metadata_is_object_meta(raw, widgets):
    code, doc = raw.request("GET", "/openapi/v3/apis/example.com/v1")
    assert code == 200
    schemas = doc["components"]["schemas"]
    widget = schemas["com.example.v1.Widget"]
    assert _ref_of(widget["properties"]["metadata"]).endswith(
        "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta")
    assert "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta" in schemas
    assert widget["properties"]["spec"]["properties"]["size"]["type"] == "integer"


def test_v2_is_swagger_with_definitions(raw):
    code, doc = raw.request("GET", "/openapi/v2", headers={"Accept": "application/json"})
    assert code == 200
    assert doc["swagger"] == "2.0"
    pod = doc["definitions"]["io.k8s.api.core.v1.Pod"]
    assert _ref_of(pod["properties"]["spec"]) == "#/definitions/io.k8s.api.core.v1.PodSpec"
    op = doc["paths"]["/api/v1/namespaces/{namespace}/pods"]["post"]
    body = next(p for p in op["parameters"] if p["in"] == "body")
    assert body["schema"] == {"$ref": "#/definitions/io.k8s.api.core.v1.Pod"}


def _message(data: bytes) -> dict[int, list]:
    out: dict[int, list] = {}
    for number, value in fields(data):
        out.setdefault(number, []).append(value)
    return out


def _named(data: bytes, number: int = 1) -> dict[str, bytes]:
    """gnostic's Named* pairs (name 1, value 2) of a map message."""
    pairs = (_message(entry) for entry in _message(data).get(number, []))
    return {pair[1][0].decode(): pair[2][0] for pair in pairs}


def test_v2_in_protobuf_is_the_same_document(raw):
    """What kubectl reads to validate on the client (gnostic's openapi.v2.Document)."""
    req = urllib.request.Request(raw.base + "/openapi/v2", headers={
        "Accept": "application/com.github.proto-openapi.spec.v2@v1.0+protobuf",
        "Authorization": f"Bearer {raw.token}"})
    with urllib.request.urlopen(req, context=raw.ctx, timeout=30) as resp:
        assert resp.headers["Content-Type"] == \
            "application/com.github.proto-openapi.spec.v2.v1.0+protobuf"
        doc = _message(resp.read())
    assert doc[1] == [b"2.0"]
    definitions = _named(doc[9][0])
    pod = _message(definitions["io.k8s.api.core.v1.Pod"])
    assert _message(pod[22][0])[1] == [b"object"]  # type
    extensions = {k: _message(v) for k, v in (
        (_message(e)[1][0].decode(), _message(e)[2][0]) for e in pod[31])}
    assert json.loads(extensions["x-kubernetes-group-version-kind"][2][0]) == [
        {"group": "", "kind": "Pod", "version": "v1"}]
    spec = _message(_named(pod[25][0])["spec"])
    ref = spec[1] if 1 in spec else _message(spec[24][0])[1]  # $ref, or allOf's
    assert ref == [b"#/definitions/io.k8s.api.core.v1.PodSpec"]
    paths = _named(doc[8][0], 2)  # Paths.path: NamedPathItem
    post = _message(_message(paths["/api/v1/namespaces/{namespace}/pods"])[4][0])  # .post
    assert post[5] == [b"postPod"]  # operationId


def test_unknown_document_is_404(raw):
    assert raw.request("GET", "/openapi/v3/apis/nosuch.example/v1")[0] == 404
