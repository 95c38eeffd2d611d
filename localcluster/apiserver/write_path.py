"""The order of a write (create, update, patch), in one place, as the backend runs it.

kube-apiserver's handlers run the same chain for every write (its ``create.go``,
``update.go`` and the generic registry's ``Store``); here it is:

1. **decode** (:func:`decode`): the decoder's field checks on the request body, per the
   request's fieldValidation (``wire.decoding``: unknown and duplicate fields, wrong
   types for built-in kinds; Strict refuses, Warn warns, Ignore drops). A PATCH is first
   applied to the stored object (``patch/``); what it produced is decoded.
2. **defaults**: system metadata (``rules.meta.prepare_create``/``carry_over``), the
   built-in kind's defaults (``rules.defaults``; on create also the default
   StorageClass of a claim, which reads the store, so it is the backend's), and for a
   custom resource its schema's pruning and defaults (:func:`schema_defaults`).
3. **mutating admission** (``admission.webhooks``): mutating webhooks one by one; after
   each patch the object keeps its system metadata and is defaulted again
   (:func:`redefault`).
4. **validation** (:func:`validate`, in this order): metadata (``rules.meta``); for a
   custom resource its schema (``schema.validation``), then its CEL rules
   (``schema.cel_rules``, only when the schema holds no other error); the built-in
   kind's rules (``rules.validation``), APIService and CRD rules
   (``kinds.apiservices``, ``rules.crds``); on update the immutable fields
   (``rules.immutability``) and finalizer additions during deletion. Every cause is
   gathered into one 422, so an invalid object never reaches a validating webhook.
5. **validating admission**: the validating webhooks, concurrently.
6. **storage**: the backend checks the key (create: 409 AlreadyExists only now, so a
   webhook's refusal of a duplicate is what the client gets) or resourceVersion
   (update) again, since admission awaited, and commits to ``storage.store`` (dry run:
   nothing stored).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

from .auth.authn import ADMIN, UserInfo
from .errors import APIError, Cause, invalid
from .kinds import apiservices
from .kinds.registry import ResourceType
from .rules import crds, defaults, immutability, meta, validation
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


def schema_defaults(rt: ResourceType, obj: Obj, options: WriteOptions) -> Obj:
    """Step 2 for a custom resource: fields its schema does not know are pruned (a
    warning each under fieldValidation Warn, a 400 under Strict, as the decoder does),
    then the schema's defaults are filled. Other kinds: ``obj`` as it is."""
    if rt.schema is None:
        return obj
    pruned = pruning.prune(obj, rt.schema)
    if options.field_validation != decoding.IGNORE:
        options.warnings.extend(decoding.unknown_fields_outcome(
            dropped_fields(obj, pruned), validation=options.field_validation))
    defaulted: Obj = pruning.apply_defaults(pruned, rt.schema)
    return defaulted


def validate(rt: ResourceType, obj: Obj, *, old: Obj | None) -> None:
    """Step 4: metadata, schema validation and CEL, the kind's rules and the transition
    rules; raises one 422 with every cause."""
    causes = meta.validate_metadata(obj, name_rule=rt.name_rule, creating=old is None)
    if rt.schema is not None:
        causes += _schema_causes(obj, rt.schema, old=old)
    causes += _kind_rules(rt, obj, old=old, causes=causes)
    if old is not None:
        causes += _transition_rules(rt, obj, old=old)
    if causes:
        raise invalid_object(rt, obj, causes)


def _schema_causes(obj: Obj, schema: dict[str, Any], *, old: Obj | None) -> list[Cause]:
    errors = schema_validation.validate(obj, schema)
    if not errors and cel_rules.schema_has_rules(schema):
        errors = cel_rules.validate(obj, schema, old=old)
    causes = []
    for err in errors:
        text = str(err)
        if err.path and text.startswith(err.path + ": "):
            text = text[len(err.path) + 2:]
        causes.append(Cause(err.type, text, err.path))
    return causes


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


def carry_over(rt: ResourceType, old: Obj, new: Obj, *, subresource: str) -> Obj:
    """Step 2 of an update (``rules.meta.carry_over`` with the kind's settings): system
    metadata from the stored object, status or spec kept as the subresource wants, the
    generation up by one when the spec changed."""
    return meta.carry_over(old, new, has_status=rt.has_status, subresource=subresource,
                           status_in_generation=rt.custom and not rt.has_status,
                           generation=meta.tracks_generation(rt.kind, custom=rt.custom))


def redefault(rt: ResourceType, before: Obj, patched: Obj, *, old: Obj | None,
              subresource: str = "") -> Obj:
    """Step 3, after each webhook's patch: system metadata as before it, then the kind's
    defaults again (its schema's for a custom resource, fields it does not know pruned
    silently), as kube-apiserver decodes and defaults a patched object; on an update
    (``old``, the stored object) the update's rules again, so a webhook's change of the
    spec moves the generation, and one of the status through the main resource is undone,
    as upstream's PrepareForUpdate after admission does."""
    out = keep_system_meta(before, patched)
    if old is None:
        keep_status = not rt.has_status or rt.kind == "Node"
        if not keep_status:
            out.pop("status", None)
        defaults.on_create(rt.kind, out, keep_status=keep_status)
    else:
        if subresource != "finalize":
            out = carry_over(rt, old, out, subresource=subresource)
        defaults.normalize(rt.kind, out)
    return schema_defaults(rt, out, WriteOptions())
