"""RBAC escalation prevention: nobody grants through RBAC what they do not hold.

What kube-apiserver's RBAC registry (``pkg/registry/rbac``: the ``policybased`` storages,
``escalation_check.go``, ``validation/rule.go`` and ``policy_comparator.go``) checks when
a Role, ClusterRole, RoleBinding or ClusterRoleBinding is created or updated (patches
included), after the request itself was authorized:

- members of ``system:masters`` (the admin token, the server's own writes) pass;
- a Role or ClusterRole passes if the writer may ``escalate`` roles/clusterroles there
  (the name in the URL: none on create), or already holds every rule it grants (in the
  request's namespace for a Role, cluster-wide for a ClusterRole). A ClusterRole with an
  ``aggregationRule`` (now or before the update) can gather anything, so without
  ``escalate`` it needs ``*`` on everything: "must have cluster-admin privileges to use
  the aggregationRule";
- a binding passes if the writer may ``bind`` the role it names (resourceName = the
  role's name, in the binding's namespace; cluster-wide for a ClusterRoleBinding), or
  already holds every rule of that role there; a role that does not exist → 404;
- an update that changes only ``finalizers`` / ``ownerReferences`` (the garbage
  collector's) passes.

"Holds" is upstream's ``Covers``: each granted rule is broken into atoms (one API group,
resource (``pods/exec`` is one resource), verb and resource name, or one non-resource
URL and verb) and each atom must be covered by one held rule: ``*`` covers any group,
resource or verb (``*/scale`` covers only ``*/scale``), a held rule without
resourceNames covers every name (but one with names never covers an atom without one),
and a held URL ending in ``*`` covers the URLs under that prefix. The refusal lists the
atoms not held as upstream words them (``user "…" (groups=["…"]) is attempting to grant
RBAC permissions not currently held:`` then ``{APIGroups:["…"], Resources:["…"],
Verbs:["…"]}`` lines, the verbs of one group/resource merged).

Upstream breaks every rule into the product of its lists, so one Role of a few MiB of
distinct names could cost ~10^15 comparisons. Here the decision groups a rule's values by
the held rules that match them (values no held rule names all behave alike), which
bounds the work by the size of the writer's policy rather than the request's; only the
listing of missing atoms in the message is capped.

:func:`covers` and the helpers are pure; :func:`check_write` takes the RBAC objects as a
:class:`Policy` (read from the store by :meth:`Policy.from_store`).
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..errors import forbidden, go_quote, not_found
from ..storage.store import Store
from . import rbac

Obj = Mapping[str, Any]
RBAC_GROUP = "rbac.authorization.k8s.io"
ROLE_RESOURCES = frozenset({"roles", "clusterroles"})
BINDING_RESOURCES = frozenset({"rolebindings", "clusterrolebindings"})
GUARDED_RESOURCES = ROLE_RESOURCES | BINDING_RESOURCES
# upstream's fullAuthority (clusterrole/policybased/storage.go): what the aggregationRule
# needs without escalate
FULL_AUTHORITY: tuple[Obj, ...] = (
    {"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]},
    {"nonResourceURLs": ["*"], "verbs": ["*"]},
)
AGGREGATION_REFUSED = "must have cluster-admin privileges to use the aggregationRule"
# Only the message is bounded: how many missing atoms it lists, and how many values the
# search for them may look at (the decision itself is exact).
MAX_LISTED = 10_000
MAX_STEPS = 1_000_000
# metadata the server sets itself on an update: not a change the writer makes
_SERVER_METADATA = ("uid", "creationTimestamp", "deletionTimestamp",
                    "deletionGracePeriodSeconds", "generation", "selfLink",
                    "resourceVersion", "managedFields")


def _strings(value: Any) -> list[str]:
    """A rule's list field; a lone string counts as one value (the decoder refuses it
    anyway, and counting it keeps the check from under-reading what is granted)."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, list):
        return [v for v in value if isinstance(v, str)]
    return []


