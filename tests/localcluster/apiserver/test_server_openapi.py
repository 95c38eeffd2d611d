"""/openapi/v3 and /openapi/v2 carry Kubernetes' own schemas for built-in kinds (v1.32),
with every definition they reference, and custom resources' schemas with ObjectMeta."""

from __future__ import annotations

import re


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


def test_v2_protobuf_only_is_not_acceptable(raw):
    code, status = raw.request("GET", "/openapi/v2", headers={
        "Accept": "application/com.github.proto-openapi.spec.v2@v1.0+protobuf"})
    assert code == 406 and status["reason"] == "NotAcceptable"


def test_unknown_document_is_404(raw):
    assert raw.request("GET", "/openapi/v3/apis/nosuch.example/v1")[0] == 404
