"""Impersonation headers without ``Impersonate-User``: refused with 400 as kube-apiserver
refuses them (``filters/impersonation``), never served as the caller with the groups
dropped; and anonymous callers cannot impersonate."""

from __future__ import annotations

import pytest
from kubernetes import client as k8s

from localcluster.apiserver.auth.impersonation import WantedUser, go_repr, wanted_user
from localcluster.apiserver.errors import APIError
from localcluster.apiserver.server import APIServer

from .server_fixtures import Raw


@pytest.mark.parametrize("headers", [
    {"Impersonate-Group": "system:masters"},
    {"Impersonate-Uid": "1234"},
    {"Impersonate-Extra-Scopes": "view"},
    {"Impersonate-User": "", "Impersonate-Group": "system:masters"},
])
def test_impersonating_without_a_user_is_a_bad_request(
        shared_server: APIServer, api: k8s.ApiClient, namespace: str,
        headers: dict[str, str]) -> None:
    """The caller may list configmaps itself: only the headers make the request wrong,
    and it is not served (not as the caller, not as anyone)."""
    k8s.CoreV1Api(api).create_namespaced_service_account(namespace, {"metadata": {
        "name": "reader"}})
    k8s.RbacAuthorizationV1Api(api).create_namespaced_role_binding(namespace, {
        "metadata": {"name": "reader"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                    "name": "view"},
        "subjects": [{"kind": "ServiceAccount", "name": "reader", "namespace": namespace}]})
    reader = Raw(shared_server, token=shared_server.token_for_service_account(
        namespace, "reader"))
    path = f"/api/v1/namespaces/{namespace}/configmaps"
    assert reader.request("GET", path)[0] == 200
    code, body = reader.request("GET", path, headers=headers)
    assert (code, body["reason"], body["kind"]) == (400, "BadRequest", "Status"), body
    assert body["message"].endswith(" without impersonating a user name")
    # a write is refused before anything is stored
    code, _ = reader.request("POST", path, {"metadata": {"name": "x"}}, headers=headers)
    assert code == 400
    assert Raw(shared_server).request("GET", f"{path}/x")[0] == 404
    # the admin gets the same answer: the headers are wrong whoever sends them
    assert Raw(shared_server).request("GET", path, headers=headers)[0] == 400


def test_the_message_renders_the_wanted_user_as_upstream(raw: Raw) -> None:
    code, body = raw.request("GET", "/api/v1/namespaces", headers={
        "Impersonate-Group": "devs", "Impersonate-Uid": "u-1"})
    assert code == 400
    assert body["message"] == (
        'requested &user.DefaultInfo{Name:"", UID:"u-1", Groups:[]string{"devs"}, '
        "Extra:map[string][]string(nil)} without impersonating a user name")


def test_anonymous_callers_cannot_impersonate(raw: Raw, shared_server: APIServer) -> None:
    anonymous = Raw(shared_server, token="")
    assert anonymous.request("GET", "/version")[0] == 200
    code, body = anonymous.request("GET", "/version", headers={"Impersonate-User": "admin"})
    assert (code, body["reason"]) == (403, "Forbidden"), body
    assert anonymous.request("GET", "/version",
                             headers={"Impersonate-Group": "system:masters"})[0] == 400


def test_impersonating_a_user_with_groups_still_works(raw: Raw) -> None:
    code, body = raw.request("POST", "/apis/authentication.k8s.io/v1/selfsubjectreviews",
                             {"apiVersion": "authentication.k8s.io/v1",
                              "kind": "SelfSubjectReview"},
                             headers={"Impersonate-User": "jane",
                                      "Impersonate-Group": "devs"})
    assert code == 201, body
    assert body["status"]["userInfo"] == {"username": "jane",
                                          "groups": ["devs", "system:authenticated"]}


# -- the pure reading of the headers ----------------------------------------------------------

def test_wanted_user_reads_the_headers() -> None:
    assert wanted_user([("Accept", "*/*")]) is None
    assert wanted_user([("impersonate-user", "jane"), ("Impersonate-Group", "a"),
                        ("IMPERSONATE-GROUP", "b"), ("Impersonate-Extra-Acme.com%2Fx", "1"),
                        ("Impersonate-Uid", "7")]) == WantedUser(
        "jane", "7", ("a", "b"), (("acme.com/x", ("1",)),))
    # upstream's headers.Get: the first value; an empty one is no user
    assert wanted_user([("Impersonate-User", "a"), ("Impersonate-User", "b")]) == \
        WantedUser("a")
    with pytest.raises(APIError) as err:
        wanted_user([("Impersonate-User", ""), ("Impersonate-Extra-k", "v"),
                     ("Impersonate-Extra-a%zz", "w")])
    assert err.value.code == 400
    assert err.value.message == (
        'requested &user.DefaultInfo{Name:"", UID:"", Groups:[]string(nil), '
        'Extra:map[string][]string{"a%zz":[]string{"w"}, "k":[]string{"v"}}} '
        "without impersonating a user name")


def test_go_repr_quotes_as_go() -> None:
    assert go_repr(WantedUser("", groups=('a"b', "c\n"))) == (
        '&user.DefaultInfo{Name:"", UID:"", Groups:[]string{"a\\"b", "c\\n"}, '
        "Extra:map[string][]string(nil)}")
