"""Custom resources: served on create, schema validation, defaulting, pruning, status,
printer columns, and unserved (with their objects gone) when the CRD is deleted."""

from __future__ import annotations

import copy
import json
import time

import pytest
from kubernetes import client as k8s

from .server_fixtures import WIDGET_CRD, Raw

G, V = "example.com", "v1"


def _co(api):
    return k8s.CustomObjectsApi(api)


def test_crd_is_established_and_served(api, widgets, raw: Raw):
    crd = k8s.ApiextensionsV1Api(api).read_custom_resource_definition("widgets.example.com")
    conditions = {c.type: c.status for c in crd.status.conditions}
    assert conditions == {"NamesAccepted": "True", "Established": "True"}
    assert crd.status.accepted_names.list_kind == "WidgetList"
    code, body = raw.request("GET", "/apis/example.com/v1")
    assert code == 200
    names = {r["name"] for r in body["resources"]}
    assert names == {"widgets", "widgets/status"}
    code, body = raw.request("GET", "/apis")
    assert "example.com" in {g["name"] for g in body["groups"]}


def test_custom_object_verbs(api, widgets, namespace):
    co = _co(api)
    w = co.create_namespaced_custom_object(G, V, namespace, "widgets", {
        "apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w1"},
        "spec": {"size": 3, "unknown": "dropped"}})
    assert w["spec"] == {"size": 3, "color": "blue"}  # defaulted and pruned
    assert w["metadata"]["generation"] == 1
    w = co.patch_namespaced_custom_object(G, V, namespace, "widgets", "w1",
                                          {"spec": {"size": 4}})
    assert w["spec"]["size"] == 4 and w["metadata"]["generation"] == 2
    w = co.patch_namespaced_custom_object_status(G, V, namespace, "widgets", "w1", {
        "status": {"phase": "Ready"}, "spec": {"size": 50}})
    assert w["status"] == {"phase": "Ready"} and w["spec"]["size"] == 4
    assert w["metadata"]["generation"] == 2
    w["spec"]["size"] = 5
    w["status"] = {"phase": "ignored"}
    w = co.replace_namespaced_custom_object(G, V, namespace, "widgets", "w1", w)
    assert w["spec"]["size"] == 5 and w["status"] == {"phase": "Ready"}
    listed = co.list_namespaced_custom_object(G, V, namespace, "widgets")
    assert listed["kind"] == "WidgetList" and len(listed["items"]) == 1
    co.delete_namespaced_custom_object(G, V, namespace, "widgets", "w1")
    assert co.list_namespaced_custom_object(G, V, namespace, "widgets")["items"] == []


def test_schema_violations_are_422_naming_the_field(api, widgets, namespace):
    co = _co(api)
    for spec, field in (({"size": 0}, "spec.size"), ({"size": "big"}, "spec.size"),
                        ({"color": "blue"}, "spec.size"),
                        ({"size": 1, "color": "green"}, "spec.color")):
        with pytest.raises(k8s.ApiException) as err:
            co.create_namespaced_custom_object(G, V, namespace, "widgets", {
                "apiVersion": "example.com/v1", "kind": "Widget",
                "metadata": {"name": "bad"}, "spec": spec})
        status = json.loads(err.value.body)
        assert err.value.status == 422 and status["reason"] == "Invalid", status
        assert field in [c["field"] for c in status["details"]["causes"]], status
        assert status["message"].startswith('Widget.example.com "bad" is invalid: ')
    assert co.list_namespaced_custom_object(G, V, namespace, "widgets")["items"] == []


def test_strategic_merge_patch_is_refused_for_custom_resources(widgets, namespace, raw: Raw):
    path = f"/apis/example.com/v1/namespaces/{namespace}/widgets"
    code, _ = raw.request("POST", path, {"apiVersion": "example.com/v1", "kind": "Widget",
                                         "metadata": {"name": "s"}, "spec": {"size": 1}})
    assert code == 201
    code, body = raw.request("PATCH", path + "/s", {"spec": {"size": 2}},
                             content_type="application/strategic-merge-patch+json")
    assert code == 415 and body["reason"] == "UnsupportedMediaType"


def test_strict_field_validation_rejects_unknown_fields(widgets, namespace, raw: Raw):
    path = f"/apis/example.com/v1/namespaces/{namespace}/widgets?fieldValidation=Strict"
    code, body = raw.request("POST", path, {"apiVersion": "example.com/v1", "kind": "Widget",
                                            "metadata": {"name": "u"},
                                            "spec": {"size": 1, "colour": "red"}})
    assert code == 400 and 'unknown field "spec.colour"' in body["message"]