@dataclass(frozen=True)
class _Rule:
    groups: tuple[str, ...]
    resources: tuple[str, ...]
    verbs: tuple[str, ...]
    names: tuple[str, ...]
    urls: tuple[str, ...]

    @classmethod
    def of(cls, rule: Any) -> _Rule:
        get = rule.get if isinstance(rule, Mapping) else (lambda _key: None)
        return cls(*(tuple(_strings(get(key))) for key in (
            "apiGroups", "resources", "verbs", "resourceNames", "nonResourceURLs")))


# -- coverage -------------------------------------------------------------------------------

_Sig = frozenset[int]  # the held rules (by index) that match a value in one dimension


def _exact(owners: Sequence[_Rule], pick: Callable[[_Rule], tuple[str, ...]]
           ) -> Callable[[str], _Sig]:
    """Signature of a group, resource or verb: the held rules listing it or ``*``."""
    wild = {i for i, o in enumerate(owners) if "*" in pick(o)}
    literal: dict[str, set[int]] = {}
    for i, o in enumerate(owners):
        for value in pick(o):
            literal.setdefault(value, set()).add(i)
    return lambda value: frozenset(wild | literal.get(value, set()))


def _names(owners: Sequence[_Rule]) -> Callable[[str | None], _Sig]:
    """Signature of a resource name (None: an atom without one, which only a held rule
    without resourceNames covers)."""
    unnamed = frozenset(i for i, o in enumerate(owners) if not o.names)
    named: dict[str, set[int]] = {}
    for i, o in enumerate(owners):
        for name in o.names:
            named.setdefault(name, set()).add(i)
    return lambda name: unnamed if name is None else unnamed | named.get(name, set())


def _urls(owners: Sequence[_Rule]) -> Callable[[str], _Sig]:
    exact: dict[str, set[int]] = {}
    prefixes: list[tuple[str, int]] = []
    for i, o in enumerate(owners):
        for pattern in o.urls:
            exact.setdefault(pattern, set()).add(i)
            if pattern.endswith("*"):
                prefixes.append((pattern.rstrip("*"), i))
    return lambda url: frozenset(exact.get(url, set()) | {
        i for prefix, i in prefixes if url.startswith(prefix)})


@dataclass
class _Box:
    """The atoms of one granted rule: the product of ``dims`` (values in breakdown order,
    each with the function giving its signature), made into a rule by ``atom``."""

    dims: list[tuple[list[Any], Callable[[Any], _Sig]]]
    atom: Callable[[tuple[Any, ...]], dict[str, list[str]]]
    everyone: _Sig
    _sigs: list[dict[Any, _Sig]] = field(default_factory=list)
    _classes: list[list[_Sig]] = field(default_factory=list)
    _memo: dict[tuple[int, _Sig], bool] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for values, sig in self.dims:
            sigs = {v: sig(v) for v in dict.fromkeys(values)}
            self._sigs.append(sigs)
            self._classes.append(list(dict.fromkeys(sigs.values())))

    def covered(self, level: int = 0, held: _Sig | None = None) -> bool:
        """Whether every atom from dimension ``level`` on is covered by one of ``held``."""
        held = self.everyone if held is None else held
        if any(not classes for classes in self._classes[level:]):
            return True  # no atoms at all
        key = (level, held)
        if key not in self._memo:
            if not held:
                self._memo[key] = False
            elif level == len(self._classes):
                self._memo[key] = True
            else:
                self._memo[key] = all(self.covered(level + 1, held & c)
                                      for c in self._classes[level])
        return self._memo[key]

    def missing(self, out: list[dict[str, list[str]]], budget: list[int]) -> None:
        """Append the atoms not covered, in upstream's breakdown order (bounded)."""
        def walk(level: int, held: _Sig, chosen: tuple[Any, ...]) -> None:
            if self.covered(level, held):
                return
            if level == len(self.dims):
                out.append(self.atom(chosen))
                return
            for value in self.dims[level][0]:
                if len(out) >= MAX_LISTED or (budget[0] <= 0 and out):
                    return
                budget[0] -= 1
                walk(level + 1, held & self._sigs[level][value], (*chosen, value))

        walk(0, self.everyone, ())


