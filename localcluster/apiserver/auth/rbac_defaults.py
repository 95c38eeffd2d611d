"""The RBAC objects a fresh cluster ships, created by the server at bootstrap.

The subset of kube-apiserver's bootstrap policy that clients here rely on: cluster-admin
for ``system:masters``; discovery, version and OpenAPI for every authenticated user (so
kubectl and the Python client can start); self access reviews (``kubectl auth can-i``);
token/access review for delegated auth; and the aggregated admin/edit/view roles that
operators' manifests extend through ``aggregate-to-*`` labels.
"""

from __future__ import annotations

from typing import Any

_API = "rbac.authorization.k8s.io/v1"
_BOOTSTRAP = {"kubernetes.io/bootstrapping": "rbac-defaults"}
_AUTOUPDATE = {"rbac.authorization.kubernetes.io/autoupdate": "true"}


def _role(name: str, rules: list[dict[str, Any]], *, labels: dict[str, str] | None = None,
          aggregate_from: list[str] | None = None) -> dict[str, Any]:
    role: dict[str, Any] = {
        "apiVersion": _API,
        "kind": "ClusterRole",
        "metadata": {"name": name, "labels": {**_BOOTSTRAP, **(labels or {})},
                     "annotations": dict(_AUTOUPDATE)},
        "rules": rules,
    }
    if aggregate_from is not None:
        role["aggregationRule"] = {"clusterRoleSelectors": [
            {"matchLabels": {label: "true"}} for label in aggregate_from]}
    return role


def _binding(name: str, role: str, groups: list[str]) -> dict[str, Any]:
    return {
        "apiVersion": _API,
        "kind": "ClusterRoleBinding",
        "metadata": {"name": name, "labels": dict(_BOOTSTRAP), "annotations": dict(_AUTOUPDATE)},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": g}
                     for g in groups],
    }


def _rule(groups: list[str], resources: list[str], verbs: list[str]) -> dict[str, Any]:
    return {"apiGroups": groups, "resources": resources, "verbs": verbs}


_READ = ["get", "list", "watch"]
_WRITE = ["create", "delete", "deletecollection", "patch", "update"]
# As kube-apiserver's bootstrap policy: view reads no Secrets (they hold credentials: a
# viewer would become whoever a Secret speaks for); edit writes no status subresources
# (a controller's or the kubelet's to write: a claim forged Bound could reach another's
# volume) and no Endpoints (CVE-2021-25740), but reads Secrets, and exec/attach/port-
# forward into pods and tokens of its namespace's service accounts are its.
_VIEW_CORE = ["pods", "pods/log", "pods/status", "configmaps", "services", "endpoints",
              "persistentvolumeclaims", "persistentvolumeclaims/status", "serviceaccounts",
              "events"]
_EDIT_CORE = ["pods", "pods/attach", "pods/exec", "pods/portforward", "configmaps",
              "secrets", "services", "persistentvolumeclaims", "serviceaccounts", "events"]
_EDIT_READ = ["secrets", "pods/attach", "pods/exec", "pods/portforward"]
_APPS_VIEW = ["deployments", "deployments/status", "deployments/scale", "daemonsets",
              "daemonsets/status", "replicasets", "replicasets/scale", "statefulsets",
              "statefulsets/scale"]
_APPS_EDIT = ["deployments", "deployments/scale", "daemonsets", "replicasets",
              "replicasets/scale", "statefulsets", "statefulsets/scale"]
_AGG = "rbac.authorization.k8s.io/aggregate-to-"

DEFAULT_RBAC_OBJECTS: list[dict[str, Any]] = [
    _role("cluster-admin", [_rule(["*"], ["*"], ["*"]),
                            {"nonResourceURLs": ["*"], "verbs": ["*"]}]),
    _role("system:discovery", [{"nonResourceURLs": [
        "/api", "/api/*", "/apis", "/apis/*", "/healthz", "/livez", "/openapi", "/openapi/*",
        "/readyz", "/version", "/version/"], "verbs": ["get"]}]),
    _role("system:public-info-viewer", [{"nonResourceURLs": [
        "/healthz", "/livez", "/readyz", "/version", "/version/"], "verbs": ["get"]}]),
    _role("system:service-account-issuer-discovery", [{"nonResourceURLs": [
        "/.well-known/openid-configuration", "/.well-known/openid-configuration/",
        "/openid/v1/jwks", "/openid/v1/jwks/"], "verbs": ["get"]}]),
    _role("system:basic-user", [
        _rule(["authorization.k8s.io"], ["selfsubjectaccessreviews", "selfsubjectrulesreviews"],
              ["create"]),
        _rule(["authentication.k8s.io"], ["selfsubjectreviews"], ["create"]),
    ]),
    _role("system:auth-delegator", [
        _rule(["authentication.k8s.io"], ["tokenreviews"], ["create"]),
        _rule(["authorization.k8s.io"], ["subjectaccessreviews"], ["create"]),
    ]),
    # The user-facing roles are empty shells that aggregate the labelled roles below (and
    # any a manifest adds with the same labels), as in Kubernetes.
    _role("admin", [], aggregate_from=[f"{_AGG}admin"]),
    _role("edit", [], labels={f"{_AGG}admin": "true"}, aggregate_from=[f"{_AGG}edit"]),
    _role("view", [], labels={f"{_AGG}edit": "true"}, aggregate_from=[f"{_AGG}view"]),
    _role("system:aggregate-to-admin", [
        _rule(["rbac.authorization.k8s.io"], ["roles", "rolebindings"], _READ + _WRITE),
        _rule(["authorization.k8s.io"], ["localsubjectaccessreviews"], ["create"]),
    ], labels={f"{_AGG}admin": "true"}),
    _role("system:aggregate-to-edit", [
        _rule([""], _EDIT_CORE, _WRITE),
        _rule([""], _EDIT_READ, _READ),
        _rule([""], ["serviceaccounts/token"], ["create"]),
        _rule(["apps"], _APPS_EDIT, _WRITE),
        _rule(["coordination.k8s.io"], ["leases"], _READ + _WRITE),
    ], labels={f"{_AGG}edit": "true"}),
    _role("system:aggregate-to-view", [
        _rule([""], [*_VIEW_CORE, "namespaces", "namespaces/status"], _READ),
        _rule(["apps"], _APPS_VIEW, _READ),
        _rule(["events.k8s.io"], ["events"], _READ),
    ], labels={f"{_AGG}view": "true"}),
    _binding("cluster-admin", "cluster-admin", ["system:masters"]),
    _binding("system:discovery", "system:discovery", ["system:authenticated"]),
    _binding("system:basic-user", "system:basic-user", ["system:authenticated"]),
    _binding("system:service-account-issuer-discovery",
             "system:service-account-issuer-discovery", ["system:serviceaccounts"]),
    _binding("system:public-info-viewer", "system:public-info-viewer",
             ["system:authenticated", "system:unauthenticated"]),
]
