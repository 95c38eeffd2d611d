"""RBAC escalation prevention on the real server: a service account may create, update
or patch Roles and bindings only for what it holds, unless it may ``escalate`` or
``bind``, as kube-apiserver's RBAC registry decides (the security review's sequence:
an ``admin`` of one namespace binding itself to cluster-admin)."""

from __future__ import annotations

from typing import Any

from localcluster.apiserver.server import APIServer

from .server_fixtures import Raw

RBAC = "/apis/rbac.authorization.k8s.io/v1"
REF = {"apiGroup": "rbac.authorization.k8s.io"}
MERGE = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"
EVERYTHING = {"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}


def _account(server: APIServer, raw: Raw, namespace: str, name: str,
             *bindings: tuple[str, str, str]) -> Raw:
    """A service account of ``namespace`` with bindings (scope, kind, role): scope "" is
    a ClusterRoleBinding, else a RoleBinding there. Written by the admin."""
    code, _ = raw.request("POST", f"/api/v1/namespaces/{namespace}/serviceaccounts",
                          {"metadata": {"name": name}})
    assert code == 201
    subject = [{"kind": "ServiceAccount", "name": name, "namespace": namespace}]
    for i, (scope, kind, role) in enumerate(bindings):
        binding_name = f"{namespace}-{name}-{i}"
        path = f"{RBAC}/namespaces/{scope}/rolebindings" if scope else \
            f"{RBAC}/clusterrolebindings"
        code, body = raw.request("POST", path, {
            "metadata": {"name": binding_name}, "roleRef": {**REF, "kind": kind, "name": role},
            "subjects": subject})
        assert code == 201, body
    return Raw(server, token=server.token_for_service_account(namespace, name))


def _role(raw: Raw, namespace: str, name: str, rules: list[dict[str, Any]]) -> None:
    code, body = raw.request("POST", f"{RBAC}/namespaces/{namespace}/roles",
                             {"metadata": {"name": name}, "rules": rules})
    assert code == 201, body


def _binding(name: str, kind: str, role: str, subject: str = "someone") -> dict[str, Any]:
    return {"metadata": {"name": name}, "roleRef": {**REF, "kind": kind, "name": role},
            "subjects": [{"kind": "User", "name": subject}]}


def _groups(namespace: str) -> str:
    return (f'(groups=["system:serviceaccounts" "system:serviceaccounts:{namespace}" '
            '"system:authenticated"])')


def test_a_namespace_admin_cannot_bind_cluster_admin_or_write_a_star_role(
        shared_server: APIServer, raw: Raw, namespace: str) -> None:
    admin = _account(shared_server, raw, namespace, "nsadmin",
                     (namespace, "ClusterRole", "admin"))
    user = f"system:serviceaccount:{namespace}:nsadmin"
    code, body = admin.request("POST", f"{RBAC}/namespaces/{namespace}/rolebindings", {
        "metadata": {"name": "esc"}, "roleRef": {**REF, "kind": "ClusterRole",
                                                 "name": "cluster-admin"},
        "subjects": [{"kind": "ServiceAccount", "name": "nsadmin", "namespace": namespace}]})
    assert (code, body["reason"]) == (403, "Forbidden")
    assert body["message"] == (
        f'rolebindings.rbac.authorization.k8s.io "esc" is forbidden: user "{user}" '
        f'{_groups(namespace)} is attempting to grant RBAC permissions not currently held:\n'
        '{APIGroups:["*"], Resources:["*"], Verbs:["*"]}\n'
        '{NonResourceURLs:["*"], Verbs:["*"]}')
    assert body["details"] == {"name": "esc", "group": "rbac.authorization.k8s.io",
                               "kind": "rolebindings"}
    code, body = admin.request("POST", f"{RBAC}/namespaces/{namespace}/roles", {
        "metadata": {"name": "star"}, "rules": [EVERYTHING]})
    assert code == 403
    assert body["message"] == (
        f'roles.rbac.authorization.k8s.io "star" is forbidden: user "{user}" '
        f'{_groups(namespace)} is attempting to grant RBAC permissions not currently held:\n'
        '{APIGroups:["*"], Resources:["*"], Verbs:["*"]}')
    # a dry run is refused the same way, and nothing was written
    code, _ = admin.request("POST", f"{RBAC}/namespaces/{namespace}/roles?dryRun=All", {
        "metadata": {"name": "star"}, "rules": [EVERYTHING]})
    assert code == 403
    assert raw.request("GET", f"{RBAC}/namespaces/{namespace}/roles/star")[0] == 404
    assert raw.request("GET", f"{RBAC}/namespaces/{namespace}/rolebindings/esc")[0] == 404
    assert admin.request("GET", "/api/v1/nodes")[0] == 403
    assert admin.request("GET", "/api/v1/namespaces/kube-system/secrets")[0] == 403
    # what it holds it may grant: edit (aggregated into admin), admin itself, a Role of
    # a few of its own rules
    for role in ("edit", "admin", "view"):
        code, body = admin.request("POST", f"{RBAC}/namespaces/{namespace}/rolebindings",
                                   _binding(f"give-{role}", "ClusterRole", role))
        assert code == 201, body
    code, body = admin.request("POST", f"{RBAC}/namespaces/{namespace}/roles", {
        "metadata": {"name": "readers"},
        "rules": [{"apiGroups": [""], "resources": ["pods", "configmaps"],
                   "verbs": ["get", "list"]}]})
    assert code == 201, body


def test_bind_on_a_role_lets_it_be_bound(shared_server: APIServer, raw: Raw,
                                         namespace: str) -> None:
    _role(raw, namespace, "may-bind", [{
        "apiGroups": ["rbac.authorization.k8s.io"], "resources": ["clusterroles"],
        "verbs": ["bind"], "resourceNames": ["cluster-admin"]}])
    binder = _account(shared_server, raw, namespace, "binder",
                      (namespace, "ClusterRole", "admin"), (namespace, "Role", "may-bind"))
    path = f"{RBAC}/namespaces/{namespace}/rolebindings"
    code, body = binder.request("POST", path, _binding("ca", "ClusterRole", "cluster-admin"))
    assert code == 201, body
    # bind names cluster-admin only; and it was granted in this namespace only
    code, body = binder.request("POST", path, _binding("v", "ClusterRole",
                                                       "system:auth-delegator"))
    assert code == 403 and "not currently held" in body["message"]
    code, _ = binder.request("POST", f"{RBAC}/clusterrolebindings",
                             _binding(f"{namespace}-ca", "ClusterRole", "cluster-admin"))
    assert code == 403
    # a binding to a role that does not exist: 404 (bind does not look it up)
    code, body = binder.request("POST", path, _binding("nx", "Role", "nope"))
    assert (code, body["message"]) == (404, 'roles.rbac.authorization.k8s.io "nope" not found')


def test_escalate_on_roles_lets_any_role_be_written(shared_server: APIServer, raw: Raw,
                                                    namespace: str) -> None:
    _role(raw, namespace, "may-escalate", [{
        "apiGroups": ["rbac.authorization.k8s.io"], "resources": ["roles"],
        "verbs": ["create", "update", "patch", "escalate"]}])
    writer = _account(shared_server, raw, namespace, "escalator",
                      (namespace, "Role", "may-escalate"))
    code, body = writer.request("POST", f"{RBAC}/namespaces/{namespace}/roles", {
        "metadata": {"name": "star"}, "rules": [EVERYTHING]})
    assert code == 201, body
    # it still cannot bind it to anyone: binding needs the rules, or bind
    code, body = writer.request("POST", f"{RBAC}/namespaces/{namespace}/rolebindings",
                                _binding("star", "Role", "star"))
    assert code == 403


def test_cluster_roles_are_checked_against_cluster_wide_rules_only(
        shared_server: APIServer, raw: Raw, namespace: str) -> None:
    # only namespace rights: cannot create a ClusterRole at all
    nsadmin = _account(shared_server, raw, namespace, "nsadmin",
                       (namespace, "ClusterRole", "admin"))
    code, body = nsadmin.request("POST", f"{RBAC}/clusterroles", {
        "metadata": {"name": f"{namespace}-c"}, "rules": []})
    assert code == 403 and "cannot create resource" in body["message"]
    # may create ClusterRoles, holds pods only in its namespace: not a cluster-wide pods rule
    code, _ = raw.request("POST", f"{RBAC}/clusterroles", {
        "metadata": {"name": f"{namespace}-writer"},
        "rules": [{"apiGroups": ["rbac.authorization.k8s.io"], "resources": ["clusterroles"],
                   "verbs": ["create", "update", "patch"]},
                  {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get"]}]})
    assert code == 201
    writer = _account(shared_server, raw, namespace, "crwriter",
                      ("", "ClusterRole", f"{namespace}-writer"),
                      (namespace, "ClusterRole", "admin"))
    name = f"{namespace}-pods"
    code, body = writer.request("POST", f"{RBAC}/clusterroles", {
        "metadata": {"name": name},
        "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}]})
    assert code == 403
    assert body["message"].startswith(f'clusterroles.rbac.authorization.k8s.io "{name}" is '
                                      'forbidden: user ')
    assert body["message"].endswith('{APIGroups:[""], Resources:["pods"], Verbs:["get"]}')
    code, body = writer.request("POST", f"{RBAC}/clusterroles", {
        "metadata": {"name": f"{namespace}-nodes"},
        "rules": [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["get"]}]})
    assert code == 201, body
    # an aggregationRule gathers anything: cluster-admin's rights (or escalate) only
    code, body = writer.request("POST", f"{RBAC}/clusterroles", {
        "metadata": {"name": f"{namespace}-agg"}, "rules": [],
        "aggregationRule": {"clusterRoleSelectors": [{"matchLabels": {"any": "thing"}}]}})
    assert (code, body["message"]) == (
        403, f'clusterroles.rbac.authorization.k8s.io "{namespace}-agg" is forbidden: must '
        'have cluster-admin privileges to use the aggregationRule')


def test_resource_names_are_covered_as_upstream(shared_server: APIServer, raw: Raw,
                                                namespace: str) -> None:
    _role(raw, namespace, "names", [
        {"apiGroups": ["rbac.authorization.k8s.io"], "resources": ["roles"],
         "verbs": ["create"]},
        {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get"],
         "resourceNames": ["a", "b"]},
        {"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"]}])
    writer = _account(shared_server, raw, namespace, "namer", (namespace, "Role", "names"))
    path = f"{RBAC}/namespaces/{namespace}/roles"

    def create(name: str, rule: dict[str, Any]) -> tuple[int, Any]:
        return writer.request("POST", path, {"metadata": {"name": name}, "rules": [rule]})

    cm, secret = {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get"]}, \
        {"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"]}
    assert create("cm-b", {**cm, "resourceNames": ["b"]})[0] == 201
    assert create("secret-x", {**secret, "resourceNames": ["x"]})[0] == 201
    code, body = create("cm-c", {**cm, "resourceNames": ["a", "c"]})
    assert code == 403 and body["message"].endswith(
        '{APIGroups:[""], Resources:["configmaps"], ResourceNames:["c"], Verbs:["get"]}')
    code, body = create("cm-all", cm)
    assert code == 403 and body["message"].endswith(
        '{APIGroups:[""], Resources:["configmaps"], Verbs:["get"]}')
    # a subresource is not its resource
    code, body = create("sub", {"apiGroups": [""], "resources": ["secrets/x"],
                                "verbs": ["get"]})
    assert code == 403


def test_updates_and_patches_are_checked_on_the_object_they_make(
        shared_server: APIServer, raw: Raw, namespace: str) -> None:
    _role(raw, namespace, "small", [{"apiGroups": [""], "resources": ["pods"],
                                     "verbs": ["get"]}])
    _role(raw, namespace, "big", [EVERYTHING])
    admin = _account(shared_server, raw, namespace, "nsadmin",
                     (namespace, "ClusterRole", "admin"))
    small = f"{RBAC}/namespaces/{namespace}/roles/small"
    for content_type, patch in (
            (MERGE, {"rules": [EVERYTHING]}),
            ("application/strategic-merge-patch+json", {"rules": [EVERYTHING]}),
            (JSON_PATCH, [{"op": "add", "path": "/rules/-", "value": EVERYTHING}]),
            (JSON_PATCH, [{"op": "replace", "path": "/rules/0/verbs/0", "value": "*"}])):
        code, body = admin.request("PATCH", small, patch, content_type=content_type)
        assert code == 403, (content_type, patch, body)
        assert "not currently held" in body["message"]
    code, current = raw.request("GET", small)
    assert current["rules"] == [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}]
    code, body = admin.request("PUT", small, {**current, "rules": [EVERYTHING]})
    assert code == 403 and "not currently held" in body["message"]
    # within what it holds: allowed, by patch and by update
    code, body = admin.request("PATCH", small, {"rules": [
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list"]}]},
        content_type=MERGE)
    assert code == 200, body
    assert body["rules"][0]["verbs"] == ["get", "list"]
    code, body = admin.request("PUT", small, {**body, "metadata": {
        **body["metadata"], "labels": {"a": "b"}}})
    assert code == 200, body
    # a patch naming a stale resourceVersion is a conflict, as for any patch
    code, body = admin.request("PATCH", small, {"metadata": {"resourceVersion": "1"}},
                               content_type=MERGE)
    assert code == 409
    # the role it cannot hold: only finalizers / ownerReferences may change (the GC's)
    big = f"{RBAC}/namespaces/{namespace}/roles/big"
    code, body = admin.request("PATCH", big, {"metadata": {"finalizers": ["example.com/x"]}},
                               content_type=MERGE)
    assert code == 200, body
    code, body = admin.request("PATCH", big, {"metadata": {"finalizers": None}},
                               content_type=MERGE)
    assert code == 200, body
    code, body = admin.request("PATCH", big, {"metadata": {"labels": {"a": "b"}}},
                               content_type=MERGE)
    assert code == 403
    # bindings: changing the subjects of a binding to a role it does not hold
    code, _ = raw.request("POST", f"{RBAC}/namespaces/{namespace}/rolebindings",
                          _binding("big", "Role", "big"))
    assert code == 201
    code, body = admin.request(
        "PATCH", f"{RBAC}/namespaces/{namespace}/rolebindings/big",
        {"subjects": [{"kind": "ServiceAccount", "name": "nsadmin", "namespace": namespace}]},
        content_type=MERGE)
    assert code == 403 and body["message"].startswith(
        'rolebindings.rbac.authorization.k8s.io "big" is forbidden: user ')
    # the admin token (system:masters) is not checked
    code, body = raw.request("PATCH", small, {"rules": [EVERYTHING]}, content_type=MERGE)
    assert code == 200, body
