"""Pure metadata rules: names, labels, system fields, generation, status/spec separation.

kube-apiserver owns part of every object's ``metadata`` (uid, creationTimestamp,
resourceVersion, generation, deletionTimestamp) and decides what a write may change
depending on the subresource it came through. These decisions are here, without I/O, so
they can be tested with tables and reused by every verb.
"""

from __future__ import annotations

import copy
import datetime
import re
from typing import Any

from ..errors import Cause

Obj = dict[str, Any]

_DNS1123_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_DNS1123_SUBDOMAIN = re.compile(
    r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_QUALIFIED_NAME = re.compile(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]")
_LABEL_VALUE = re.compile(r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?")

LABEL_MSG = ("a lowercase RFC 1123 label must consist of lower case alphanumeric characters "
             "or '-', and must start and end with an alphanumeric character (e.g. 'my-name',"
             "  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')")
SUBDOMAIN_MSG = ("a lowercase RFC 1123 subdomain must consist of lower case alphanumeric "
                 "characters, '-' or '.', and must start and end with an alphanumeric "
                 "character (e.g. 'example.com', regex used for validation is "
                 "'[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')")

# Fields of metadata the server owns: a client's values are replaced on create and
# carried over from the stored object on update.
SYSTEM_FIELDS = ("uid", "creationTimestamp", "deletionTimestamp",
                 "deletionGracePeriodSeconds", "generation", "selfLink")
MAX_ANNOTATIONS_BYTES = 256 * 1024


def format_time(moment: datetime.datetime) -> str:
    return moment.astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_time(text: str) -> datetime.datetime:
    return datetime.datetime.strptime(text, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=datetime.UTC)


def name_error(name: str, *, label: bool) -> str | None:
    """Why ``name`` is not a valid object name, or None."""
    if label:
        if len(name) > 63:
            return "must be no more than 63 characters"
        return None if _DNS1123_LABEL.fullmatch(name) else LABEL_MSG
    return next(iter(subdomain_errors(name)), None)


def subdomain_errors(name: str) -> list[str]:
    """upstream's IsDNS1123Subdomain: every reason (the length, then the form)."""
    errors = []
    if len(name) > 253:
        errors.append("must be no more than 253 characters")
    if not _DNS1123_SUBDOMAIN.fullmatch(name):
        errors.append(SUBDOMAIN_MSG)
    return errors


def path_segment_errors(name: str) -> list[str]:
    """upstream's IsValidPathSegmentName (content.IsPathSegmentName)."""
    if name in (".", ".."):
        return [f"may not be '{name}'"]
    return [f"may not contain '{c}'" for c in ("/", "%") if c in name]


def object_name_error(name: str, *, rule: str) -> str | None:
    """Why ``name`` cannot name an object whose kind follows ``rule``: "subdomain" (most
    kinds), "label" (Namespace, Service) or "path" (RBAC kinds: any path segment)."""
    if rule == "path":
        return next(iter(path_segment_errors(name)), None)
    return name_error(name, label=rule == "label")


def _qualified_name_error(key: str) -> str | None:
    prefix, _, name = key.rpartition("/")
    if "/" in key and (not prefix or name_error(prefix, label=False)):
        return "prefix part " + (name_error(prefix, label=False) or "must be non-empty")
    if not name or len(name) > 63 or not _QUALIFIED_NAME.fullmatch(name):
        return ("name part must consist of alphanumeric characters, '-', '_' or '.', and "
                "must start and end with an alphanumeric character, at most 63 characters")
    return None


def validate_metadata(obj: Obj, *, name_rule: str, creating: bool) -> list[Cause]:
    """Checks on ``metadata`` shared by every kind."""
    meta = obj.get("metadata")
    if not isinstance(meta, dict):
        return [Cause("FieldValueRequired", "Required value", "metadata")]
    causes: list[Cause] = []
    name = meta.get("name")
    if not name and not (creating and meta.get("generateName")):
        causes.append(Cause("FieldValueRequired", "Required value: name or generateName is "
                                                  "required", "metadata.name"))
    elif name is not None:
        if not isinstance(name, str):
            causes.append(Cause("FieldValueInvalid", "Invalid value: must be a string",
                                "metadata.name"))
        elif (err := object_name_error(name, rule=name_rule)) is not None:
            causes.append(Cause("FieldValueInvalid", f'Invalid value: "{name}": {err}',
                                "metadata.name"))
    for fld in ("labels", "annotations"):
        value = meta.get(fld)
        if value is None:
            continue
        if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
            causes.append(Cause("FieldValueInvalid", "Invalid value: must be a map of strings",
                                f"metadata.{fld}"))
            continue
        for key in value:
            if (err := _qualified_name_error(str(key))) is not None:
                causes.append(Cause("FieldValueInvalid", f'Invalid value: "{key}": {err}',
                                    f"metadata.{fld}"))
        if fld == "labels":
            for key, val in value.items():
                if len(val) > 63 or not _LABEL_VALUE.fullmatch(val):
                    causes.append(Cause(
                        "FieldValueInvalid",
                        f'Invalid value: "{val}": a valid label must be an empty string or '
                        "consist of alphanumeric characters, '-', '_' or '.', and must start "
                        "and end with an alphanumeric character (at most 63 characters)",
                        f"metadata.labels.{key}"))
        elif sum(len(k) + len(v) for k, v in value.items()) > MAX_ANNOTATIONS_BYTES:
            causes.append(Cause("FieldValueTooLong", "Too long: must have at most 262144 bytes",
                                "metadata.annotations"))
    finalizers = meta.get("finalizers")
    if finalizers is not None and (not isinstance(finalizers, list)
                                   or not all(isinstance(f, str) for f in finalizers)):
        causes.append(Cause("FieldValueInvalid", "Invalid value: must be a list of strings",
                            "metadata.finalizers"))
    owners = meta.get("ownerReferences")
    if owners is not None:
        if not isinstance(owners, list):
            causes.append(Cause("FieldValueInvalid", "Invalid value: must be a list",
                                "metadata.ownerReferences"))
        else:
            for i, ref in enumerate(owners):
                missing = [k for k in ("apiVersion", "kind", "name", "uid")
                           if not isinstance(ref, dict) or not ref.get(k)]
                if missing:
                    causes.append(Cause("FieldValueRequired", "Required value",
                                        f"metadata.ownerReferences[{i}].{missing[0]}"))
            controllers = [r for r in owners if isinstance(r, dict) and r.get("controller")]
            if len(controllers) > 1:
                causes.append(Cause("FieldValueInvalid",
                                    "Invalid value: Only one reference can have Controller set "
                                    "to true", "metadata.ownerReferences"))
    return causes


# Built-in kinds whose registry counts metadata.generation upstream (v1.32): those with a
# spec that a controller acts on. ConfigMaps, Secrets, Pods, Services, claims... have none.
GENERATION_KINDS = frozenset({
    "Deployment", "ReplicaSet", "StatefulSet", "DaemonSet", "Job", "CronJob",
    "CustomResourceDefinition", "Ingress", "IngressClass", "NetworkPolicy",
    "PodDisruptionBudget", "EndpointSlice", "PodTemplate",
    "ValidatingWebhookConfiguration", "MutatingWebhookConfiguration",
})


def tracks_generation(kind: str, *, custom: bool) -> bool:
    """Whether objects of ``kind`` carry ``metadata.generation`` (custom resources: all)."""
    return custom or kind in GENERATION_KINDS


def prepare_create(obj: Obj, *, namespace: str | None, name: str, uid: str,
                   now: datetime.datetime, generation: bool = True) -> Obj:
    """The object as first stored: system fields set, client-set ones dropped."""
    out = copy.deepcopy(obj)
    meta = out.setdefault("metadata", {})
    for fld in SYSTEM_FIELDS:
        meta.pop(fld, None)
    meta.pop("resourceVersion", None)
    meta.pop("managedFields", None)
    meta["name"] = name
    if namespace is not None:
        meta["namespace"] = namespace
    else:
        meta.pop("namespace", None)
    meta["uid"] = uid
    meta["creationTimestamp"] = format_time(now)
    if generation:
        meta["generation"] = 1
    return out


def spec_view(obj: Obj) -> Obj:
    """What a generation counts: ``spec`` if present, else all but metadata and status."""
    if "spec" in obj:
        return {"spec": obj["spec"]}
    return {k: v for k, v in obj.items()
            if k not in ("metadata", "status", "apiVersion", "kind")}


def _whole_view(obj: Obj) -> Obj:
    return {k: v for k, v in obj.items() if k not in ("metadata", "apiVersion", "kind")}


def carry_over(old: Obj, new: Obj, *, has_status: bool, subresource: str,
               status_in_generation: bool = False, generation: bool = True) -> Obj:
    """Merge a client's ``new`` object onto the stored ``old`` one for an update.

    - system metadata always comes from ``old``;
    - through ``/status``, only ``status`` changes (spec and metadata stay as stored);
    - through the main resource of a type with a status subresource, ``status`` stays;
    - generation goes up by one when the spec view changed (everything but metadata when
      ``status_in_generation``: custom resources without a status subresource).
    """
    if subresource == "status":
        out = copy.deepcopy(old)
        if "status" in new:
            out["status"] = copy.deepcopy(new["status"])
        else:
            out.pop("status", None)
        return out
    out = copy.deepcopy(new)
    meta = out.setdefault("metadata", {})
    old_meta = old.get("metadata", {})
    for fld in SYSTEM_FIELDS:
        if fld in old_meta:
            meta[fld] = old_meta[fld]
        else:
            meta.pop(fld, None)
    meta.pop("managedFields", None)
    meta["name"] = old_meta.get("name")
    if "namespace" in old_meta:
        meta["namespace"] = old_meta["namespace"]
    if has_status:
        if "status" in old:
            out["status"] = copy.deepcopy(old["status"])
        else:
            out.pop("status", None)
    view = _whole_view if status_in_generation else spec_view
    if not generation:
        meta.pop("generation", None)
    elif view(old) != view(out):
        meta["generation"] = int(old_meta.get("generation") or 1) + 1
    return out


def finalizer_additions_error(old: Obj, new: Obj) -> str | None:
    """Upstream refuses new finalizers on an object that is being deleted."""
    old_meta = old.get("metadata", {})
    if not old_meta.get("deletionTimestamp"):
        return None
    added = set(new.get("metadata", {}).get("finalizers") or []) - set(
        old_meta.get("finalizers") or [])
    if added:
        return f"no new finalizers can be added if the object is being deleted, found new " \
               f"finalizers {sorted(added)!r}"
    return None


def ready_to_remove(obj: Obj) -> bool:
    """Deleted, no finalizer left, no grace period still running (pods), no spec finalizer
    (namespaces): the object can leave the store."""
    meta = obj.get("metadata", {})
    if not meta.get("deletionTimestamp") or meta.get("finalizers"):
        return False
    if int(meta.get("deletionGracePeriodSeconds") or 0) > 0:
        return False
    return not (obj.get("kind") == "Namespace" and (obj.get("spec") or {}).get("finalizers"))
