"""RBAC escalation prevention, the pure part: upstream's ``Covers`` (checked against a
line-by-line port of policy_comparator.go on random rules), the refusal's wording, and
the decisions of ``check_write`` over a policy."""

from __future__ import annotations

import random
import time
from typing import Any

import pytest

from localcluster.apiserver.auth import escalation
from localcluster.apiserver.auth.escalation import (
    Policy,
    check_write,
    compact_rules,
    compact_string,
    covers,
    escalation_message,
    go_quote,
    only_gc_fields_change,
)
from localcluster.apiserver.errors import APIError

Rule = dict[str, Any]


def rule(groups: list[str], resources: list[str], verbs: list[str],
         names: list[str] | None = None) -> Rule:
    out: Rule = {"apiGroups": groups, "resources": resources, "verbs": verbs}
    if names:
        out["resourceNames"] = names
    return out


def urls(paths: list[str], verbs: list[str]) -> Rule:
    return {"nonResourceURLs": paths, "verbs": verbs}


# -- upstream's Covers, ported as written (the reference) ----------------------------------

def _breakdown(r: Rule) -> list[Rule]:
    out: list[Rule] = []
    for g in r.get("apiGroups") or []:
        for res in r.get("resources") or []:
            for v in r.get("verbs") or []:
                if r.get("resourceNames"):
                    out += [{"apiGroups": [g], "resources": [res], "verbs": [v],
                             "resourceNames": [n]} for n in r["resourceNames"]]
                else:
                    out.append({"apiGroups": [g], "resources": [res], "verbs": [v]})
    for u in r.get("nonResourceURLs") or []:
        for v in r.get("verbs") or []:
            out.append({"nonResourceURLs": [u], "verbs": [v]})
    return out


def _rule_covers(owner: Rule, sub: Rule) -> bool:
    def has_all(have: list[str], want: list[str]) -> bool:
        return set(want) <= set(have)

    def field(r: Rule, key: str) -> list[str]:
        return list(r.get(key) or [])

    verbs = "*" in field(owner, "verbs") or has_all(field(owner, "verbs"), field(sub, "verbs"))
    groups = "*" in field(owner, "apiGroups") or has_all(field(owner, "apiGroups"),
                                                         field(sub, "apiGroups"))
    resources = "*" in field(owner, "resources") or has_all(field(owner, "resources"),
                                                            field(sub, "resources"))
    url_ok = all(any(o == u or (o.endswith("*") and u.startswith(o.rstrip("*")))
                     for o in field(owner, "nonResourceURLs"))
                 for u in field(sub, "nonResourceURLs"))
    if not field(sub, "resourceNames"):
        names = not field(owner, "resourceNames")
    else:
        names = not field(owner, "resourceNames") or has_all(field(owner, "resourceNames"),
                                                             field(sub, "resourceNames"))
    return verbs and groups and resources and names and url_ok


def reference_covers(owners: list[Rule], servants: list[Rule]) -> tuple[bool, list[Rule]]:
    missing = [sub for s in servants for sub in _breakdown(s)
               if not any(_rule_covers(o, sub) for o in owners)]
    return not missing, missing


# -- Covers ---------------------------------------------------------------------------------

