"""CRD ``x-kubernetes-validations`` (CEL) enforced on custom resources, with a
cert-manager-like Certificate CRD: message, messageExpression, reason, fieldPath,
transition rules (oldSelf, optionalOldSelf), cost bound; rules that do not compile refuse
the CRD. Real server on loopback, kubernetes client."""

from __future__ import annotations

import copy
import json

import pytest
from kubernetes import client as k8s

from .test_server_crd_patterns import create_crd, load_crd

G, V, P = "cert-manager.io", "v1", "certificates"


@pytest.fixture
def certs(api):
    create_crd(api, load_crd("certificates.cert-manager.io"))
    return k8s.CustomObjectsApi(api)


def _cert(name: str, **spec) -> dict:
    body = {"secretName": f"{name}-tls", "issuerRef": {"name": "ca", "kind": "Issuer"},
            "dnsNames": [f"{name}.example.com"], **spec}
    return {"apiVersion": f"{G}/{V}", "kind": "Certificate", "metadata": {"name": name},
            "spec": body}


def _refused(call) -> dict:
    with pytest.raises(k8s.ApiException) as err:
        call()
    assert err.value.status == 422, err.value.body
    return json.loads(err.value.body)


def test_rule_with_message_and_reason(certs, namespace):
    body = _cert("none")
    del body["spec"]["dnsNames"]
    status = _refused(lambda: certs.create_namespaced_custom_object(G, V, namespace, P, body))
    cause = status["details"]["causes"][0]
    assert cause["field"] == "spec"
    assert cause["reason"] == "FieldValueRequired"
    assert "at least one of commonName, dnsNames, uris, emailAddresses or ipAddresses " \
           "must be set" in status["message"]
    body["spec"]["commonName"] = "none"
    certs.create_namespaced_custom_object(G, V, namespace, P, body)


def test_rule_on_a_list(certs, namespace):
    body = _cert("upper", dnsNames=["Web.Example.com"])
    status = _refused(lambda: certs.create_namespaced_custom_object(G, V, namespace, P, body))
    assert status["message"] == ('Certificate.cert-manager.io "upper" is invalid: '
                                 'spec.dnsNames: Invalid value: "array": dnsNames must be '
                                 "lower case")
    body["spec"]["dnsNames"] = ["web.example.com"]
    certs.create_namespaced_custom_object(G, V, namespace, P, body)


def test_message_expression_and_field_path(certs, namespace):
    body = _cert("small", privateKey={"algorithm": "RSA", "size": 1024})
    status = _refused(lambda: certs.create_namespaced_custom_object(G, V, namespace, P, body))
    cause = status["details"]["causes"][0]
    assert cause["field"] == "spec.privateKey.size"
    assert "RSA key size must be between 2048 and 8192, got 1024" in cause["message"]
    body["spec"]["privateKey"]["size"] = 4096
    certs.create_namespaced_custom_object(G, V, namespace, P, body)
    # ECDSA sizes are not the rule's business.
    certs.create_namespaced_custom_object(G, V, namespace, P, _cert(
        "ec", privateKey={"algorithm": "ECDSA", "size": 256}))


def test_duration_fields_are_cel_durations(certs, namespace):
    # 90m < 2h as durations (as strings "90m" > "2h").
    certs.create_namespaced_custom_object(G, V, namespace, P, _cert(
        "renews", renewBefore="90m", duration="2h"))
    status = _refused(lambda: certs.create_namespaced_custom_object(G, V, namespace, P, _cert(
        "late", renewBefore="3h", duration="2h")))
    assert "renewBefore must be shorter than duration" in status["message"]


def test_transition_rule_with_old_self(certs, namespace):
    certs.create_namespaced_custom_object(G, V, namespace, P, _cert("moving"))
    status = _refused(lambda: certs.patch_namespaced_custom_object(
        G, V, namespace, P, "moving", {"spec": {"secretName": "elsewhere"}}))
    assert "spec.secretName" in status["message"]
    assert "secretName is immutable" in status["message"]
    # Other changes pass: the rule sees the same secretName in self and oldSelf.
    patched = certs.patch_namespaced_custom_object(G, V, namespace, P, "moving",
                                                   {"spec": {"commonName": "moving"}})
    assert patched["spec"]["commonName"] == "moving"