def _boxes(owners: Sequence[_Rule], servant: _Rule) -> list[_Box]:
    everyone = frozenset(range(len(owners)))
    boxes = []
    if servant.groups and servant.resources and servant.verbs:
        names: list[str | None] = list(servant.names) or [None]

        def resource_atom(values: tuple[Any, ...]) -> dict[str, list[str]]:
            group, resource, verb, name = values
            atom = {"apiGroups": [group], "resources": [resource], "verbs": [verb]}
            if name is not None:
                atom["resourceNames"] = [name]
            return atom

        boxes.append(_Box([
            (list(servant.groups), _exact(owners, lambda o: o.groups)),
            (list(servant.resources), _exact(owners, lambda o: o.resources)),
            (list(servant.verbs), _exact(owners, lambda o: o.verbs)),
            (names, _names(owners)),
        ], resource_atom, everyone))
    if servant.urls and servant.verbs:
        unnamed = _names(owners)(None)  # a URL atom has no name: held rules with none
        verb_sig = _exact(owners, lambda o: o.verbs)
        boxes.append(_Box([
            (list(servant.urls), _urls(owners)),
            (list(servant.verbs), lambda verb: verb_sig(verb) & unnamed),
        ], lambda values: {"nonResourceURLs": [values[0]], "verbs": [values[1]]}, everyone))
    return boxes


def uncovered(owner_rules: Sequence[Any], servant_rules: Sequence[Any]
              ) -> tuple[bool, list[dict[str, list[str]]], bool]:
    """Whether ``owner_rules`` cover ``servant_rules``, the atoms they miss (as upstream's
    breakdown lists them) and whether that list was cut short."""
    owners = [_Rule.of(rule) for rule in owner_rules]
    boxes = [box for rule in servant_rules for box in _boxes(owners, _Rule.of(rule))]
    ok = all(box.covered() for box in boxes)
    missing: list[dict[str, list[str]]] = []
    budget = [MAX_STEPS]
    for box in boxes:
        if not ok and len(missing) < MAX_LISTED and not box.covered():
            box.missing(missing, budget)
    truncated = not ok and (len(missing) >= MAX_LISTED or budget[0] <= 0)
    return ok, missing, truncated


def covers(owner_rules: Sequence[Any], servant_rules: Sequence[Any]
           ) -> tuple[bool, list[dict[str, list[str]]]]:
    """upstream's ``validation.Covers``: whether the held rules cover the granted ones,
    and the granted atoms (one group, resource, verb and name, or one URL and verb) they
    do not cover."""
    ok, missing, _ = uncovered(owner_rules, servant_rules)
    return ok, missing


# -- the message ----------------------------------------------------------------------------

def go_quote_list(values: Sequence[str]) -> str:
    """Go's ``%q`` of a []string: ``["a" "b"]``."""
    return "[" + " ".join(go_quote(v) for v in values) + "]"


def compact_rules(rules: Sequence[Obj]) -> list[dict[str, list[str]]]:
    """upstream's ``CompactRules``: rules of one group and one resource, verbs and
    nothing else, merged per group/resource (their verbs appended in order)."""
    compacted: list[dict[str, list[str]]] = []
    simple: dict[tuple[str, str], dict[str, list[str]]] = {}
    for rule in rules:
        groups, resources = _strings(rule.get("apiGroups")), _strings(rule.get("resources"))
        is_simple = (len(groups) == 1 and len(resources) == 1
                     and set(rule) <= {"apiGroups", "resources", "verbs"})
        if not is_simple:
            compacted.append({k: list(_strings(v)) for k, v in rule.items()})
            continue
        key = (groups[0], resources[0])
        if key in simple:
            simple[key]["verbs"].extend(_strings(rule.get("verbs")))
        else:
            simple[key] = {"apiGroups": groups, "resources": resources,
                           "verbs": list(_strings(rule.get("verbs")))}
    return compacted + list(simple.values())


