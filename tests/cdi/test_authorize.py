"""Cross-namespace clone authorisation: the creator recorded at admission, the
SubjectAccessReviews asked, the refusal (pure)."""

from __future__ import annotations

import base64
import json

from cdi import admission, authorize
from tests.cdi.builders import dv

KEY = "cdi.kubevirt.io/storage.clone.requester"


def review(obj: dict, op: str = "CREATE") -> dict:
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "request": {"uid": "u1", "operation": op, "kind": {"kind": "DataVolume"},
                        "namespace": "ns", "object": obj,
                        "userInfo": {"username": "alice", "uid": "a-1",
                                     "groups": ["dev", "system:authenticated"]}}}


def test_mutating_webhook_records_the_creator_over_whatever_was_written() -> None:
    forged = dv(annotations={KEY: json.dumps({"username": "system:admin"})})
    out = admission.mutate(review(forged), exists=lambda *a: True)["response"]
    assert out["allowed"] and out["uid"] == "u1" and out["patchType"] == "JSONPatch"
    patch = json.loads(base64.b64decode(out["patch"]))
    assert patch == [{"op": "add", "path": "/metadata/annotations/cdi.kubevirt.io~1storage"
                      ".clone.requester", "value": patch[0]["value"]}]
    who = authorize.requester({"metadata": {"annotations": {KEY: patch[0]["value"]}}})
    assert who == authorize.Requester(username="alice", uid="a-1",
                                      groups=("dev", "system:authenticated"))
    bare = dv()
    del bare["metadata"]["annotations"]
    patch = json.loads(base64.b64decode(admission.mutate(review(bare), exists=lambda *a: True)
                                        ["response"]["patch"]))
    assert patch[0]["path"] == "/metadata/annotations" and KEY in patch[0]["value"]


def test_requester_annotation_cannot_change() -> None:
    old = dv(annotations={KEY: "a"})
    new = dv(annotations={KEY: "b"})
    problems = admission.review(
        {"request": {"uid": "u", "operation": "UPDATE", "kind": {"kind": "DataVolume"},
                     "object": new, "oldObject": old}}, exists=lambda *a: True)
    assert not problems["response"]["allowed"]
    assert KEY in problems["response"]["status"]["message"]


def test_reviews_ask_datavolumes_source_then_pods() -> None:
    who = authorize.Requester(username="alice", groups=("dev",))
    first, second = authorize.reviews(who=who, namespace="gold")
    assert first["spec"]["user"] == "alice" and first["spec"]["groups"] == ["dev"]
    assert first["spec"]["resourceAttributes"] == {
        "namespace": "gold", "verb": "create", "group": "cdi.kubevirt.io",
        "resource": "datavolumes", "subresource": "source"}
    assert second["spec"]["resourceAttributes"] == {
        "namespace": "gold", "verb": "create", "group": "", "resource": "pods"}
    # naming the claim, as upstream: a Role may grant clones of some claims only
    named = authorize.reviews(who=who, namespace="gold", name="disk")
    assert [r["spec"]["resourceAttributes"]["name"] for r in named] == ["disk", "disk"]


def test_a_service_account_is_asked_about_as_the_api_server_authenticates_it() -> None:
    who = authorize.service_account("team", "builder")
    assert who == authorize.Requester(
        username="system:serviceaccount:team:builder",
        groups=("system:serviceaccounts", "system:serviceaccounts:team",
                "system:authenticated"))


def test_denial_message_and_unreadable_requester() -> None:
    assert authorize.denied_message(who=authorize.Requester("bob"), namespace="gold") == \
        "User bob has insufficient permissions in clone source namespace gold"
    assert authorize.requester({"metadata": {"annotations": {KEY: "not json"}}}) is None
    assert authorize.requester({"metadata": {"annotations": {KEY: "{}"}}}) is None