@pytest.mark.parametrize(("owners", "servants", "ok"), [
    # * covers any group, resource and verb
    ([rule(["*"], ["*"], ["*"])], [rule(["apps"], ["deployments"], ["delete"])], True),
    ([rule(["*"], ["*"], ["*"])], [rule(["*"], ["*"], ["*"])], True),
    # ...but only * covers a granted *
    ([rule([""], ["pods"], ["get", "list", "watch"])], [rule([""], ["pods"], ["*"])], False),
    ([rule([""], ["pods", "secrets"], ["*"])], [rule([""], ["*"], ["get"])], False),
    ([rule(["", "apps"], ["pods"], ["get"])], [rule(["*"], ["pods"], ["get"])], False),
    # the atoms of one granted rule may be covered by different held rules
    ([rule([""], ["pods"], ["get"]), rule([""], ["pods"], ["list"])],
     [rule([""], ["pods"], ["get", "list"])], True),
    # a subresource is its own resource; */scale covers only */scale
    ([rule([""], ["pods"], ["*"])], [rule([""], ["pods/exec"], ["create"])], False),
    ([rule(["apps"], ["*/scale"], ["get"])], [rule(["apps"], ["deployments/scale"], ["get"])],
     False),
    ([rule(["apps"], ["*"], ["get"])], [rule(["apps"], ["deployments/scale"], ["get"])], True),
    # resourceNames: a held rule without names covers every name...
    ([rule([""], ["configmaps"], ["get"])], [rule([""], ["configmaps"], ["get"], ["a"])], True),
    # ...one with names covers those names only, and never an atom without a name
    ([rule([""], ["configmaps"], ["get"], ["a", "b"])],
     [rule([""], ["configmaps"], ["get"], ["b"])], True),
    ([rule([""], ["configmaps"], ["get"], ["a"])],
     [rule([""], ["configmaps"], ["get"], ["a", "c"])], False),
    ([rule([""], ["configmaps"], ["get"], ["a"])], [rule([""], ["configmaps"], ["get"])], False),
    # non-resource URLs: exact, a prefix ending in *, or *
    ([urls(["/healthz"], ["get"])], [urls(["/healthz"], ["get"])], True),
    ([urls(["/apis/*"], ["get"])], [urls(["/apis/apps/v1", "/apis/"], ["get"])], True),
    ([urls(["/apis/*"], ["get"])], [urls(["/api"], ["get"])], False),
    ([urls(["*"], ["*"])], [urls(["/anything"], ["post"])], True),
    ([urls(["/healthz"], ["get"])], [urls(["/healthz"], ["post"])], False),
    # resource rules never cover URLs, nor URL rules resources
    ([rule(["*"], ["*"], ["*"])], [urls(["/healthz"], ["get"])], False),
    ([urls(["*"], ["*"])], [rule([""], ["pods"], ["get"])], False),
    # a held rule with resourceNames covers no URL atom (upstream's resourceNameMatches)
    ([{**urls(["*"], ["*"]), "resourceNames": ["x"]}], [urls(["/healthz"], ["get"])], False),
    # nothing granted, nothing held
    ([], [], True),
    ([], [rule([""], [], ["get"])], True),
    ([], [rule([""], ["pods"], ["get"])], False),
])
def test_covers(owners: list[Rule], servants: list[Rule], ok: bool) -> None:
    assert covers(owners, servants) == reference_covers(owners, servants)
    assert covers(owners, servants)[0] is ok


def test_missing_atoms_are_listed_in_upstream_breakdown_order() -> None:
    ok, missing = covers([rule([""], ["pods"], ["get"])],
                         [rule(["", "apps"], ["pods", "deployments"], ["get", "list"], ["x"]),
                          urls(["/metrics"], ["get"])])
    assert not ok
    assert missing == reference_covers([rule([""], ["pods"], ["get"])], [
        rule(["", "apps"], ["pods", "deployments"], ["get", "list"], ["x"]),
        urls(["/metrics"], ["get"])])[1]
    assert missing[0] == {"apiGroups": [""], "resources": ["pods"], "verbs": ["list"],
                          "resourceNames": ["x"]}
    assert missing[-1] == {"nonResourceURLs": ["/metrics"], "verbs": ["get"]}


def _random_rule(rng: random.Random) -> Rule:
    def pick(pool: list[str], most: int = 3) -> list[str]:
        return [rng.choice(pool) for _ in range(rng.randint(0, most))]

    if rng.random() < 0.2:
        return urls(pick(["*", "/a", "/a/*", "/a/b", "/b*", "/"]), pick(["*", "get", "post"]))
    out = rule(pick(["*", "", "apps", "x"]), pick(["*", "pods", "pods/exec", "*/scale", "cm"]),
               pick(["*", "get", "list", "bind"]))
    if rng.random() < 0.4:
        out["resourceNames"] = pick(["a", "b", "c"])
    return out


