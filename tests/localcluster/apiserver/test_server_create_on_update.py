"""A PUT of an object that does not exist creates it (201) for the kinds whose upstream
registry strategy says AllowCreateOnUpdate (the RBAC kinds, Leases, Endpoints, Events,
LimitRanges, Services) and is 404 for the others (ConfigMaps, ServiceAccounts...). Such a
create passes the RBAC escalation check of a create, and needs ``create`` as well as
``update`` (upstream's withAuthorization on the create path of an update)."""

from __future__ import annotations

from typing import Any

import pytest

from localcluster.apiserver.server import APIServer

from .server_fixtures import Raw

RBAC = "/apis/rbac.authorization.k8s.io/v1"
GROUP = "rbac.authorization.k8s.io"
EVERYTHING = {"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}


def _account(server: APIServer, raw: Raw, namespace: str, name: str,
             rules: list[dict[str, Any]]) -> Raw:
    """A service account holding ``rules`` in ``namespace`` (a Role bound by the admin)."""
    assert raw.request("POST", f"/api/v1/namespaces/{namespace}/serviceaccounts",
                       {"metadata": {"name": name}})[0] == 201
    assert raw.request("POST", f"{RBAC}/namespaces/{namespace}/roles",
                       {"metadata": {"name": name}, "rules": rules})[0] == 201
    code, body = raw.request("POST", f"{RBAC}/namespaces/{namespace}/rolebindings", {
        "metadata": {"name": name}, "roleRef": {"apiGroup": GROUP, "kind": "Role", "name": name},
        "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": namespace}]})
    assert code == 201, body
    return Raw(server, token=server.token_for_service_account(namespace, name))


def _rbac_objects(namespace: str) -> list[tuple[str, dict[str, Any]]]:
    ref = {"apiGroup": GROUP, "kind": "ClusterRole", "name": "view"}
    subjects = [{"kind": "User", "name": "someone", "apiGroup": GROUP}]
    return [
        (f"{RBAC}/namespaces/{namespace}/roles/r", {"rules": []}),
        (f"{RBAC}/clusterroles/{namespace}-cr", {"rules": []}),
        (f"{RBAC}/namespaces/{namespace}/rolebindings/rb",
         {"roleRef": ref, "subjects": subjects}),
        (f"{RBAC}/clusterrolebindings/{namespace}-crb", {"roleRef": ref, "subjects": subjects}),
    ]


def test_a_put_creates_rbac_objects(raw: Raw, namespace: str) -> None:
    for path, fields in _rbac_objects(namespace):
        name = path.rsplit("/", 1)[1]
        code, body = raw.request("PUT", path, {"metadata": {"name": name}, **fields})
        assert code == 201, (path, body)
        code, stored = raw.request("GET", path)
        assert code == 200 and stored["metadata"]["uid"] == body["metadata"]["uid"]
        # the next PUT updates it
        code, body = raw.request("PUT", path, {"metadata": {"name": name, "labels": {
            "a": "b"}}, **fields})
        assert (code, body["metadata"]["labels"]) == (200, {"a": "b"}), body
        assert body["metadata"]["uid"] == stored["metadata"]["uid"]


@pytest.mark.parametrize(("path", "body", "code"), [
    ("/apis/coordination.k8s.io/v1/namespaces/{ns}/leases/l",
     {"spec": {"holderIdentity": "me"}}, 201),
    ("/api/v1/namespaces/{ns}/endpoints/e", {"subsets": []}, 201),
    ("/api/v1/namespaces/{ns}/limitranges/lr", {"spec": {"limits": []}}, 201),
    ("/api/v1/namespaces/{ns}/configmaps/c", {"data": {"a": "b"}}, 404),
    ("/api/v1/namespaces/{ns}/secrets/s", {"data": {}}, 404),
    ("/api/v1/namespaces/{ns}/serviceaccounts/sa", {}, 404),
    ("/apis/discovery.k8s.io/v1/namespaces/{ns}/endpointslices/es",
     {"addressType": "IPv4", "endpoints": []}, 404),
])
def test_only_upstreams_create_on_update_kinds_are_created_by_a_put(
        raw: Raw, namespace: str, path: str, body: dict[str, Any], code: int) -> None:
    path = path.format(ns=namespace)
    name = path.rsplit("/", 1)[1]
    got, answer = raw.request("PUT", path, {"metadata": {"name": name}, **body})
    assert got == code, answer
    assert raw.request("GET", path)[0] == (200 if code == 201 else 404)


