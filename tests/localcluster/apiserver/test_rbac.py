"""RBAC: rule matching, bindings, aggregation, defaults and Kubernetes' 403 text."""

from __future__ import annotations

from typing import Any

import pytest

from localcluster.apiserver.auth.rbac import (
    DEFAULT_RBAC_OBJECTS,
    Attributes,
    attributes_from_review,
    authorize,
    cluster_role_rules,
    forbidden_message,
    rule_allows,
)

SA = "system:serviceaccount:team:builder"
SA_GROUPS = ("system:serviceaccounts", "system:serviceaccounts:team", "system:authenticated")


def _meta(name: str, namespace: str = "", labels: dict[str, str] | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name}
    if namespace:
        meta["namespace"] = namespace
    if labels:
        meta["labels"] = labels
    return meta


def role(name: str, namespace: str, rules: list[dict[str, Any]]) -> dict[str, Any]:
    return {"kind": "Role", "metadata": _meta(name, namespace), "rules": rules}


def cluster_role(name: str, rules: list[dict[str, Any]], labels: dict[str, str] | None = None,
                 aggregate: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    obj: dict[str, Any] = {"kind": "ClusterRole", "metadata": _meta(name, labels=labels),
                           "rules": rules}
    if aggregate is not None:
        obj["aggregationRule"] = {"clusterRoleSelectors": aggregate}
    return obj


def binding(name: str, namespace: str, ref_kind: str, ref: str,
            subjects: list[dict[str, Any]]) -> dict[str, Any]:
    kind = "RoleBinding" if namespace else "ClusterRoleBinding"
    return {"kind": kind, "metadata": _meta(name, namespace),
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": ref_kind, "name": ref},
            "subjects": subjects}


def sa_subject(name: str = "builder", namespace: str | None = "team") -> dict[str, Any]:
    subject = {"kind": "ServiceAccount", "name": name}
    if namespace is not None:
        subject["namespace"] = namespace
    return subject


ROLES = [
    role("pod-reader", "team", [{"apiGroups": [""], "resources": ["pods", "pods/log"],
                                 "verbs": ["get", "list", "watch"]}]),
    role("one-cm", "team", [{"apiGroups": [""], "resources": ["configmaps"],
                             "resourceNames": ["settings"], "verbs": ["get", "update"]}]),
    role("other-ns", "elsewhere", [{"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}]),
]
CLUSTER_ROLES = [
    cluster_role("dv-source", [{"apiGroups": ["cdi.kubevirt.io"],
                                "resources": ["datavolumes/source"], "verbs": ["create"]}]),
    cluster_role("scaler", [{"apiGroups": ["apps"], "resources": ["*/scale"],
                             "verbs": ["update"]}]),
    cluster_role("pvc-reader", [{"apiGroups": [""], "resources": ["persistentvolumeclaims"],
                                 "verbs": ["list"]}]),
    cluster_role("node-reader", [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["get"]}]),
    cluster_role("health", [{"nonResourceURLs": ["/healthz", "/metrics/*"], "verbs": ["get"]}]),
    cluster_role("agg", [], aggregate=[{"matchLabels": {"agg": "yes"}}]),
    cluster_role("agg-piece", [{"apiGroups": ["storage.k8s.io"], "resources": ["storageclasses"],
                                "verbs": ["list"]}], labels={"agg": "yes"}),
    cluster_role("agg-other", [{"apiGroups": [""], "resources": ["secrets"],
                                "verbs": ["list"]}], labels={"agg": "no"}),
    cluster_role("bad-agg", [], aggregate=[{"matchLabels": {"bad key!": "x"}}]),
]
ROLE_BINDINGS = [
    binding("read-pods", "team", "Role", "pod-reader", [sa_subject()]),
    binding("settings", "team", "Role", "one-cm", [sa_subject(namespace=None)]),
    binding("clone-src", "golden", "ClusterRole", "dv-source", [sa_subject()]),
    binding("wrong-ns-role", "team", "Role", "other-ns", [sa_subject()]),  # Role not in team
    binding("missing", "team", "ClusterRole", "no-such-role", [sa_subject()]),
    binding("alice-scaler", "team", "ClusterRole", "scaler",
            [{"kind": "User", "name": "alice"}]),
    binding("devs-agg", "team", "ClusterRole", "agg", [{"kind": "Group", "name": "devs"}]),
    binding("bad-agg", "team", "ClusterRole", "bad-agg", [{"kind": "Group", "name": "devs"}]),
]
CLUSTER_ROLE_BINDINGS = [
    binding("pvc-everywhere", "", "ClusterRole", "pvc-reader", [{"kind": "User",
                                                                 "name": "auditor"}]),
    binding("nodes", "", "ClusterRole", "node-reader",
            [{"kind": "Group", "name": "system:serviceaccounts:team"}]),
    binding("health", "", "ClusterRole", "health", [{"kind": "Group",
                                                     "name": "system:authenticated"}]),
]


def _sa(**kw: Any) -> Attributes:
    return Attributes(user=SA, groups=SA_GROUPS, **kw)


CASES: list[tuple[str, Attributes, bool, str]] = [
    ("role grants list pods", _sa(verb="list", resource="pods", namespace="team"), True,
     'RBAC: allowed by RoleBinding "read-pods/team" of Role "pod-reader" to ServiceAccount '
     '"builder/team"'),
    ("role grants the log subresource", _sa(verb="get", resource="pods", subresource="log",
                                            name="p", namespace="team"), True, "read-pods"),
    ("subresource not listed", _sa(verb="get", resource="pods", subresource="exec",
                                   name="p", namespace="team"), False, ""),
    ("verb not listed", _sa(verb="delete", resource="pods", name="p", namespace="team"),
     False, ""),
    ("role only in its namespace", _sa(verb="list", resource="pods", namespace="other"),
     False, ""),
    ("cluster-wide list not granted by a RoleBinding", _sa(verb="list", resource="pods"),
     False, ""),
    ("resourceNames allow the named object",
     _sa(verb="get", resource="configmaps", name="settings", namespace="team"), True,
     "settings"),
    ("resourceNames deny other names",
     _sa(verb="get", resource="configmaps", name="other", namespace="team"), False, ""),
    ("resourceNames never allow list",
     _sa(verb="list", resource="configmaps", namespace="team"), False, ""),
    ("RoleBinding to a ClusterRole grants in the binding's namespace",
     _sa(verb="create", api_group="cdi.kubevirt.io", resource="datavolumes",
         subresource="source", namespace="golden"), True,
     'RoleBinding "clone-src/golden" of ClusterRole "dv-source"'),
    ("... and not in another namespace",
     _sa(verb="create", api_group="cdi.kubevirt.io", resource="datavolumes",
         subresource="source", namespace="team"), False, ""),
    ("wrong api group", _sa(verb="create", api_group="other.io", resource="datavolumes",
                            subresource="source", namespace="golden"), False, ""),
    ("a Role of another namespace is not used",
     _sa(verb="delete", resource="secrets", name="s", namespace="team"), False, ""),
    ("group subject in a ClusterRoleBinding", _sa(verb="get", resource="nodes", name="n1"),
     True, 'ClusterRoleBinding "nodes" of ClusterRole "node-reader" to Group '
           '"system:serviceaccounts:team"'),
    ("*/scale matches any resource's scale",
     Attributes(user="alice", verb="update", api_group="apps", resource="deployments",
                subresource="scale", name="d", namespace="team"), True, "alice-scaler"),
    ("*/scale does not match the resource itself",
     Attributes(user="alice", verb="update", api_group="apps", resource="deployments",
                name="d", namespace="team"), False, ""),
    ("user subject must match exactly",
     Attributes(user="alicia", verb="update", api_group="apps", resource="deployments",
                subresource="scale", name="d", namespace="team"), False, ""),
    ("aggregated ClusterRole gets the labelled rules",
     Attributes(user="bob", groups=("devs",), verb="list", api_group="storage.k8s.io",
                resource="storageclasses", namespace="team"), True, 'ClusterRole "agg"'),
    ("aggregation skips non-matching labels",
     Attributes(user="bob", groups=("devs",), verb="list", resource="secrets",
                namespace="team"), False, ""),
    ("ClusterRoleBinding grants in every namespace",
     Attributes(user="auditor", verb="list", resource="persistentvolumeclaims",
                namespace="anywhere"), True, 'ClusterRoleBinding "pvc-everywhere"'),
    ("... and cluster-wide",
     Attributes(user="auditor", verb="list", resource="persistentvolumeclaims"), True,
     "pvc-everywhere"),
    ("non-resource URL exact", _sa(verb="get", non_resource_path="/healthz"), True, "health"),
    ("non-resource URL prefix", _sa(verb="get", non_resource_path="/metrics/cadvisor"), True,
     "health"),
    ("non-resource URL prefix needs the star",
     _sa(verb="get", non_resource_path="/metricsX"), False, ""),
    ("non-resource verb", _sa(verb="post", non_resource_path="/healthz"), False, ""),
    ("system:masters is all-powerful",
     Attributes(user="admin", groups=("system:masters",), verb="delete", resource="nodes",
                name="n"), True, "system:masters"),
    ("anonymous gets nothing", Attributes(user="system:anonymous", verb="get",
                                          resource="pods", name="p", namespace="team"),
     False, ""),
]


@pytest.mark.parametrize(("label", "attrs", "allowed", "reason"), CASES,
                         ids=[c[0] for c in CASES])
def test_authorize(label: str, attrs: Attributes, allowed: bool, reason: str) -> None:
    decision = authorize(attrs, roles=ROLES, cluster_roles=CLUSTER_ROLES,
                         role_bindings=ROLE_BINDINGS, cluster_role_bindings=CLUSTER_ROLE_BINDINGS)
    assert decision.allowed is allowed, decision
    if allowed:
        assert reason in decision.reason
    else:
        assert decision.reason == ("RBAC: no RoleBinding or ClusterRoleBinding grants this "
                                   "request")


@pytest.mark.parametrize(("rule", "attrs", "expected"), [
    ({"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"]},
     Attributes(user="u", verb="watch", api_group="x.io", resource="things"), True),
    ({"verbs": ["get"], "apiGroups": [""], "resources": ["pods/*"]},
     Attributes(user="u", verb="get", resource="pods", subresource="log"), False),
    ({"verbs": ["get"], "apiGroups": [""], "resources": ["pods"]},
     Attributes(user="u", verb="get", non_resource_path="/api"), False),
    ({"verbs": ["get"], "nonResourceURLs": ["*"]},
     Attributes(user="u", verb="get", non_resource_path="/anything"), True),
    ({"verbs": ["get"]}, Attributes(user="u", verb="get", resource="pods"), False),
])
def test_rule_allows(rule: dict[str, Any], attrs: Attributes, expected: bool) -> None:
    assert rule_allows(rule, attrs) is expected


def test_cluster_role_rules_aggregation_is_transitive_and_cycle_safe() -> None:
    roles = [
        cluster_role("a", [{"verbs": ["get"]}], labels={"l": "a"},
                     aggregate=[{"matchLabels": {"l": "b"}}]),
        cluster_role("b", [{"verbs": ["list"]}], labels={"l": "b"},
                     aggregate=[{"matchLabels": {"l": "a"}}, {"matchLabels": {"l": "c"}}]),
        cluster_role("c", [{"verbs": ["watch"]}], labels={"l": "c"}),
    ]
    rules = cluster_role_rules("a", roles)
    assert rules is not None
    assert sorted(r["verbs"][0] for r in rules) == ["get", "list", "watch"]
    assert cluster_role_rules("nope", roles) is None


@pytest.mark.parametrize(("attrs", "message"), [
    (_sa(verb="list", resource="pods", namespace="team"),
     'pods is forbidden: User "system:serviceaccount:team:builder" cannot list resource '
     '"pods" in API group "" in the namespace "team"'),
    (_sa(verb="get", api_group="apps", resource="deployments", name="d", namespace="team"),
     'deployments.apps "d" is forbidden: User "system:serviceaccount:team:builder" cannot get '
     'resource "deployments" in API group "apps" in the namespace "team"'),
    (_sa(verb="create", api_group="cdi.kubevirt.io", resource="datavolumes",
         subresource="source", namespace="golden"),
     'datavolumes.cdi.kubevirt.io is forbidden: User "system:serviceaccount:team:builder" '
     'cannot create resource "datavolumes/source" in API group "cdi.kubevirt.io" in the '
     'namespace "golden"'),
    (_sa(verb="list", resource="nodes"),
     'nodes is forbidden: User "system:serviceaccount:team:builder" cannot list resource '
     '"nodes" in API group "" at the cluster scope'),
    (_sa(verb="get", non_resource_path="/metrics"),
     'forbidden: User "system:serviceaccount:team:builder" cannot get path "/metrics"'),
])
def test_forbidden_message(attrs: Attributes, message: str) -> None:
    assert forbidden_message(attrs) == message


def _defaults(kind: str) -> list[dict[str, Any]]:
    return [o for o in DEFAULT_RBAC_OBJECTS if o["kind"] == kind]


@pytest.mark.parametrize(("attrs", "allowed"), [
    (Attributes(user="u", groups=("system:authenticated",), verb="get",
                non_resource_path="/apis/apps/v1"), True),
    (Attributes(user="u", groups=("system:authenticated",), verb="get",
                non_resource_path="/version"), True),
    (Attributes(user="u", groups=("system:authenticated",), verb="get",
                non_resource_path="/openapi/v3"), True),
    (Attributes(user="u", groups=("system:unauthenticated",), verb="get",
                non_resource_path="/version"), True),
    (Attributes(user="u", groups=("system:unauthenticated",), verb="get",
                non_resource_path="/apis"), False),
    (Attributes(user="u", groups=("system:authenticated",), verb="create",
                api_group="authorization.k8s.io", resource="selfsubjectaccessreviews"), True),
    (Attributes(user="u", groups=("system:authenticated",), verb="list", resource="pods",
                namespace="default"), False),
    (Attributes(user="root", groups=("system:masters",), verb="escalate",
                api_group="rbac.authorization.k8s.io", resource="clusterroles"), True),
])
def test_default_policy(attrs: Attributes, allowed: bool) -> None:
    decision = authorize(attrs, roles=[], cluster_roles=_defaults("ClusterRole"),
                         role_bindings=[],
                         cluster_role_bindings=_defaults("ClusterRoleBinding"))
    assert decision.allowed is allowed


def test_default_cluster_admin_binding_without_superuser_shortcut() -> None:
    # The cluster-admin binding itself grants everything to system:masters.
    crb = next(o for o in DEFAULT_RBAC_OBJECTS if o["metadata"]["name"] == "cluster-admin"
               and o["kind"] == "ClusterRoleBinding")
    rules = cluster_role_rules("cluster-admin", _defaults("ClusterRole"))
    assert rules is not None
    assert crb["subjects"][0]["name"] == "system:masters"
    assert all(rule_allows(rules[0], Attributes(user="x", verb=v, api_group="g", resource="r"))
               for v in ("get", "delete", "impersonate"))


def test_default_aggregated_roles() -> None:
    roles = _defaults("ClusterRole")
    admin, edit, view = (cluster_role_rules(n, roles) for n in ("admin", "edit", "view"))
    assert admin is not None and edit is not None and view is not None
    assert len(view) < len(edit) < len(admin)
    rb = binding("team-edit", "team", "ClusterRole", "edit", [sa_subject()])
    decide = lambda verb: authorize(  # noqa: E731
        _sa(verb=verb, resource="configmaps", name="c", namespace="team"), roles=[],
        cluster_roles=roles, role_bindings=[rb], cluster_role_bindings=[]).allowed
    assert decide("get") and decide("patch") and not decide("escalate")


def test_default_objects_are_well_formed() -> None:
    names = [(o["kind"], o["metadata"]["name"]) for o in DEFAULT_RBAC_OBJECTS]
    assert len(names) == len(set(names))
    for obj in DEFAULT_RBAC_OBJECTS:
        assert obj["apiVersion"] == "rbac.authorization.k8s.io/v1"
        if obj["kind"] == "ClusterRoleBinding":
            assert any(r["metadata"]["name"] == obj["roleRef"]["name"]
                       for r in _defaults("ClusterRole"))


def test_attributes_from_review() -> None:
    spec = {"user": SA, "groups": list(SA_GROUPS), "resourceAttributes": {
        "namespace": "golden", "verb": "create", "group": "cdi.kubevirt.io",
        "resource": "datavolumes", "subresource": "source", "name": "x"}}
    attrs = attributes_from_review(spec)
    assert attrs == _sa(verb="create", api_group="cdi.kubevirt.io", resource="datavolumes",
                        subresource="source", name="x", namespace="golden")
    decision = authorize(attrs, roles=ROLES, cluster_roles=CLUSTER_ROLES,
                         role_bindings=ROLE_BINDINGS,
                         cluster_role_bindings=CLUSTER_ROLE_BINDINGS)
    assert decision.allowed
    self_review = attributes_from_review(
        {"nonResourceAttributes": {"path": "/healthz", "verb": "get"}}, user="me",
        groups=["g"])
    assert self_review == Attributes(user="me", groups=("g",), verb="get",
                                     non_resource_path="/healthz")