def test_covers_matches_upstream_on_random_rules() -> None:
    rng = random.Random(20240611)
    for _ in range(3000):
        owners = [_random_rule(rng) for _ in range(rng.randint(0, 4))]
        servants = [_random_rule(rng) for _ in range(rng.randint(0, 3))]
        assert covers(owners, servants) == reference_covers(owners, servants), \
            (owners, servants)


def test_huge_rules_are_decided_without_their_product() -> None:
    """upstream multiplies a rule out: 300k names of groups, resources and verbs would be
    10^15 atoms. The decision here costs what the held rules name, not the request."""
    many = [f"r{i}" for i in range(100_000)]
    servant = rule(many, many, many)
    started = time.monotonic()
    assert covers([rule(["*"], ["*"], ["*"])], [servant]) == (True, [])
    ok, missing, truncated = escalation.uncovered(
        [rule(["*"], ["*"], ["get"]), rule(many[:50], ["*"], ["*"])], [servant])
    assert not ok and truncated and 0 < len(missing) <= escalation.MAX_LISTED
    assert missing[0] == {"apiGroups": ["r50"], "resources": ["r0"], "verbs": ["r0"]}
    assert time.monotonic() - started < 20


# -- the message ------------------------------------------------------------------------------

def test_compact_rules_and_strings_as_upstream() -> None:
    missing = [rule([""], ["nodes"], ["get"]), rule([""], ["pods"], ["get"]),
               rule([""], ["nodes"], ["list"]), rule([""], ["nodes"], ["get"]),
               rule([""], ["secrets"], ["get"], ["a"]), urls(["/x"], ["get"])]
    assert sorted(compact_string(r) for r in compact_rules(missing)) == [
        '{APIGroups:[""], Resources:["nodes"], Verbs:["get" "list" "get"]}',
        '{APIGroups:[""], Resources:["pods"], Verbs:["get"]}',
        '{APIGroups:[""], Resources:["secrets"], ResourceNames:["a"], Verbs:["get"]}',
        '{NonResourceURLs:["/x"], Verbs:["get"]}',
    ]


def test_go_quote() -> None:
    assert go_quote('a"b\\c') == '"a\\"b\\\\c"'
    assert go_quote("\n\t\x01\x7f\u00e9\u2028") == '"\\n\\t\\x01\\x7f\u00e9\\u2028"'


def test_escalation_message_wording() -> None:
    text = escalation_message(
        "system:serviceaccount:alice:nsadmin",
        ("system:serviceaccounts", "system:serviceaccounts:alice", "system:authenticated"),
        [rule(["*"], ["*"], ["*"]), urls(["*"], ["*"])],
        resolution_errors=['roles.rbac.authorization.k8s.io "gone" not found'])
    assert text == (
        'user "system:serviceaccount:alice:nsadmin" (groups=["system:serviceaccounts" '
        '"system:serviceaccounts:alice" "system:authenticated"]) is attempting to grant RBAC '
        'permissions not currently held:\n{APIGroups:["*"], Resources:["*"], Verbs:["*"]}\n'
        '{NonResourceURLs:["*"], Verbs:["*"]}; resolution errors: '
        '[roles.rbac.authorization.k8s.io "gone" not found]')


# -- check_write over a policy ----------------------------------------------------------------

USER = "system:serviceaccount:alice:nsadmin"
GROUPS = ("system:serviceaccounts", "system:serviceaccounts:alice", "system:authenticated")
REF = {"apiGroup": "rbac.authorization.k8s.io"}


def _policy(ns_rules: list[Rule], cluster_rules: list[Rule] | None = None) -> Policy:
    sa = [{"kind": "ServiceAccount", "name": "nsadmin", "namespace": "alice"}]
    return Policy(
        roles=[{"metadata": {"name": "mine", "namespace": "alice"}, "rules": ns_rules}],
        cluster_roles=[
            {"metadata": {"name": "cluster-admin"},
             "rules": [rule(["*"], ["*"], ["*"]), urls(["*"], ["*"])]},
            {"metadata": {"name": "cluster-bits"}, "rules": cluster_rules or []},
            {"metadata": {"name": "agg"}, "rules": [],
             "aggregationRule": {"clusterRoleSelectors": [{"matchLabels": {"x": "y"}}]}},
            {"metadata": {"name": "aggregated", "labels": {"x": "y"}},
             "rules": [rule([""], ["secrets"], ["get"])]},
        ],
        role_bindings=[{"metadata": {"name": "b", "namespace": "alice"},
                        "roleRef": {**REF, "kind": "Role", "name": "mine"}, "subjects": sa}],
        cluster_role_bindings=[{"metadata": {"name": "c"},
                                "roleRef": {**REF, "kind": "ClusterRole",
                                            "name": "cluster-bits"}, "subjects": sa}])