def compact_string(rule: Obj) -> str:
    """upstream's ``CompactString``: ``{APIGroups:["…"], Resources:["…"], Verbs:["…"]}``."""
    parts = [f"{label}:{go_quote_list(_strings(rule.get(key)))}"
             for label, key in (("APIGroups", "apiGroups"), ("Resources", "resources"),
                                ("NonResourceURLs", "nonResourceURLs"),
                                ("ResourceNames", "resourceNames"), ("Verbs", "verbs"))
             if _strings(rule.get(key))]
    return "{" + ", ".join(parts) + "}"


def _aggregate(errors: Sequence[str]) -> str:
    """An ``utilerrors.Aggregate``'s text: one error as is, several deduplicated in []."""
    unique = list(dict.fromkeys(errors))
    return unique[0] if len(unique) == 1 else "[" + ", ".join(unique) + "]"


def escalation_message(user: str, groups: Sequence[str], missing: Sequence[Obj], *,
                       resolution_errors: Sequence[str] = (), truncated: bool = False) -> str:
    """upstream's ``ConfirmNoEscalation`` error text."""
    lines = sorted({compact_string(rule) for rule in compact_rules(missing)})
    if truncated:
        lines.append("(and more not listed)")
    msg = (f"user {go_quote(user)} (groups={go_quote_list(groups)}) is attempting to grant "
           "RBAC permissions not currently held:\n" + "\n".join(lines))
    if resolution_errors:
        msg += f"; resolution errors: [{_aggregate(resolution_errors)}]"
    return msg


# -- the checks -----------------------------------------------------------------------------

@dataclass(frozen=True)
class Policy:
    """The RBAC objects a check reads."""

    roles: Sequence[Obj] = ()
    cluster_roles: Sequence[Obj] = ()
    role_bindings: Sequence[Obj] = ()
    cluster_role_bindings: Sequence[Obj] = ()

    @classmethod
    def from_store(cls, store: Store) -> Policy:
        def objects(resource: str) -> list[Obj]:
            return [s.obj for _, s in store.items(f"{RBAC_GROUP}/{resource}")]

        return cls(objects("roles"), objects("clusterroles"), objects("rolebindings"),
                   objects("clusterrolebindings"))

    def allows(self, attrs: rbac.Attributes) -> bool:
        return rbac.authorize(attrs, roles=self.roles, cluster_roles=self.cluster_roles,
                              role_bindings=self.role_bindings,
                              cluster_role_bindings=self.cluster_role_bindings).allowed

    def rules_for(self, user: str, groups: Sequence[str], namespace: str
                  ) -> tuple[list[Obj], list[str]]:
        return rbac.rules_for(user, groups, namespace, roles=self.roles,
                              cluster_roles=self.cluster_roles,
                              role_bindings=self.role_bindings,
                              cluster_role_bindings=self.cluster_role_bindings)


def confirm_no_escalation(policy: Policy, *, user: str, groups: Sequence[str],
                          namespace: str, rules: Sequence[Any]) -> str | None:
    """None when ``user`` holds every rule of ``rules`` in ``namespace`` ("" for
    cluster-wide), else upstream's message naming what it does not hold."""
    held, errors = policy.rules_for(user, groups, namespace)
    ok, missing, truncated = uncovered(held, rules)
    if ok:
        return None
    return escalation_message(user, groups, missing, resolution_errors=errors,
                              truncated=truncated)


def only_gc_fields_change(new: Obj, old: Obj) -> bool:
    """upstream's ``IsOnlyMutatingGCFields``: the update changes finalizers and owner
    references at most (metadata the server keeps itself is not counted either)."""
    a, b = copy.deepcopy(dict(new)), copy.deepcopy(dict(old))
    for obj in (a, b):
        obj.pop("apiVersion", None)
        obj.pop("kind", None)
        meta = obj.get("metadata")
        if not isinstance(meta, dict):
            return False
        for key in (*_SERVER_METADATA, "finalizers", "ownerReferences"):
            meta.pop(key, None)
    return a == b