def test_a_put_create_ignores_the_resource_version_and_names_from_the_url(
        raw: Raw, namespace: str) -> None:
    path = f"{RBAC}/namespaces/{namespace}/roles/from-url"
    code, body = raw.request("PUT", path, {"metadata": {"resourceVersion": "12345"},
                                           "rules": []})
    assert code == 201, body
    assert body["metadata"]["name"] == "from-url"
    assert body["metadata"]["resourceVersion"] != "12345"


def test_a_put_create_with_a_uid_fails_its_precondition(raw: Raw, namespace: str) -> None:
    path = f"{RBAC}/namespaces/{namespace}/roles/with-uid"
    code, body = raw.request("PUT", path, {"metadata": {"name": "with-uid", "uid": "abc"},
                                           "rules": []})
    assert (code, body["reason"]) == (409, "Conflict"), body
    assert body["message"] == (
        f'Operation cannot be fulfilled on roles.{GROUP} "with-uid": Precondition failed: '
        "UID in precondition: abc, UID in object meta: ")
    assert raw.request("GET", path)[0] == 404


def test_a_put_create_is_checked_for_escalation(shared_server: APIServer, raw: Raw,
                                                namespace: str) -> None:
    """A writer of bindings and roles, holding little else: a PUT may not create what a
    POST may not."""
    writer = _account(shared_server, raw, namespace, "writer", [{
        "apiGroups": [GROUP], "resources": ["roles", "rolebindings"],
        "verbs": ["get", "create", "update"]}])
    binding = f"{RBAC}/namespaces/{namespace}/rolebindings/esc"
    code, body = writer.request("PUT", binding, {
        "metadata": {"name": "esc"},
        "roleRef": {"apiGroup": GROUP, "kind": "ClusterRole", "name": "cluster-admin"},
        "subjects": [{"kind": "ServiceAccount", "name": "writer", "namespace": namespace}]})
    assert (code, body["reason"]) == (403, "Forbidden"), body
    assert "is attempting to grant RBAC permissions not currently held" in body["message"]
    assert raw.request("GET", binding)[0] == 404
    role = f"{RBAC}/namespaces/{namespace}/roles/star"
    code, body = writer.request("PUT", role, {"metadata": {"name": "star"},
                                              "rules": [EVERYTHING]})
    assert code == 403, body
    assert raw.request("GET", role)[0] == 404
    # what it holds, it may create by PUT
    code, body = writer.request("PUT", f"{RBAC}/namespaces/{namespace}/roles/mine", {
        "metadata": {"name": "mine"},
        "rules": [{"apiGroups": [GROUP], "resources": ["roles"], "verbs": ["get"]}]})
    assert code == 201, body


def test_a_put_create_needs_the_create_verb(shared_server: APIServer, raw: Raw,
                                            namespace: str) -> None:
    updater = _account(shared_server, raw, namespace, "updater", [{
        "apiGroups": ["coordination.k8s.io"], "resources": ["leases"],
        "verbs": ["get", "update"]}])
    path = f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases/lock"
    code, body = updater.request("PUT", path, {"metadata": {"name": "lock"}, "spec": {}})
    assert (code, body["reason"]) == (403, "Forbidden"), body
    assert body["message"] == (
        f'leases.coordination.k8s.io "lock" is forbidden: User '
        f'"system:serviceaccount:{namespace}:updater" cannot create resource "leases" in '
        f'API group "coordination.k8s.io" in the namespace "{namespace}"')
    assert raw.request("GET", path)[0] == 404
    # once it exists, update is all a PUT needs
    assert raw.request("POST", f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases",
                       {"metadata": {"name": "lock"}, "spec": {}})[0] == 201
    code, body = updater.request("PUT", path, {"metadata": {"name": "lock"},
                                               "spec": {"holderIdentity": "me"}})
    assert code == 200, body
