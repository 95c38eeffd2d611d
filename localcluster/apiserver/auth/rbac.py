"""RBAC authorization: Roles, ClusterRoles and their bindings, evaluated per request.

Pure: the server passes the current RBAC objects in and gets a :class:`Decision` back,
for requests (service-account tokens) and for SubjectAccessReviews alike, so both answer
from the same rules. Semantics follow Kubernetes' RBAC authorizer: ClusterRoleBindings
grant cluster-wide; RoleBindings grant inside their namespace, to a Role there or to a
ClusterRole; ``*`` wildcards verbs, groups and resources; ``*/scale`` matches a
subresource of any resource; resourceNames restricts to named objects (so never matches
list/create); nonResourceURLs may end in ``*``; ClusterRoles with an aggregationRule
gather the rules of the ClusterRoles their selectors match. Members of ``system:masters``
are allowed everything, as in kube-apiserver. Default roles and bindings are in
:mod:`.rbac_defaults`. :func:`rules_for` lists the rules a user holds, which
:mod:`.escalation` compares with what a Role or binding would grant.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..selectors import SelectorError, label_selector_from_dict
from .rbac_defaults import DEFAULT_RBAC_OBJECTS

__all__ = [
    "DEFAULT_RBAC_OBJECTS",
    "Attributes",
    "Decision",
    "attributes_from_review",
    "authorize",
    "forbidden_message",
    "rules_for",
]

SUPERUSER_GROUP = "system:masters"
Obj = Mapping[str, Any]


@dataclass(frozen=True)
class Attributes:
    """What a request asks to do, by whom (kube-apiserver's authorizer attributes)."""

    user: str
    groups: tuple[str, ...] = ()
    verb: str = "get"
    api_group: str = ""
    resource: str = ""
    subresource: str = ""
    name: str = ""
    namespace: str = ""
    non_resource_path: str = ""

    @property
    def is_resource_request(self) -> bool:
        return not self.non_resource_path


@dataclass(frozen=True)
class Decision:
    """The answer and why (the ``reason`` of a SubjectAccessReview status)."""

    allowed: bool
    reason: str


def _name(obj: Obj) -> str:
    return str((obj.get("metadata") or {}).get("name", ""))


def _namespace(obj: Obj) -> str:
    return str((obj.get("metadata") or {}).get("namespace", ""))


def _subject_matches(subject: Obj, attrs: Attributes, binding_namespace: str) -> bool:
    kind, name = subject.get("kind"), subject.get("name")
    if kind == "User":
        return bool(name == attrs.user)
    if kind == "Group":
        return name in attrs.groups
    if kind == "ServiceAccount":
        namespace = subject.get("namespace") or binding_namespace
        return attrs.user == f"system:serviceaccount:{namespace}:{name}"
    return False


def _describe_subject(subject: Obj, binding_namespace: str) -> str:
    if subject.get("kind") == "ServiceAccount":
        namespace = subject.get("namespace") or binding_namespace
        return f'ServiceAccount "{subject.get("name")}/{namespace}"'
    return f'{subject.get("kind")} "{subject.get("name")}"'


def _in(value: str, allowed: Iterable[str]) -> bool:
    listed = list(allowed or [])
    return "*" in listed or value in listed


def _resource_matches(rule: Obj, attrs: Attributes) -> bool:
    combined = attrs.resource + (f"/{attrs.subresource}" if attrs.subresource else "")
    for resource in rule.get("resources") or []:
        if resource in ("*", combined):
            return True
        if attrs.subresource and resource == f"*/{attrs.subresource}":
            return True
    return False


def _path_matches(rule: Obj, path: str) -> bool:
    for pattern in rule.get("nonResourceURLs") or []:
        if pattern == "*" or pattern == path:
            return True
        if pattern.endswith("*") and path.startswith(pattern[:-1]):
            return True
    return False


def rule_allows(rule: Obj, attrs: Attributes) -> bool:
    """Whether one PolicyRule covers the request."""
    if not _in(attrs.verb, rule.get("verbs") or []):
        return False
    if not attrs.is_resource_request:
        return _path_matches(rule, attrs.non_resource_path)
    if not _in(attrs.api_group, rule.get("apiGroups") or []):
        return False
    if not _resource_matches(rule, attrs):
        return False
    names = rule.get("resourceNames") or []
    return not names or attrs.name in names


def cluster_role_rules(name: str, cluster_roles: Sequence[Obj]) -> list[Obj] | None:
    """The effective rules of ClusterRole ``name`` (with aggregation); None if absent."""
    by_name = {_name(r): r for r in cluster_roles}
    if name not in by_name:
        return None
    rules: list[Obj] = []
    seen: set[str] = set()

    def collect(role: Obj) -> None:
        role_name = _name(role)
        if role_name in seen:
            return
        seen.add(role_name)
        rules.extend(role.get("rules") or [])
        aggregation = role.get("aggregationRule") or {}
        for selector_dict in aggregation.get("clusterRoleSelectors") or []:
            try:
                selector = label_selector_from_dict(selector_dict)
            except SelectorError:
                continue  # an invalid selector aggregates nothing, as upstream
            for other in cluster_roles:
                labels = (other.get("metadata") or {}).get("labels") or {}
                if _name(other) != role_name and selector.matches(labels):
                    collect(other)

    collect(by_name[name])
    return rules


def _role_rules(binding: Obj, roles: Sequence[Obj],
                cluster_roles: Sequence[Obj]) -> tuple[str, list[Obj] | None]:
    ref = binding.get("roleRef") or {}
    kind, name = ref.get("kind"), str(ref.get("name", ""))
    if kind == "ClusterRole":
        return f'ClusterRole "{name}"', cluster_role_rules(name, cluster_roles)
    if kind == "Role":
        namespace = _namespace(binding)
        role = next((r for r in roles if _name(r) == name and _namespace(r) == namespace), None)
        return f'Role "{name}"', None if role is None else list(role.get("rules") or [])
    return f'{kind} "{name}"', None


def rules_for(
    user: str,
    groups: Sequence[str],
    namespace: str,
    *,
    roles: Sequence[Obj],
    cluster_roles: Sequence[Obj],
    role_bindings: Sequence[Obj],
    cluster_role_bindings: Sequence[Obj],
) -> tuple[list[Obj], list[str]]:
    """Every rule ``user`` holds in ``namespace`` ("" for cluster-wide only): those of the
    ClusterRoleBindings naming it, then of that namespace's RoleBindings, as upstream's
    ``RulesFor``; and the bindings' role references that do not resolve (upstream's
    resolution errors, e.g. ``roles.rbac.authorization.k8s.io "x" not found``).
    Membership of ``system:masters`` adds nothing here: the callers check it first."""
    attrs = Attributes(user=user, groups=tuple(groups), namespace=namespace)
    candidates: list[tuple[Obj, str]] = [(b, "") for b in cluster_role_bindings]
    if namespace:
        candidates += [(b, namespace) for b in role_bindings if _namespace(b) == namespace]
    rules: list[Obj] = []
    errors: list[str] = []
    for binding, binding_namespace in candidates:
        if not any(_subject_matches(s, attrs, binding_namespace or _namespace(binding))
                   for s in binding.get("subjects") or []):
            continue
        _, found = _role_rules(binding, roles, cluster_roles)
        if found is not None:
            rules.extend(found)
            continue
        ref = binding.get("roleRef") or {}
        kind, name = ref.get("kind"), ref.get("name", "")
        errors.append(f'{"roles" if kind == "Role" else "clusterroles"}.'
                      f'rbac.authorization.k8s.io "{name}" not found'
                      if kind in ("Role", "ClusterRole")
                      else f'unsupported role reference kind: "{kind}"')
    return rules, errors


def authorize(
    attrs: Attributes,
    *,
    roles: Sequence[Obj],
    cluster_roles: Sequence[Obj],
    role_bindings: Sequence[Obj],
    cluster_role_bindings: Sequence[Obj],
) -> Decision:
    """Allow if any binding that names the user (or a group of it) grants the request."""
    if SUPERUSER_GROUP in attrs.groups:
        return Decision(True, f'allowed: member of group "{SUPERUSER_GROUP}"')
    candidates: list[tuple[str, Obj, str]] = [
        (f'ClusterRoleBinding "{_name(b)}"', b, "") for b in cluster_role_bindings
    ]
    if attrs.is_resource_request and attrs.namespace:
        candidates += [
            (f'RoleBinding "{_name(b)}/{attrs.namespace}"', b, attrs.namespace)
            for b in role_bindings
            if _namespace(b) == attrs.namespace
        ]
    for label, binding, namespace in candidates:
        subject = next((s for s in binding.get("subjects") or []
                        if _subject_matches(s, attrs, namespace or _namespace(binding))), None)
        if subject is None:
            continue
        role_label, rules = _role_rules(binding, roles, cluster_roles)
        if rules is None:
            continue
        if any(rule_allows(rule, attrs) for rule in rules):
            return Decision(True, f"RBAC: allowed by {label} of {role_label} to "
                                  f"{_describe_subject(subject, namespace)}")
    return Decision(False, "RBAC: no RoleBinding or ClusterRoleBinding grants this request")


def forbidden_message(attrs: Attributes) -> str:
    """The message of kube-apiserver's 403 for a denied request."""
    user = attrs.user
    if not attrs.is_resource_request:
        return f'forbidden: User "{user}" cannot {attrs.verb} path "{attrs.non_resource_path}"'
    resource = attrs.resource + (f"/{attrs.subresource}" if attrs.subresource else "")
    scope = (f'in the namespace "{attrs.namespace}"' if attrs.namespace
             else "at the cluster scope")
    reason = (f'User "{user}" cannot {attrs.verb} resource "{resource}" in API group '
              f'"{attrs.api_group}" {scope}')
    qualified = attrs.resource + (f".{attrs.api_group}" if attrs.api_group else "")
    subject = f'{qualified} "{attrs.name}"' if attrs.name else qualified
    return f"{subject} is forbidden: {reason}"


def attributes_from_review(spec: Obj, *, user: str = "",
                           groups: Sequence[str] = ()) -> Attributes:
    """Attributes from a (Self/Local)SubjectAccessReview ``spec``; ``user``/``groups``
    fill in for SelfSubjectAccessReview, which names no user."""
    resource = spec.get("resourceAttributes") or {}
    non_resource = spec.get("nonResourceAttributes") or {}
    who = str(spec.get("user") or user)
    member_of = tuple(spec.get("groups") or groups)
    if non_resource and not resource:
        return Attributes(user=who, groups=member_of, verb=str(non_resource.get("verb", "")),
                          non_resource_path=str(non_resource.get("path", "")))
    return Attributes(
        user=who, groups=member_of, verb=str(resource.get("verb", "")),
        api_group=str(resource.get("group", "")), resource=str(resource.get("resource", "")),
        subresource=str(resource.get("subresource", "")), name=str(resource.get("name", "")),
        namespace=str(resource.get("namespace", "")),
    )
