"""Bad requests: each is a 4xx Status with a clear message, and the store is unchanged."""

from __future__ import annotations

import pytest
from kubernetes import client as k8s

from .server_fixtures import Raw


@pytest.fixture
def snapshot(shared_server):
    def take():
        return shared_server.store.rv
    return take


def _cm_path(ns):
    return f"/api/v1/namespaces/{ns}/configmaps"


@pytest.mark.parametrize(("body", "code", "needle"), [
    (b"{not json", 400, "not valid JSON"),
    (b"", 400, "empty"),
    (b"[1, 2]", 400, "JSON object"),
    (b'{"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "x"}}', 400,
     "does not match the expected kind (ConfigMap)"),
    (b'{"apiVersion": "apps/v1", "kind": "ConfigMap", "metadata": {"name": "x"}}', 400,
     "API version in the data (apps/v1)"),
    (b'{"metadata": {"name": "UPPER"}}', 422, "metadata.name"),
    (b'{"metadata": {"name": "x", "labels": {"bad key!": "v"}}}', 422, "metadata.labels"),
    (b'{"metadata": {}}', 422, "name or generateName is required"),
    (b'{"metadata": {"name": "x", "namespace": "elsewhere"}}', 400, "does not match the "
                                                                     "namespace"),
])
def test_bad_bodies(raw: Raw, namespace, snapshot, body, code, needle):
    before = snapshot()
    status, answer = raw.request("POST", _cm_path(namespace), raw=body)
    assert status == code, answer
    assert answer["kind"] == "Status" and answer["code"] == code
    assert needle in answer["message"], answer["message"]
    assert snapshot() == before


def test_oversized_body_is_413(raw: Raw, namespace, snapshot):
    before = snapshot()
    big = b'{"metadata": {"name": "big"}, "data": {"a": "' + b"x" * (4 * 1024 * 1024) + b'"}}'
    status, answer = raw.request("POST", _cm_path(namespace), raw=big)
    assert status == 413 and answer["reason"] == "RequestEntityTooLarge"
    assert snapshot() == before


def test_unknown_resources_and_methods(raw: Raw, namespace):
    status, answer = raw.request("GET", f"/api/v1/namespaces/{namespace}/bananas")
    assert status == 404 and answer["kind"] == "Status"
    status, answer = raw.request("PUT", _cm_path(namespace), {"metadata": {"name": "a"}})
    assert status == 405 and answer["reason"] == "MethodNotAllowed"
    status, answer = raw.request("POST", "/apis/authorization.k8s.io/v1/subjectaccessreviews/x",
                                 {})
    assert status == 405
    status, answer = raw.request("GET", "/api/v1/nodes/n1/log")
    assert status == 404


def test_update_name_mismatch_and_wrong_url(raw: Raw, api, namespace, snapshot):
    k8s.CoreV1Api(api).create_namespaced_config_map(namespace, {"metadata": {"name": "m"}})
    before = snapshot()
    status, answer = raw.request("PUT", _cm_path(namespace) + "/m",
                                 {"metadata": {"name": "other"}, "data": {"a": "b"}})
    assert status == 400 and "does not match the name on the URL" in answer["message"]
    status, answer = raw.request("PATCH", _cm_path(namespace) + "/m", {"data": {"a": 1}},
                                 content_type="application/merge-patch+json")
    assert snapshot() == before or status == 200  # the typed value is not checked


def test_bad_query_parameters(raw: Raw, namespace):
    for query, needle in (("?limit=abc", "limit"), ("?watch=true&resourceVersion=x",
                                                    "resourceVersion"),
                          ("?labelSelector=a%20in%20(", "selector"),
                          ("?fieldSelector=a", "selector")):
        status, answer = raw.request("GET", _cm_path(namespace) + query)
        assert status == 400, (query, answer)
        assert needle in answer["message"], answer
    status, answer = raw.request("POST", _cm_path(namespace) + "?dryRun=Some",
                                 {"metadata": {"name": "d"}})
    assert status == 400


def test_dry_run_stores_nothing(raw: Raw, namespace, snapshot):
    before = snapshot()
    status, answer = raw.request("POST", _cm_path(namespace) + "?dryRun=All",
                                 {"metadata": {"name": "dry"}})
    assert status == 201 and answer["metadata"]["name"] == "dry"
    assert snapshot() == before
    status, _ = raw.request("GET", _cm_path(namespace) + "/dry")
    assert status == 404


def test_protobuf_bodies_are_415(raw: Raw, namespace, snapshot):
    before = snapshot()
    status, answer = raw.request("POST", _cm_path(namespace), raw=b"k8s\x00\x0a",
                                 content_type="application/vnd.kubernetes.protobuf")
    assert status == 415 and answer["reason"] == "UnsupportedMediaType"
    assert snapshot() == before


def test_builtin_required_fields(raw: Raw, namespace, snapshot):
    before = snapshot()
    status, answer = raw.request("POST", f"/api/v1/namespaces/{namespace}/pods", {
        "metadata": {"name": "p"}, "spec": {"containers": [{"name": "c"}]}})
    assert status == 422 and answer["details"]["causes"][0]["field"] == \
        "spec.containers[0].image"
    assert answer["message"] == 'Pod "p" is invalid: spec.containers[0].image: Required value'
    status, answer = raw.request("POST", f"/api/v1/namespaces/{namespace}/persistentvolumeclaims",
                                 {"metadata": {"name": "c"}, "spec": {}})
    assert status == 422 and "spec.accessModes" in answer["message"]
    assert snapshot() == before