def _write(policy: Policy, resource: str, obj: Rule, *, namespace: str = "alice",
           old: Rule | None = None, groups: tuple[str, ...] = GROUPS) -> APIError | None:
    try:
        check_write(policy, user=USER, groups=groups, resource=resource, namespace=namespace,
                    url_name="" if old is None else obj["metadata"]["name"], obj=obj, old=old)
    except APIError as err:
        return err
    return None


def _role(name: str, rules: list[Rule], **extra: Any) -> Rule:
    return {"metadata": {"name": name}, "rules": rules, **extra}


def _binding(kind: str, name: str) -> Rule:
    return {"metadata": {"name": "x"}, "roleRef": {**REF, "kind": kind, "name": name},
            "subjects": [{"kind": "User", "name": "someone"}]}


def test_role_with_rules_held_in_the_namespace_passes_others_are_refused() -> None:
    policy = _policy([rule([""], ["pods"], ["get", "list"])])
    assert _write(policy, "roles", _role("r", [rule([""], ["pods"], ["get"])])) is None
    err = _write(policy, "roles", _role("r", [rule([""], ["pods"], ["get", "delete"])]))
    assert err is not None and err.code == 403
    assert err.message.startswith('roles.rbac.authorization.k8s.io "r" is forbidden: user ')
    assert err.message.endswith('not currently held:\n'
                                '{APIGroups:[""], Resources:["pods"], Verbs:["delete"]}')
    # a Role of another namespace is checked against what the user holds there
    assert _write(policy, "roles", _role("r", [rule([""], ["pods"], ["get"])]),
                  namespace="bob") is not None
    # members of system:masters pass
    assert _write(policy, "roles", _role("r", [rule(["*"], ["*"], ["*"])]),
                  groups=("system:masters",)) is None


def test_cluster_roles_count_cluster_wide_rules_only() -> None:
    policy = _policy([rule([""], ["pods"], ["get"])], [rule([""], ["nodes"], ["get"])])
    assert _write(policy, "clusterroles", _role("c", [rule([""], ["nodes"], ["get"])]),
                  namespace="") is None
    err = _write(policy, "clusterroles", _role("c", [rule([""], ["pods"], ["get"])]),
                 namespace="")
    assert err is not None and err.code == 403
    assert err.message.startswith('clusterroles.rbac.authorization.k8s.io "c" is forbidden')


def test_escalate_lets_any_rule_through_in_its_scope() -> None:
    escalate = rule(["rbac.authorization.k8s.io"], ["roles"], ["escalate"])
    policy = _policy([escalate])
    assert _write(policy, "roles", _role("r", [rule(["*"], ["*"], ["*"])])) is None
    assert _write(policy, "clusterroles", _role("c", [rule(["*"], ["*"], ["*"])]),
                  namespace="") is not None
    # escalate limited to names never matches a create (no name in the URL)...
    named = _policy([rule(["rbac.authorization.k8s.io"], ["roles"], ["escalate"], ["r"])])
    assert _write(named, "roles", _role("r", [rule(["*"], ["*"], ["*"])])) is not None
    # ...but does an update of that Role
    old = _role("r", [])
    assert _write(named, "roles", _role("r", [rule(["*"], ["*"], ["*"])]), old=old) is None


