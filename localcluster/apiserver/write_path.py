"""The order of a write (create, update, patch), in one place, as the backend runs it.

kube-apiserver's handlers run the same chain for every write; here it is:

1. **decode** (:func:`decode`): the decoder's field checks on the request body, per the
   request's fieldValidation (``wire.decoding``: unknown and duplicate fields, wrong
   types for built-in kinds; Strict refuses, Warn warns, Ignore drops). A PATCH is first
   applied to the stored object (``patch/``); what it produced is decoded.
2. **defaults**: system metadata (``rules.meta.prepare_create``/``carry_over``), then the
   built-in kind's defaults (``rules.defaults``; on create also the default
   StorageClass of a claim, which reads the store, so it is the backend's).
3. **validation** (:func:`validate`, in this order): metadata (``rules.meta``); for a
   custom resource its schema: prune unknown fields (``schema.pruning``), fill schema
   defaults, validate the schema (``schema.validation``), then its CEL rules
   (``schema.cel_rules``, only when the schema holds no other error); the built-in
   kind's rules (``rules.validation``), APIService and CRD rules
   (``kinds.apiservices``, ``rules.crds``); on update the immutable fields
   (``rules.immutability``) and finalizer additions during deletion. Every cause is
   gathered into one 422.
4. **admission** (``admission.webhooks``): mutating webhooks one by one, then validating
   webhooks; an object a webhook changed keeps its system metadata and is validated again
   (:func:`after_admission`, step 3 with fieldValidation Ignore).
5. **storage**: the backend checks the key (create) or resourceVersion (update) again,
   since admission awaited, and commits to ``storage.store`` (dry run: nothing stored).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

from .auth.authn import ADMIN, UserInfo
from .errors import APIError, Cause, invalid
from .kinds import apiservices
from .kinds.registry import ResourceType
from .rules import crds, immutability, meta, validation
from .rules.crds import CRD_GR
from .rules.names import dropped_fields
from .schema import cel_rules, pruning
from .schema import validation as schema_validation
from .wire import decoding

Obj = dict[str, Any]


@dataclass(frozen=True)
class WriteOptions:
    """How a write was asked for. ``field_validation`` is the request's fieldValidation
    (internal writes: Ignore); ``duplicates`` the keys the request body repeated;
    ``warnings`` collects what the answer's ``Warning`` headers say."""

    user: UserInfo = ADMIN
    dry_run: bool = False
    field_validation: str = decoding.IGNORE
    duplicates: tuple[str, ...] = ()
    warnings: list[str] = field(default_factory=list)


def decode(rt: ResourceType, body: Obj, options: WriteOptions) -> None:
    """Step 1: the decoder's field checks on a request body (unknown fields dropped in
    place)."""
    options.warnings.extend(decoding.check_fields(
        body, kind=rt.kind, group=rt.group, version=rt.version, custom=rt.custom,
        validation=options.field_validation, duplicates=options.duplicates))


def invalid_object(rt: ResourceType, obj: Obj, causes: list[Cause]) -> APIError:
    name = (obj.get("metadata") or {}).get("name") or ""
    return invalid(kind=rt.kind, group=rt.group, name=str(name), causes=causes)


def validate(rt: ResourceType, obj: Obj, *, old: Obj | None, options: WriteOptions) -> Obj:
    """Step 3: metadata, schema (prune, defaults, validation, CEL), the kind's rules and
    the transition rules; returns the object to store or raises one 422 with every
    cause."""
    causes = meta.validate_metadata(obj, name_rule=rt.name_rule, creating=old is None)
    if rt.schema is not None:
        obj = _custom_resource_schema(obj, rt.schema, old=old, options=options, causes=causes)
    causes += _kind_rules(rt, obj, old=old, causes=causes)
    if old is not None:
        causes += _transition_rules(rt, obj, old=old)
    if causes:
        raise invalid_object(rt, obj, causes)
    return obj


def _custom_resource_schema(obj: Obj, schema: dict[str, Any], *, old: Obj | None,
                            options: WriteOptions, causes: list[Cause]) -> Obj:
    """Prune → schema defaults → schema validation → CEL, as for a CRD version."""
    pruned = pruning.prune(obj, schema)
    if options.field_validation != decoding.IGNORE:
        options.warnings.extend(decoding.unknown_fields_outcome(
            dropped_fields(obj, pruned), validation=options.field_validation))
    obj = pruning.apply_defaults(pruned, schema)
    errors = schema_validation.validate(obj, schema)
    if not errors and cel_rules.schema_has_rules(schema):
        errors = cel_rules.validate(obj, schema, old=old)
    for err in errors:
        text = str(err)
        if err.path and text.startswith(err.path + ": "):
            text = text[len(err.path) + 2:]
        causes.append(Cause(err.type, text, err.path))
    return obj


def _kind_rules(rt: ResourceType, obj: Obj, *, old: Obj | None,
                causes: list[Cause]) -> list[Cause]:
    """Built-in kinds' rules, then APIService and CRD rules (a CRD's immutable fields are
    only compared when nothing else is wrong with it)."""
    found: list[Cause] = []
    if not rt.custom:
        found += validation.validate(rt.kind, obj)
    if rt.group_resource == apiservices.APISERVICE_GR:
        found += apiservices.validate(obj)
    if rt.group_resource == CRD_GR:
        found += crds.validate_crd(obj)
        if old is not None and not causes and not found:
            found += crds.immutable_changes(old, obj)
    return found


def _transition_rules(rt: ResourceType, obj: Obj, *, old: Obj) -> list[Cause]:
    found = immutability.immutable_changes(rt.kind, old, obj)
    err_text = meta.finalizer_additions_error(old, obj)
    if err_text:
        found.append(Cause("FieldValueForbidden", "Forbidden: " + err_text,
                           "metadata.finalizers"))
    return found


def keep_system_meta(before: Obj, after: Obj) -> Obj:
    """Webhooks may not rewrite identity or server-owned metadata."""
    out = copy.deepcopy(after)
    out["apiVersion"], out["kind"] = before["apiVersion"], before["kind"]
    m = out.setdefault("metadata", {})
    for fld in (*meta.SYSTEM_FIELDS, "name", "namespace", "resourceVersion"):
        if fld in before["metadata"]:
            m[fld] = before["metadata"][fld]
    return out


def after_admission(rt: ResourceType, before: Obj, admitted: Obj, *, old: Obj | None) -> Obj:
    """Step 4's tail: a mutated object keeps its system metadata and is validated again."""
    return validate(rt, keep_system_meta(before, admitted), old=old, options=WriteOptions())
