"""RoleBindings and ClusterRoleBindings are defaulted and validated as kube-apiserver does
(``pkg/apis/rbac/v1/defaults.go``, ``pkg/apis/rbac/validation/validation.go``): a bad
roleRef or subject is a 422 with upstream's causes, and nothing is stored."""

from __future__ import annotations

from typing import Any

import pytest

from localcluster.apiserver.rules import bindings

from .server_fixtures import Raw

RBAC = "/apis/rbac.authorization.k8s.io/v1"
GROUP = "rbac.authorization.k8s.io"
SUBDOMAIN = ("a lowercase RFC 1123 subdomain must consist of lower case alphanumeric "
             "characters, '-' or '.', and must start and end with an alphanumeric character "
             "(e.g. 'example.com', regex used for validation is "
             "'[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')")


def _causes(body: dict[str, Any]) -> list[tuple[str, str, str]]:
    return [(c["reason"], c["field"], c["message"]) for c in body["details"]["causes"]]


def _path(namespace: str | None) -> str:
    return f"{RBAC}/namespaces/{namespace}/rolebindings" if namespace else \
        f"{RBAC}/clusterrolebindings"


@pytest.mark.parametrize(("scope", "role_ref", "causes"), [
    ("ns", {"apiGroup": "example.com", "kind": "Role", "name": "r"},
     [("FieldValueNotSupported", "roleRef.apiGroup",
       'Unsupported value: "example.com": supported values: "rbac.authorization.k8s.io"')]),
    ("ns", {"apiGroup": GROUP, "kind": "Pod", "name": "r"},
     [("FieldValueNotSupported", "roleRef.kind",
       'Unsupported value: "Pod": supported values: "Role", "ClusterRole"')]),
    ("cluster", {"apiGroup": GROUP, "kind": "Role", "name": "r"},
     [("FieldValueNotSupported", "roleRef.kind",
       'Unsupported value: "Role": supported values: "ClusterRole"')]),
    ("ns", {"apiGroup": GROUP, "kind": "ClusterRole", "name": "a/b%c"},
     [("FieldValueInvalid", "roleRef.name", "Invalid value: \"a/b%c\": may not contain '/'"),
      ("FieldValueInvalid", "roleRef.name", "Invalid value: \"a/b%c\": may not contain '%'")]),
    ("cluster", {"apiGroup": GROUP, "kind": "ClusterRole", "name": ".."},
     [("FieldValueInvalid", "roleRef.name", "Invalid value: \"..\": may not be '..'")]),
    ("cluster", {"kind": "ClusterRole"},
     [("FieldValueRequired", "roleRef.name", "Required value")]),
    ("cluster", None,  # no roleRef at all: Go's zero RoleRef (the apiGroup is defaulted)
     [("FieldValueNotSupported", "roleRef.kind",
       'Unsupported value: "": supported values: "ClusterRole"'),
      ("FieldValueRequired", "roleRef.name", "Required value")]),
])
def test_a_bad_role_ref_is_refused(raw: Raw, namespace: str, scope: str,
                                   role_ref: dict[str, str] | None,
                                   causes: list[tuple[str, str, str]]) -> None:
    ns = namespace if scope == "ns" else None
    body: dict[str, Any] = {"metadata": {"name": f"{namespace}-bad"},
                            "subjects": [{"kind": "User", "name": "u"}]}
    if role_ref is not None:
        body["roleRef"] = role_ref
    code, answer = raw.request("POST", _path(ns), body)
    assert (code, answer["reason"]) == (422, "Invalid"), answer
    assert _causes(answer) == causes
    kind = "RoleBinding" if ns else "ClusterRoleBinding"
    assert answer["message"].startswith(f'{kind}.{GROUP} "{namespace}-bad" is invalid: ')
    assert raw.request("GET", f"{_path(ns)}/{namespace}-bad")[0] == 404