def _has_aggregation(obj: Obj | None) -> bool:
    rule = obj.get("aggregationRule") if obj is not None else None
    return isinstance(rule, Mapping) and bool(rule.get("clusterRoleSelectors"))


def _refuse(resource: str, name: str, message: str) -> None:
    qualified = f"{resource}.{RBAC_GROUP}"
    subject = f"{qualified} {go_quote(name)}" if name else qualified
    raise forbidden(f"{subject} is forbidden: {message}", resource=resource,
                    group=RBAC_GROUP, name=name)


def check_write(policy: Policy, *, user: str, groups: Sequence[str], resource: str,
                namespace: str, url_name: str, obj: Any, old: Obj | None) -> None:
    """Raise 403 (404 for a binding to a role that does not exist) when creating
    (``old`` None) or updating an RBAC object to ``obj`` would grant ``user`` what it
    does not hold. ``namespace`` and ``url_name`` are the request's."""
    if rbac.SUPERUSER_GROUP in groups or resource not in GUARDED_RESOURCES:
        return
    if not isinstance(obj, Mapping):
        return  # not an object: the decoder refuses it
    if old is not None and only_gc_fields_change(obj, old):
        return
    meta = obj.get("metadata")
    name = str((meta.get("name") if isinstance(meta, Mapping) else None) or url_name)
    if resource in ROLE_RESOURCES:
        _check_role(policy, user=user, groups=groups, resource=resource,
                    namespace=namespace, url_name=url_name, name=name, obj=obj, old=old)
    else:
        _check_binding(policy, user=user, groups=groups, resource=resource,
                       namespace=namespace, name=name, obj=obj)


def _check_role(policy: Policy, *, user: str, groups: Sequence[str], resource: str,
                namespace: str, url_name: str, name: str, obj: Obj, old: Obj | None) -> None:
    if policy.allows(rbac.Attributes(user=user, groups=tuple(groups), verb="escalate",
                                     api_group=RBAC_GROUP, resource=resource, name=url_name,
                                     namespace=namespace)):
        return
    rules = obj.get("rules")
    message = confirm_no_escalation(policy, user=user, groups=groups, namespace=namespace,
                                    rules=rules if isinstance(rules, list) else [])
    if message is not None:
        _refuse(resource, name, message)
    if resource == "clusterroles" and (_has_aggregation(obj) or _has_aggregation(old)) \
            and confirm_no_escalation(policy, user=user, groups=groups, namespace=namespace,
                                      rules=FULL_AUTHORITY) is not None:
        _refuse(resource, name, AGGREGATION_REFUSED)


def _check_binding(policy: Policy, *, user: str, groups: Sequence[str], resource: str,
                   namespace: str, name: str, obj: Obj) -> None:
    ref = obj.get("roleRef")
    if not isinstance(ref, Mapping):
        return  # validation refuses it
    kind, role_name = ref.get("kind"), ref.get("name")
    allowed_kinds = ("Role", "ClusterRole") if resource == "rolebindings" else ("ClusterRole",)
    if kind not in allowed_kinds or not isinstance(role_name, str) or not role_name:
        return  # validation refuses it
    role_resource = "roles" if kind == "Role" else "clusterroles"
    if policy.allows(rbac.Attributes(user=user, groups=tuple(groups), verb="bind",
                                     api_group=RBAC_GROUP, resource=role_resource,
                                     name=role_name, namespace=namespace)):
        return
    if kind == "ClusterRole":
        rules = rbac.cluster_role_rules(role_name, policy.cluster_roles)
    else:
        role = next((r for r in policy.roles
                     if (r.get("metadata") or {}).get("name") == role_name
                     and (r.get("metadata") or {}).get("namespace") == namespace), None)
        rules = None if role is None else list(role.get("rules") or [])
    if rules is None:
        raise not_found(resource=role_resource, group=RBAC_GROUP, name=role_name)
    message = confirm_no_escalation(policy, user=user, groups=groups, namespace=namespace,
                                    rules=rules)
    if message is not None:
        _refuse(resource, name, message)