def test_aggregation_rule_needs_escalate_or_everything() -> None:
    policy = _policy([], [rule(["rbac.authorization.k8s.io"], ["clusterroles"], ["create"])])
    agg = _role("c", [], aggregationRule={"clusterRoleSelectors": [
        {"matchLabels": {"x": "y"}}]})
    err = _write(policy, "clusterroles", agg, namespace="")
    assert err is not None and err.message == (
        'clusterroles.rbac.authorization.k8s.io "c" is forbidden: must have cluster-admin '
        'privileges to use the aggregationRule')
    # removing it is a change of it too
    err = _write(policy, "clusterroles", _role("c", []), namespace="", old=agg)
    assert err is not None and "aggregationRule" in err.message
    everything = _policy([], [rule(["*"], ["*"], ["*"]), urls(["*"], ["*"])])
    assert _write(everything, "clusterroles", agg, namespace="") is None
    escalates = _policy([], [rule(["rbac.authorization.k8s.io"], ["clusterroles"],
                                  ["escalate"])])
    assert _write(escalates, "clusterroles", agg, namespace="") is None


def test_bindings_need_the_roles_rules_or_bind() -> None:
    policy = _policy([rule([""], ["secrets"], ["get"])])
    assert _write(policy, "rolebindings", _binding("Role", "mine")) is None
    # an aggregated ClusterRole's rules are the ones it gathers
    assert _write(policy, "rolebindings", _binding("ClusterRole", "agg")) is None
    err = _write(policy, "rolebindings", _binding("ClusterRole", "cluster-admin"))
    assert err is not None and err.code == 403
    assert err.message.startswith('rolebindings.rbac.authorization.k8s.io "x" is forbidden')
    # a role that does not exist: 404, as upstream's rule resolver answers
    err = _write(policy, "rolebindings", _binding("Role", "nope"))
    assert err is not None and (err.code, err.message) == (
        404, 'roles.rbac.authorization.k8s.io "nope" not found')
    # bind, on that role's name, in the binding's namespace
    binder = _policy([rule(["rbac.authorization.k8s.io"], ["clusterroles"], ["bind"],
                           ["cluster-admin"])])
    assert _write(binder, "rolebindings", _binding("ClusterRole", "cluster-admin")) is None
    assert _write(binder, "rolebindings", _binding("ClusterRole", "agg")) is not None
    assert _write(binder, "clusterrolebindings", _binding("ClusterRole", "cluster-admin"),
                  namespace="") is not None


def test_an_update_of_finalizers_or_owners_only_is_not_checked() -> None:
    policy = _policy([])
    old = {"metadata": {"name": "r", "uid": "u", "resourceVersion": "3"},
           "rules": [rule(["*"], ["*"], ["*"])]}
    new = {"metadata": {"name": "r", "finalizers": ["x"],
                        "ownerReferences": [{"uid": "o"}]},
           "rules": [rule(["*"], ["*"], ["*"])]}
    assert only_gc_fields_change(new, old)
    assert _write(policy, "roles", new, old=old) is None
    relabelled = {**new, "metadata": {**new["metadata"], "labels": {"a": "b"}}}
    assert not only_gc_fields_change(relabelled, old)
    assert _write(policy, "roles", relabelled, old=old) is not None


def test_bindings_to_missing_roles_are_named_in_the_refusal() -> None:
    """upstream's rule resolver reports the roles it could not read ("resolution
    errors") after the rules not held."""
    policy = _policy([rule([""], ["pods"], ["get"])])
    dangling = {"metadata": {"name": "d", "namespace": "alice"},
                "roleRef": {**REF, "kind": "Role", "name": "gone"},
                "subjects": [{"kind": "ServiceAccount", "name": "nsadmin"}]}
    policy = Policy(policy.roles, policy.cluster_roles, [*policy.role_bindings, dangling],
                    policy.cluster_role_bindings)
    held, errors = policy.rules_for(USER, GROUPS, "alice")
    assert held == [rule([""], ["pods"], ["get"])]
    assert errors == ['roles.rbac.authorization.k8s.io "gone" not found']
    assert policy.rules_for(USER, GROUPS, "") == ([], [])
    err = _write(policy, "roles", _role("r", [rule([""], ["pods"], ["delete"])]))
    assert err is not None and err.message.endswith(
        '{APIGroups:[""], Resources:["pods"], Verbs:["delete"]}; resolution errors: '
        '[roles.rbac.authorization.k8s.io "gone" not found]')
