"""``deprecated``/``deprecationWarning`` on a CRD's served versions: every request to such
a version answers with a ``Warning`` header (upstream's default text or the CRD's own);
requests to the current version get none. Real server on loopback."""

from __future__ import annotations

import json

import pytest

from .test_server_crd_patterns import create_crd
from .test_server_decoding import Http


def _version(name: str, *, storage: bool = False, **extra) -> dict:
    return {"name": name, "served": True, "storage": storage, **extra, "schema": {
        "openAPIV3Schema": {"type": "object", "properties": {"spec": {
            "type": "object", "x-kubernetes-preserve-unknown-fields": True}}}}}


CRD = {
    "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
    "metadata": {"name": "gadgets.deprecated.example.com"},
    "spec": {"group": "deprecated.example.com", "scope": "Namespaced",
             "names": {"plural": "gadgets", "kind": "Gadget"},
             "versions": [
                 _version("v1alpha1", deprecated=True),
                 _version("v1beta1", deprecated=True,
                          deprecationWarning="deprecated.example.com/v1beta1 Gadget is "
                                             "going away in 2027; use v1"),
                 _version("v1", storage=True)]},
}


@pytest.fixture
def http(shared_server, api):
    create_crd(api, CRD)
    return Http(shared_server)


@pytest.mark.parametrize(("version", "warning"), [
    ("v1alpha1", '299 - "deprecated.example.com/v1alpha1 Gadget is deprecated"'),
    ("v1beta1", '299 - "deprecated.example.com/v1beta1 Gadget is going away in 2027; '
                'use v1"'),
])
def test_deprecated_version_warns_on_every_verb(http, namespace, version, warning):
    base = f"/apis/deprecated.example.com/{version}/namespaces/{namespace}/gadgets"
    body = json.dumps({"apiVersion": f"deprecated.example.com/{version}", "kind": "Gadget",
                       "metadata": {"name": f"g-{version}"}, "spec": {"a": 1}}).encode()
    code, warnings, _ = http("POST", base, body)
    assert code == 201 and warnings == [warning]
    code, warnings, _ = http("GET", f"{base}/g-{version}")
    assert code == 200 and warnings == [warning]
    code, warnings, _ = http("GET", base)
    assert code == 200 and warnings == [warning]
    code, warnings, _ = http("GET", f"{base}/missing")
    assert code == 404 and warnings == [warning]
    with http.stream(f"{base}?watch=true&timeoutSeconds=1") as resp:
        assert resp.headers.get_all("Warning") == [warning]
        assert json.loads(resp.readline())["type"] == "ADDED"


def test_current_version_does_not_warn(http, namespace):
    base = f"/apis/deprecated.example.com/v1/namespaces/{namespace}/gadgets"
    body = json.dumps({"apiVersion": "deprecated.example.com/v1", "kind": "Gadget",
                       "metadata": {"name": "current"}, "spec": {"a": 1}}).encode()
    code, warnings, _ = http("POST", base, body)
    assert code == 201 and warnings == []
    code, warnings, _ = http("GET", base)
    assert code == 200 and warnings == []