def test_subjects_are_validated_per_kind(raw: Raw, namespace: str) -> None:
    ref = {"apiGroup": GROUP, "kind": "ClusterRole", "name": "view"}
    code, answer = raw.request("POST", _path(None), {
        "metadata": {"name": f"{namespace}-subjects"}, "roleRef": ref, "subjects": [
            {"kind": "ServiceAccount", "name": "Not_A_Name", "apiGroup": "v1"},
            {"kind": "User", "apiGroup": "example.com", "name": "u"},
            {"kind": "Group", "name": ""},
            {"kind": "Robot", "name": "r2"},
        ]})
    assert code == 422, answer
    assert _causes(answer) == [
        ("FieldValueInvalid", "subjects[0].name", f'Invalid value: "Not_A_Name": {SUBDOMAIN}'),
        ("FieldValueNotSupported", "subjects[0].apiGroup",
         'Unsupported value: "v1": supported values: ""'),
        ("FieldValueRequired", "subjects[0].namespace", "Required value"),
        ("FieldValueNotSupported", "subjects[1].apiGroup",
         'Unsupported value: "example.com": supported values: "rbac.authorization.k8s.io"'),
        ("FieldValueRequired", "subjects[2].name", "Required value"),
        ("FieldValueNotSupported", "subjects[3].kind",
         'Unsupported value: "Robot": supported values: "ServiceAccount", "User", "Group"'),
    ]
    # in a RoleBinding a ServiceAccount needs no namespace (the binding's is meant)
    code, answer = raw.request("POST", _path(namespace), {
        "metadata": {"name": "sa"}, "roleRef": ref,
        "subjects": [{"kind": "ServiceAccount", "name": "default"}]})
    assert code == 201, answer


def test_api_groups_are_defaulted_and_stored(raw: Raw, namespace: str) -> None:
    code, answer = raw.request("POST", _path(namespace), {
        "metadata": {"name": "defaults"},
        "roleRef": {"kind": "ClusterRole", "name": "view"},
        "subjects": [{"kind": "User", "name": "u"}, {"kind": "Group", "name": "g"},
                     {"kind": "ServiceAccount", "name": "default"}]})
    assert code == 201, answer
    code, stored = raw.request("GET", f"{_path(namespace)}/defaults")
    assert code == 200
    assert stored["roleRef"] == {"apiGroup": GROUP, "kind": "ClusterRole", "name": "view"}
    assert [s.get("apiGroup") for s in stored["subjects"]] == [GROUP, GROUP, ""]


def test_an_update_is_validated_too(raw: Raw, namespace: str) -> None:
    ref = {"apiGroup": GROUP, "kind": "ClusterRole", "name": "view"}
    code, _ = raw.request("POST", _path(namespace), {"metadata": {"name": "upd"},
                                                     "roleRef": ref})
    assert code == 201
    code, answer = raw.request("PUT", f"{_path(namespace)}/upd", {
        "metadata": {"name": "upd"}, "roleRef": ref,
        "subjects": [{"kind": "User", "name": "u", "apiGroup": "x"}]})
    assert code == 422 and [c[1] for c in _causes(answer)] == ["subjects[0].apiGroup"]
    assert raw.request("GET", f"{_path(namespace)}/upd")[1].get("subjects") is None


# -- the pure rules -----------------------------------------------------------------------

def test_set_defaults_keeps_what_is_given() -> None:
    obj: dict[str, Any] = {"roleRef": {"apiGroup": "x", "kind": "Role", "name": "r"},
                           "subjects": [{"kind": "User", "name": "u", "apiGroup": "y"},
                                        {"kind": "Robot", "name": "r"}, "junk"]}
    bindings.set_defaults(obj)
    assert obj["roleRef"]["apiGroup"] == "x"
    assert obj["subjects"] == [{"kind": "User", "name": "u", "apiGroup": "y"},
                               {"kind": "Robot", "name": "r"}, "junk"]


def test_a_valid_binding_has_no_causes() -> None:
    assert bindings.validate({
        "kind": "ClusterRoleBinding",
        "roleRef": {"apiGroup": GROUP, "kind": "ClusterRole", "name": "system:auth-delegator"},
        "subjects": [{"kind": "ServiceAccount", "name": "sa", "namespace": "ns"},
                     {"kind": "User", "name": "system:admin", "apiGroup": GROUP}]}) == []
