"""Authentication (admin and service-account tokens, 401 otherwise), RBAC on every
request of a service account, and SubjectAccessReviews answered from the same rules."""

from __future__ import annotations

import json

import pytest
from kubernetes import client as k8s

from .server_fixtures import Raw, make_client


def test_anonymous_and_bad_tokens_get_401(shared_server):
    for token in ("", "nope", "e30.e30.forged"):
        code, body = Raw(shared_server, token=token).request("GET", "/api/v1/namespaces")
        assert code == 401 and body["reason"] == "Unauthorized"
    code, body = Raw(shared_server, token="").request("GET", "/healthz")
    assert code == 200 and body == "ok"


def test_kubeconfig_is_written_with_ca_and_token(shared_server):
    config = json.loads(shared_server.kubeconfig_path.read_text())
    assert config["clusters"][0]["cluster"]["server"] == shared_server.url
    assert config["clusters"][0]["cluster"]["certificate-authority-data"]
    assert config["users"][0]["user"]["token"] == shared_server.admin_token


def _sa_client(shared_server, api, namespace, name="robot"):
    core = k8s.CoreV1Api(api)
    core.create_namespaced_service_account(namespace, {"metadata": {"name": name}})
    return make_client(shared_server, shared_server.token_for_service_account(namespace, name))


def test_service_account_is_bound_by_rbac(shared_server, api, namespace):
    rbac = k8s.RbacAuthorizationV1Api(api)
    with _sa_client(shared_server, api, namespace) as sa_api:
        sa_core = k8s.CoreV1Api(sa_api)
        with pytest.raises(k8s.ApiException) as err:
            sa_core.list_namespaced_config_map(namespace)
        status = json.loads(err.value.body)
        assert err.value.status == 403 and status["reason"] == "Forbidden"
        assert (f'User "system:serviceaccount:{namespace}:robot" cannot list resource '
                f'"configmaps" in API group "" in the namespace "{namespace}"') \
            in status["message"]
        rbac.create_namespaced_role(namespace, {
            "metadata": {"name": "cm-reader"},
            "rules": [{"apiGroups": [""], "resources": ["configmaps"],
                       "verbs": ["get", "list", "watch"]}]})
        rbac.create_namespaced_role_binding(namespace, {
            "metadata": {"name": "robot-reads"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                        "name": "cm-reader"},
            "subjects": [{"kind": "ServiceAccount", "name": "robot",
                          "namespace": namespace}]})
        assert [c.metadata.name for c in sa_core.list_namespaced_config_map(
            namespace).items] == ["kube-root-ca.crt"]
        with pytest.raises(k8s.ApiException) as err:
            sa_core.create_namespaced_config_map(namespace, {"metadata": {"name": "x"}})
        assert err.value.status == 403
        with pytest.raises(k8s.ApiException) as err:
            sa_core.list_namespaced_config_map("default")
        assert err.value.status == 403
        # discovery is open to every authenticated user (bootstrap policy)
        assert k8s.CoreV1Api(sa_api).get_api_resources().resources
    assert [c.metadata.name for c in k8s.CoreV1Api(api).list_namespaced_config_map(
        namespace).items] == ["kube-root-ca.crt"]  # published by the root-CA controller


def test_deleted_service_account_token_stops_working(shared_server, api, namespace):
    with _sa_client(shared_server, api, namespace, name="temp") as sa_api:
        k8s.CoreV1Api(api).delete_namespaced_service_account("temp", namespace)
        with pytest.raises(k8s.ApiException) as err:
            k8s.CoreV1Api(sa_api).get_api_resources()
        assert err.value.status == 401


def test_subject_access_review(api, namespace):
    rbac = k8s.RbacAuthorizationV1Api(api)
    rbac.create_cluster_role({"metadata": {"name": f"dv-source-{namespace}"}, "rules": [
        {"apiGroups": ["cdi.kubevirt.io"], "resources": ["datavolumes/source"],
         "verbs": ["create"]}]})
    rbac.create_namespaced_role_binding(namespace, {
        "metadata": {"name": "cloner"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                    "name": f"dv-source-{namespace}"},
        "subjects": [{"kind": "ServiceAccount", "name": "cloner", "namespace": "other"}]})
    authz = k8s.AuthorizationV1Api(api)

    def review(ns, user="system:serviceaccount:other:cloner"):
        return authz.create_subject_access_review({"spec": {
            "user": user, "groups": [],
            "resourceAttributes": {"namespace": ns, "verb": "create",
                                   "group": "cdi.kubevirt.io", "resource": "datavolumes",
                                   "subresource": "source"}}}).status

    assert review(namespace).allowed is True
    assert review("default").allowed is False
    assert review(namespace, user="someone-else").allowed is False
    me = authz.create_self_subject_access_review({"spec": {"resourceAttributes": {
        "namespace": namespace, "verb": "delete", "resource": "pods"}}})
    assert me.status.allowed is True  # the admin


def test_impersonation_needs_the_impersonate_verb(shared_server, api, namespace):
    k8s.CoreV1Api(api).create_namespaced_service_account(namespace, {"metadata": {
        "name": "plain"}})
    token = shared_server.token_for_service_account(namespace, "plain")
    code, body = Raw(shared_server, token=token).request(
        "GET", "/api/v1/namespaces", headers={"Impersonate-User": "admin"})
    assert code == 403 and 'cannot impersonate resource "users"' in body["message"]
    code, body = Raw(shared_server).request(
        "GET", f"/api/v1/namespaces/{namespace}/configmaps",
        headers={"Impersonate-User": f"system:serviceaccount:{namespace}:plain"})
    assert code == 403 and f"system:serviceaccount:{namespace}:plain" in body["message"]


def test_rbac_names_may_contain_colons(api):
    rbac = k8s.RbacAuthorizationV1Api(api)
    role = rbac.create_cluster_role({"metadata": {"name": "example:reader"}, "rules": []})
    assert role.metadata.name == "example:reader"
    with pytest.raises(k8s.ApiException) as err:
        rbac.create_cluster_role({"metadata": {"name": "bad/name"}, "rules": []})
    assert err.value.status == 422 and "may not contain" in err.value.body
