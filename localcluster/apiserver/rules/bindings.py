"""Pure rules of RoleBindings and ClusterRoleBindings: upstream's defaults and validation.

kube-apiserver defaults a binding's ``roleRef.apiGroup`` and its User and Group subjects'
``apiGroup`` to ``rbac.authorization.k8s.io`` (``pkg/apis/rbac/v1/defaults.go``), then
validates it (``pkg/apis/rbac/validation/validation.go``: ``ValidateRoleBinding``,
``ValidateClusterRoleBinding``, ``ValidateRoleBindingSubject``):

- ``roleRef.apiGroup`` must be ``rbac.authorization.k8s.io``; ``roleRef.kind`` ``Role`` or
  ``ClusterRole`` (a ClusterRoleBinding: ``ClusterRole`` only); ``roleRef.name`` is
  required and must be a path segment name (not ``.``/``..``, no ``/`` or ``%``);
- every subject needs a name; a ServiceAccount's is a DNS-1123 subdomain, its apiGroup
  empty, and in a ClusterRoleBinding its namespace is required; a User's or Group's
  apiGroup is ``rbac.authorization.k8s.io``; any other kind is refused.

The causes carry upstream's field paths and wording (``field.NotSupported``,
``field.Required``, ``field.Invalid``). A field that is absent counts as Go's zero value
(""), as it does once upstream has decoded the body.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..errors import Cause, go_quote, required
from .meta import path_segment_errors, subdomain_errors

Obj = dict[str, Any]

RBAC_GROUP = "rbac.authorization.k8s.io"
BINDING_KINDS = ("RoleBinding", "ClusterRoleBinding")
SUBJECT_KINDS = ("ServiceAccount", "User", "Group")


def _text(value: Any) -> str:
    """A string field as upstream's decoder leaves it: absent or null is ""."""
    return "" if value is None else value if isinstance(value, str) else str(value)


def _mapping(value: Any) -> Obj:
    return value if isinstance(value, dict) else {}


def set_defaults(obj: Obj) -> None:
    """upstream's SetDefaults_RoleBinding / _ClusterRoleBinding / _Subject, in place (a
    missing roleRef is Go's zero RoleRef, which gets the apiGroup too)."""
    if obj.get("roleRef") is None:
        obj["roleRef"] = {}
    ref = obj["roleRef"]
    if isinstance(ref, dict) and not ref.get("apiGroup"):
        ref["apiGroup"] = RBAC_GROUP
    subjects = obj.get("subjects")
    for subject in subjects if isinstance(subjects, list) else []:
        if isinstance(subject, dict) and not subject.get("apiGroup"):
            if subject.get("kind") in ("User", "Group"):
                subject["apiGroup"] = RBAC_GROUP
            elif subject.get("kind") == "ServiceAccount":
                subject["apiGroup"] = ""


def _invalid(path: str, value: str, detail: str) -> Cause:
    return Cause("FieldValueInvalid", f"Invalid value: {go_quote(value)}: {detail}", path)


def _not_supported(path: str, value: str, supported: Sequence[str]) -> Cause:
    return Cause("FieldValueNotSupported", f"Unsupported value: {go_quote(value)}: supported "
                 f"values: {', '.join(go_quote(v) for v in supported)}", path)


def _role_ref(ref: Obj, kinds: Sequence[str]) -> list[Cause]:
    causes = []
    api_group, kind, name = (_text(ref.get(k)) for k in ("apiGroup", "kind", "name"))
    if api_group != RBAC_GROUP:
        causes.append(_not_supported("roleRef.apiGroup", api_group, [RBAC_GROUP]))
    if kind not in kinds:
        causes.append(_not_supported("roleRef.kind", kind, kinds))
    if not name:
        causes.append(required("roleRef.name"))
    causes += [_invalid("roleRef.name", name, msg) for msg in path_segment_errors(name)]
    return causes


def _subject(subject: Obj, *, namespaced: bool, path: str) -> list[Cause]:
    """upstream's ValidateRoleBindingSubject."""
    causes = []
    name, kind, api_group = (_text(subject.get(k)) for k in ("name", "kind", "apiGroup"))
    if not name:
        causes.append(required(f"{path}.name"))
    if kind == "ServiceAccount":
        if name:
            causes += [_invalid(f"{path}.name", name, msg) for msg in subdomain_errors(name)]
        if api_group:
            causes.append(_not_supported(f"{path}.apiGroup", api_group, [""]))
        if not namespaced and not _text(subject.get("namespace")):
            causes.append(required(f"{path}.namespace"))
    elif kind in ("User", "Group"):
        if api_group != RBAC_GROUP:
            causes.append(_not_supported(f"{path}.apiGroup", api_group, [RBAC_GROUP]))
    else:
        causes.append(_not_supported(f"{path}.kind", kind, SUBJECT_KINDS))
    return causes


def validate(obj: Obj) -> list[Cause]:
    """What is wrong with a (defaulted) RoleBinding or ClusterRoleBinding, after its
    metadata: roleRef, then each subject."""
    namespaced = obj.get("kind") == "RoleBinding"
    kinds = ("Role", "ClusterRole") if namespaced else ("ClusterRole",)
    causes = _role_ref(_mapping(obj.get("roleRef")), kinds)
    subjects = obj.get("subjects")
    for i, subject in enumerate(subjects if isinstance(subjects, list) else []):
        causes += _subject(_mapping(subject), namespaced=namespaced, path=f"subjects[{i}]")
    return causes
