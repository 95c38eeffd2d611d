"""PodSecurity admission, as kube-apiserver's built-in plugin (k8s.io/pod-security-admission
v0.32, Kubernetes 1.32) runs it with its default configuration (pure: the callers bring
the namespace's labels and its pods).

A namespace's ``pod-security.kubernetes.io/{enforce,audit,warn}`` labels name a level
(``privileged``, ``baseline``, ``restricted``) and the ``-version`` labels a version
(``latest`` or ``v1.x``); unlabelled, every mode is ``privileged:latest``. Then:

- a Pod created (or updated in a way that changes an image or adds a container) that
  fails the enforce level is refused: 403, ``pods "NAME" is forbidden: violates
  PodSecurity "restricted:latest": REASON (DETAIL), ...``;
- the warn level's failures come back as a warning (``would violate PodSecurity ...``),
  the audit level's as the ``pod-security.kubernetes.io/audit-violations`` audit
  annotation, beside ``pod-security.kubernetes.io/enforce-policy``;
- workloads with a pod template (Deployments, ReplicaSets, StatefulSets, DaemonSets,
  Jobs, CronJobs, ReplicationControllers, PodTemplates) get warnings and audit
  annotations only, never a refusal;
- a namespace whose labels do not parse is refused (422) when it is created, or updated
  with changed bad labels; raising its enforce level warns about its pods that fail it.

Not here: exemptions (the default configuration has none) and the namespace check's pod
limit and time budget (a node here holds few pods).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..errors import Cause, go_quote
from . import podsecurity_checks as checks

Obj = Mapping[str, Any]

PREFIX = "pod-security.kubernetes.io/"
ENFORCE, AUDIT, WARN = "enforce", "audit", "warn"
MODES = (ENFORCE, AUDIT, WARN)
LEVELS = (checks.PRIVILEGED, checks.BASELINE, checks.RESTRICTED)
AUDIT_VIOLATIONS = PREFIX + "audit-violations"
ENFORCE_POLICY = PREFIX + "enforce-policy"
_VERSION = re.compile(r"^v1\.([0-9]|[1-9][0-9]*)$")

POD_TEMPLATE_RESOURCES: Mapping[str, tuple[str, ...]] = {
    "/replicationcontrollers": ("spec", "template"),
    "/podtemplates": ("template",),
    "apps/replicasets": ("spec", "template"),
    "apps/deployments": ("spec", "template"),
    "apps/statefulsets": ("spec", "template"),
    "apps/daemonsets": ("spec", "template"),
    "batch/jobs": ("spec", "template"),
    "batch/cronjobs": ("spec", "jobTemplate", "spec", "template"),
}
"""Group/resource → where its pod template is (upstream's DefaultPodSpecExtractor)."""

IGNORED_POD_SUBRESOURCES = frozenset({"exec", "attach", "binding", "eviction", "log",
                                      "portforward", "proxy", "status"})


@dataclass(frozen=True)
class LevelVersion:
    level: str = checks.PRIVILEGED
    version: checks.Version | None = None
    """None: latest."""

    def __str__(self) -> str:
        v = "latest" if self.version is None else f"v{self.version[0]}.{self.version[1]}"
        return f"{self.level}:{v}"


@dataclass(frozen=True)
class Policy:
    enforce: LevelVersion = LevelVersion()
    audit: LevelVersion = LevelVersion()
    warn: LevelVersion = LevelVersion()

    def fully_privileged(self) -> bool:
        return all(lv.level == checks.PRIVILEGED for lv in (self.enforce, self.audit, self.warn))


def _strictness(level: str) -> int:
    return LEVELS.index(level)


def _invalid(label: str, value: str, detail: str) -> Cause:
    return Cause("FieldValueInvalid", f"Invalid value: {go_quote(value)}: {detail}",
                 f"metadata.labels[{label}]")


def policy_of(labels: Mapping[str, str] | None) -> tuple[Policy, list[Cause]]:
    """The namespace's policy and the causes its labels do not parse (upstream's
    PolicyToEvaluate: a bad enforce level enforces ``restricted``, a bad audit or warn
    level is ``privileged``, a bad version is ``latest``; warn follows enforce when only
    enforce is set, to a stricter level)."""
    labels = labels or {}
    lvs = {mode: LevelVersion() for mode in MODES}
    errs: list[Cause] = []
    has_enforce_level = has_warn_level = has_warn_version = False
    for mode in MODES:
        level_label, version_label = PREFIX + mode, PREFIX + mode + "-version"
        lv = lvs[mode]
        if level_label in labels:
            value = labels[level_label]
            if value in LEVELS:
                lv = LevelVersion(value, lv.version)
                has_enforce_level = has_enforce_level or mode == ENFORCE
            else:
                errs.append(_invalid(level_label, value, "must be one of " + ", ".join(LEVELS)))
                lv = LevelVersion(checks.RESTRICTED if mode == ENFORCE else checks.PRIVILEGED,
                                  lv.version)
            has_warn_level = has_warn_level or mode == WARN
        if version_label in labels:
            value = labels[version_label]
            lv = LevelVersion(lv.level, _version(value))
            if value != "latest" and _VERSION.match(value) is None:
                errs.append(_invalid(version_label, value, 'must be "latest" or "v1.x"'))
            has_warn_version = has_warn_version or mode == WARN
        lvs[mode] = lv
    enforce, warn = lvs[ENFORCE], lvs[WARN]
    if not has_warn_level and has_enforce_level and \
            _strictness(enforce.level) > _strictness(warn.level):
        warn = LevelVersion(enforce.level, warn.version if has_warn_version else enforce.version)
    return Policy(enforce=enforce, audit=lvs[AUDIT], warn=warn), errs


def _version(value: str) -> checks.Version | None:
    m = _VERSION.match(value)
    return (1, int(m.group(1))) if m else None


def _results(lv: LevelVersion, meta: Obj, spec: Obj) -> list[tuple[str, str]]:
    return checks.evaluate(lv.level, lv.version, meta, spec)


@dataclass
class Decision:
    """What admission says about one write: a refusal message (None: allowed), warnings
    for the client, annotations for the audit log."""

    refusal: str | None = None
    warnings: list[str] = field(default_factory=list)
    audit_annotations: dict[str, str] = field(default_factory=dict)


def evaluate_pod(policy: Policy, meta: Obj, spec: Obj, *, enforce: bool,
                 policy_errors: Sequence[Cause] = ()) -> Decision:
    """Upstream's EvaluatePod: enforce (pods only), audit, then warn unless refused."""
    d = Decision()
    if policy_errors:
        d.audit_annotations["error"] = "Failed to parse policy: " + _aggregate(policy_errors)
    if enforce:
        d.audit_annotations[ENFORCE_POLICY] = str(policy.enforce)
        failed = _results(policy.enforce, meta, spec)
        if failed:
            d.refusal = (f'violates PodSecurity "{policy.enforce}": '
                         f"{checks.forbidden_detail(failed)}")
    audit = _results(policy.audit, meta, spec)
    if audit:
        d.audit_annotations[AUDIT_VIOLATIONS] = (
            f'would violate PodSecurity "{policy.audit}": {checks.forbidden_detail(audit)}')
    if d.refusal is None:
        warn = _results(policy.warn, meta, spec)
        if warn:
            d.warnings.append(f'would violate PodSecurity "{policy.warn}": '
                              f"{checks.forbidden_detail(warn)}")
    return d


def _aggregate(causes: Sequence[Cause]) -> str:
    parts = [f"{c.field}: {c.message}" for c in causes]
    return parts[0] if len(parts) == 1 else "[" + ", ".join(parts) + "]"


def _images(spec: Obj, key: str) -> list[object]:
    return [c.get("image") for c in spec.get(key) or [] if isinstance(c, Mapping)]


def significant_pod_update(new: Obj, old: Obj) -> bool:
    """Upstream's isSignificantPodUpdate: a container added or removed, an image changed,
    an ephemeral container added or its image changed."""
    ns, os_ = new.get("spec") or {}, old.get("spec") or {}
    for key in ("containers", "initContainers"):
        if _images(ns, key) != _images(os_, key):
            return True
    old_eph = {c.get("name"): c.get("image") for c in os_.get("ephemeralContainers") or []}
    for c in ns.get("ephemeralContainers") or []:
        if c.get("name") not in old_eph or old_eph[c.get("name")] != c.get("image"):
            return True
    return False


def pod_template(group_resource: str, obj: Obj) -> Obj | None:
    """The pod template of a workload (None: the resource has none, or the object
    carries none)."""
    path = POD_TEMPLATE_RESOURCES.get(group_resource)
    if path is None:
        return None
    node: Any = obj
    for key in path:
        node = node.get(key) if isinstance(node, Mapping) else None
    return node if isinstance(node, Mapping) else None


def admit_pod(labels: Mapping[str, str] | None, pod: Obj, *, old: Obj | None,
              subresource: str = "") -> Decision:
    """A Pod's create or update."""
    if subresource in IGNORED_POD_SUBRESOURCES:
        return Decision()
    policy, errs = policy_of(labels)
    if not errs and policy.fully_privileged():
        return Decision()
    if old is not None and not significant_pod_update(pod, old):
        return Decision()
    return evaluate_pod(policy, pod.get("metadata") or {}, pod.get("spec") or {},
                        enforce=True, policy_errors=errs)


def admit_workload(labels: Mapping[str, str] | None, group_resource: str, obj: Obj,
                   subresource: str = "") -> Decision:
    """A workload's create or update: warnings and audit annotations only."""
    if subresource:
        return Decision()
    policy, errs = policy_of(labels)
    if not errs and policy.warn.level == checks.PRIVILEGED and \
            policy.audit.level == checks.PRIVILEGED:
        return Decision()
    template = pod_template(group_resource, obj)
    if template is None:
        return Decision()
    return evaluate_pod(policy, template.get("metadata") or {}, template.get("spec") or {},
                        enforce=False, policy_errors=errs)


def namespace_causes(labels: Mapping[str, str] | None,
                     old_labels: Mapping[str, str] | None, *, creating: bool) -> list[Cause]:
    """Why a namespace's labels are refused: any bad label on create; on update, bad
    labels that are new or changed (a namespace already stored with them may keep them)."""
    _, errs = policy_of(labels)
    if not errs or creating:
        return errs
    _, old_errs = policy_of(old_labels)
    return [] if old_errs == errs else errs


def namespace_warnings(namespace: str, labels: Mapping[str, str] | None,
                       old_labels: Mapping[str, str] | None, pods: Iterable[Obj]) -> list[str]:
    """When an update raises the enforce level: which existing pods fail it (upstream's
    EvaluatePodsInNamespace, pods of one controller checked once, first)."""
    new, _ = policy_of(labels)
    old, _ = policy_of(old_labels)
    if new.enforce == old.enforce or new.enforce.level == checks.PRIVILEGED:
        return []
    if new.enforce.version == old.enforce.version and \
            _strictness(new.enforce.level) <= _strictness(old.enforce.level):
        return []
    counts: dict[str, list[Any]] = {}
    order: list[str] = []
    for pod in _prioritised(pods):
        failed = _results(new.enforce, pod.get("metadata") or {}, pod.get("spec") or {})
        if not failed:
            continue
        warning = checks.forbidden_reason(failed)
        name = str((pod.get("metadata") or {}).get("name") or "")
        if warning not in counts:
            counts[warning] = [name, 0]
            order.append(warning)
        elif name < counts[warning][0]:
            counts[warning][0] = name
        counts[warning][1] += 1
    if not order:
        return []
    decorated = []
    for warning in order:
        name, n = counts[warning]
        if n == 1:
            decorated.append(f"{name}: {warning}")
        elif n == 2:
            decorated.append(f"{name} (and 1 other pod): {warning}")
        else:
            decorated.append(f"{name} (and {n - 1} other pods): {warning}")
    return [f"existing pods in namespace {go_quote(namespace)} violate the new PodSecurity "
            f"enforce level {go_quote(str(new.enforce))}", *sorted(decorated)]


def _prioritised(pods: Iterable[Obj]) -> list[Obj]:
    first, later = [], []
    seen: set[str] = set()
    for pod in pods:
        owner = next((r for r in (pod.get("metadata") or {}).get("ownerReferences") or []
                      if r.get("controller")), None)
        if owner is None:
            first.append(pod)
        elif owner.get("uid") in seen:
            later.append(pod)
        else:
            seen.add(str(owner.get("uid")))
            first.append(pod)
    return first + later