def test_table_output_uses_printer_columns(api, widgets, namespace, raw: Raw):
    _co(api).create_namespaced_custom_object(G, V, namespace, "widgets", {
        "apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "t"},
        "spec": {"size": 7}})
    code, table = raw.request("GET", f"/apis/example.com/v1/namespaces/{namespace}/widgets",
                              headers={"Accept": "application/json;as=Table;v=v1;"
                                                 "g=meta.k8s.io,application/json"})
    assert code == 200 and table["kind"] == "Table"
    assert [c["name"] for c in table["columnDefinitions"]] == ["Name", "Size", "Phase", "Age"]
    assert table["rows"][0]["cells"][:2] == ["t", 7]
    code, table = raw.request("GET", "/api/v1/namespaces",
                              headers={"Accept": "application/json;as=Table;v=v1;"
                                                 "g=meta.k8s.io"})
    assert [c["name"] for c in table["columnDefinitions"]][:2] == ["Name", "Status"]


def test_cluster_scoped_crd_and_deletion_unserves(api, raw: Raw):
    ext = k8s.ApiextensionsV1Api(api)
    crd = copy.deepcopy(WIDGET_CRD)
    crd["metadata"]["name"] = "gadgets.example.org"
    crd["spec"].update(group="example.org", scope="Cluster",
                       names={"plural": "gadgets", "kind": "Gadget"})
    ext.create_custom_resource_definition(crd)
    co = _co(api)
    co.create_cluster_custom_object("example.org", "v1", "gadgets", {
        "apiVersion": "example.org/v1", "kind": "Gadget", "metadata": {"name": "g1"},
        "spec": {"size": 1}})
    assert len(co.list_cluster_custom_object("example.org", "v1", "gadgets")["items"]) == 1
    ext.delete_custom_resource_definition("gadgets.example.org")
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        code, _ = raw.request("GET", "/apis/example.org/v1/gadgets")
        if code == 404:
            break
        time.sleep(0.05)
    assert code == 404
    with pytest.raises(k8s.ApiException) as err:
        ext.read_custom_resource_definition("gadgets.example.org")
    assert err.value.status == 404
    # recreated: no object survived
    ext.create_custom_resource_definition(crd)
    assert co.list_cluster_custom_object("example.org", "v1", "gadgets")["items"] == []
    ext.delete_custom_resource_definition("gadgets.example.org")


def test_invalid_crds_are_rejected(api):
    ext = k8s.ApiextensionsV1Api(api)
    crd = copy.deepcopy(WIDGET_CRD)
    crd["metadata"]["name"] = "wrong.example.com"
    with pytest.raises(k8s.ApiException) as err:
        ext.create_custom_resource_definition(crd)
    assert err.value.status == 422 and "metadata.name" in err.value.body
    crd = copy.deepcopy(WIDGET_CRD)
    crd["metadata"]["name"] = "things.example.com"
    crd["spec"]["names"] = {"plural": "things", "kind": "Thing"}
    crd["spec"]["versions"][0]["storage"] = False
    with pytest.raises(k8s.ApiException) as err:
        ext.create_custom_resource_definition(crd)
    assert err.value.status == 422 and "storage version" in err.value.body


def test_custom_resource_update_needs_a_resource_version(widgets, namespace, raw: Raw):
    path = f"/apis/example.com/v1/namespaces/{namespace}/widgets"
    obj = {"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "rv"},
           "spec": {"size": 1}}
    assert raw.request("POST", path, obj)[0] == 201
    obj["spec"]["size"] = 2
    code, body = raw.request("PUT", path + "/rv", obj)
    assert code == 422 and "metadata.resourceVersion" in body["message"]
    assert raw.request("GET", path + "/rv")[1]["spec"]["size"] == 1


def test_crd_selectable_fields(api, raw: Raw, namespace):
    crd = copy.deepcopy(WIDGET_CRD)
    crd["metadata"]["name"] = "sprockets.example.com"
    crd["spec"]["names"] = {"plural": "sprockets", "kind": "Sprocket"}
    crd["spec"]["versions"][0]["selectableFields"] = [{"jsonPath": ".spec.color"}]
    k8s.ApiextensionsV1Api(api).create_custom_resource_definition(crd)
    path = f"/apis/example.com/v1/namespaces/{namespace}/sprockets"
    for name, color in (("a", "red"), ("b", "blue")):
        raw.request("POST", path, {"apiVersion": "example.com/v1", "kind": "Sprocket",
                                   "metadata": {"name": name},
                                   "spec": {"size": 1, "color": color}})
    code, body = raw.request("GET", path + "?fieldSelector=spec.color%3Dred")
    assert code == 200 and [i["metadata"]["name"] for i in body["items"]] == ["a"]
    code, body = raw.request("GET", path + "?fieldSelector=spec.size%3D1")
    assert code == 400 and "spec.size" in body["message"]