def test_transition_rule_on_a_nested_object(certs, namespace):
    body = _cert("cluster-issued")
    body["spec"]["issuerRef"] = {"name": "root", "kind": "ClusterIssuer"}
    certs.create_namespaced_custom_object(G, V, namespace, P, body)
    status = _refused(lambda: certs.patch_namespaced_custom_object(
        G, V, namespace, P, "cluster-issued", {"spec": {"issuerRef": {"name": "other"}}}))
    assert "the ClusterIssuer of a certificate cannot be changed" in status["message"]
    # A namespaced Issuer may be swapped.
    certs.create_namespaced_custom_object(G, V, namespace, P, _cert("issued"))
    certs.patch_namespaced_custom_object(G, V, namespace, P, "issued",
                                         {"spec": {"issuerRef": {"name": "other"}}})


def test_optional_old_self_runs_on_create_and_update(certs, namespace):
    # On create oldSelf is empty: the rule runs and passes.
    certs.create_namespaced_custom_object(G, V, namespace, P, _cert("ca", isCA=True))
    status = _refused(lambda: certs.patch_namespaced_custom_object(
        G, V, namespace, P, "ca", {"spec": {"isCA": False}}))
    assert "a CA certificate cannot be turned into a leaf certificate" in status["message"]
    certs.create_namespaced_custom_object(G, V, namespace, P, _cert("leaf", isCA=False))
    patched = certs.patch_namespaced_custom_object(G, V, namespace, P, "leaf",
                                                   {"spec": {"isCA": True}})
    assert patched["spec"]["isCA"] is True


def test_cost_bound_refuses_huge_nested_comprehensions(certs, namespace):
    usages = [f"u{i}" for i in range(1100)]
    status = _refused(lambda: certs.create_namespaced_custom_object(
        G, V, namespace, P, _cert("costly", usages=usages)))
    assert "spec.usages" in status["message"] and "cost limit exceeded" in status["message"]
    # The same rule on less data runs, and judges.
    status = _refused(lambda: certs.create_namespaced_custom_object(
        G, V, namespace, P, _cert("twice", usages=["server auth", "server auth"])))
    assert "usages must not repeat" in status["message"]
    certs.create_namespaced_custom_object(G, V, namespace, P,
                                          _cert("several", usages=usages[:200]))
    # One comprehension over a long list is cheap enough (as upstream).
    certs.create_namespaced_custom_object(G, V, namespace, P, _cert(
        "many-names", dnsNames=[f"n{i}.example.com" for i in range(100)]))


def _crd_with_rule(rule: dict) -> dict:
    crd = load_crd("certificates.cert-manager.io")
    crd = copy.deepcopy(crd)
    crd["metadata"]["name"] = "badrules.cel.example.com"
    crd["spec"]["group"] = "cel.example.com"
    crd["spec"]["names"] = {"plural": "badrules", "kind": "BadRule"}
    spec = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    spec["x-kubernetes-validations"] = [rule]
    return crd


@pytest.mark.parametrize(("rule", "field", "text"), [
    ({"rule": "self.secretName ==", "message": "m"}, "x-kubernetes-validations[0].rule",
     "compilation failed"),
    ({"rule": "self.secretName.noSuchFunction()"}, "x-kubernetes-validations[0].rule",
     "undeclared reference to 'noSuchFunction'"),
    ({"rule": "other.secretName == ''"}, "x-kubernetes-validations[0].rule",
     "undeclared reference to 'other'"),
    ({"rule": "self.isCA", "reason": "Whatever"}, "x-kubernetes-validations[0].reason",
     "Unsupported value"),
    ({"rule": "self.isCA", "optionalOldSelf": True},
     "x-kubernetes-validations[0].optionalOldSelf", "does not use oldSelf"),
    ({"rule": "self.isCA", "fieldPath": "isCA"}, "x-kubernetes-validations[0].fieldPath",
     "fieldPath"),
    ({"rule": "self.isCA", "messageExpression": "'a' +"},
     "x-kubernetes-validations[0].messageExpression", "compilation failed"),
])
def test_crd_with_a_bad_rule_is_refused(api, rule, field, text):
    ext = k8s.ApiextensionsV1Api(api)
    status = _refused(lambda: ext.create_custom_resource_definition(_crd_with_rule(rule)))
    fields = [c["field"] for c in status["details"]["causes"]]
    assert f"spec.versions[0].schema.openAPIV3Schema.properties[spec].{field}" in fields
    assert text in status["message"]


def test_crd_with_good_rules_is_accepted(api):
    ext = k8s.ApiextensionsV1Api(api)
    crd = _crd_with_rule({"rule": "self.secretName.lowerAscii().split('-').size() > 0 && "
                                  "self.secretName.indexOf('x') >= -1",
                          "messageExpression": "'bad ' + self.secretName"})
    crd["metadata"]["name"] = "goodrules.cel.example.com"
    crd["spec"]["names"] = {"plural": "goodrules", "kind": "GoodRule"}
    ext.create_custom_resource_definition(crd)
