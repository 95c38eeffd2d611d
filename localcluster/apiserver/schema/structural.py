"""The checks that make a CRD schema "structural", applied when a CRD is created.

apiextensions.k8s.io/v1 only accepts schemas where every field has a type (or is
int-or-string / preserve-unknown-fields), where allOf/anyOf/oneOf/not only add value
validations, where the root is an object whose metadata only constrains name and
generateName, and without ``$ref``, ``additionalProperties: false`` or
``uniqueItems: true``. Defaults must themselves be valid and survive pruning. Messages
carry a path inside the schema (``properties[spec].type: Required value: ...``); the
server prefixes them with ``spec.versions[i].schema.openAPIV3Schema``.
"""

from __future__ import annotations

from typing import Any

from . import go_regexp
from .pruning import prune_with_report
from .validation import validate

Schema = dict[str, Any]

_TYPES = ("object", "array", "string", "integer", "number", "boolean")
_FORBIDDEN_KEYS = ("$ref", "$schema", "id", "definitions", "dependencies",
                   "patternProperties", "additionalItems")
# What a node inside allOf/anyOf/oneOf/not must not set: they only add validations.
_NOT_IN_JUNCTORS = ("type", "default", "nullable", "additionalProperties", "description",
                    "x-kubernetes-preserve-unknown-fields", "x-kubernetes-embedded-resource",
                    "x-kubernetes-int-or-string", "x-kubernetes-list-type",
                    "x-kubernetes-list-map-keys", "x-kubernetes-map-type")
_LIST_TYPES = ("atomic", "set", "map")


def validate_structural(schema: Any) -> list[str]:
    """Why ``schema`` is not a structural schema; empty when it is."""
    errors: list[str] = []
    if not isinstance(schema, dict):
        return ["Invalid value: the schema must be an object"]
    if schema.get("type") is None:
        errors.append("type: Required value: must not be empty at the root")
    elif schema.get("type") != "object":
        errors.append(f'type: Invalid value: "{schema.get("type")}": must be object at the root')
    metadata = (schema.get("properties") or {}).get("metadata")
    if isinstance(metadata, dict):
        extra = sorted(set(metadata.get("properties") or {}) - {"name", "generateName"})
        if extra or metadata.get("type", "object") != "object" or any(
                k in metadata for k in ("additionalProperties", "default",
                                        "x-kubernetes-preserve-unknown-fields")):
            errors.append("properties[metadata]: Forbidden: must not specify anything other "
                          "than name and generateName, but metadata is implicitly specified")
    _check(schema, "", errors, needs_type=False)
    return errors


def _at(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _check(node: Any, path: str, errors: list[str], *, needs_type: bool,
           field_kind: str = "object fields") -> None:
    if not isinstance(node, dict):
        errors.append(f"{path or 'schema'}: Invalid value: must be an object")
        return
    for key in _FORBIDDEN_KEYS:
        if key in node:
            errors.append(f"{_at(path, key)}: Forbidden: {key} is not supported")
    typ = node.get("type")
    int_or_string = node.get("x-kubernetes-int-or-string") is True
    preserve = node.get("x-kubernetes-preserve-unknown-fields")
    if typ is not None and typ not in _TYPES:
        errors.append(f'{_at(path, "type")}: Unsupported value: "{typ}": supported values: '
                      + ", ".join(f'"{t}"' for t in _TYPES))
    if needs_type and not typ and not int_or_string and preserve is not True:
        errors.append(f"{_at(path, 'type')}: Required value: must not be empty for specified "
                      f"{field_kind}")
    if int_or_string and typ:
        errors.append(f'{_at(path, "type")}: Invalid value: "{typ}": must be empty if '
                      f"x-kubernetes-int-or-string is true")
    if preserve is False:
        errors.append(f"{_at(path, 'x-kubernetes-preserve-unknown-fields')}: Invalid value: "
                      f"false: must be true or undefined")
    if node.get("x-kubernetes-embedded-resource") and (
            typ != "object" or not (node.get("properties") or preserve)):
        errors.append(f"{_at(path, 'x-kubernetes-embedded-resource')}: Invalid value: true: "
                      f"must be used with type object and properties or "
                      f"x-kubernetes-preserve-unknown-fields")
    if node.get("uniqueItems") is True:
        errors.append(f"{_at(path, 'uniqueItems')}: Forbidden: uniqueItems cannot be set to "
                      f"true since the runtime complexity becomes quadratic")
    additional = node.get("additionalProperties")
    if additional is False:
        errors.append(f"{_at(path, 'additionalProperties')}: Forbidden: additionalProperties "
                      f"cannot be set to false")
    if additional is not None and node.get("properties"):
        errors.append(f"{_at(path, 'additionalProperties')}: Forbidden: additionalProperties "
                      f"and properties are mutual exclusive")
    if "pattern" in node:
        try:
            go_regexp.compile_pattern(node["pattern"])
        except go_regexp.PatternError as err:
            errors.append(f'{_at(path, "pattern")}: Invalid value: "{node["pattern"]}": '
                          f"must be a valid regular expression, but isn't: {err}")
    _check_list_type(node, path, errors)

    for name, sub in (node.get("properties") or {}).items():
        _check(sub, f"{_at(path, 'properties')}[{name}]", errors, needs_type=True)
    if isinstance(additional, dict):
        _check(additional, _at(path, "additionalProperties"), errors, needs_type=True)
    if "items" in node:
        if isinstance(node["items"], list):
            errors.append(f"{_at(path, 'items')}: Forbidden: items must be a schema object "
                          f"and not an array")
        else:
            _check(node["items"], _at(path, "items"), errors, needs_type=True,
                   field_kind="array items")
    elif typ == "array":
        errors.append(f"{_at(path, 'items')}: Required value: must be specified")
    for junctor in ("allOf", "anyOf", "oneOf"):
        for i, sub in enumerate(node.get(junctor) or []):
            _check_junctor(sub, f"{_at(path, junctor)}[{i}]", node, errors)
    if "not" in node:
        _check_junctor(node["not"], _at(path, "not"), node, errors)
    if "default" in node:
        _check_default(node, path, errors)


def _check_list_type(node: Schema, path: str, errors: list[str]) -> None:
    list_type = node.get("x-kubernetes-list-type")
    keys = node.get("x-kubernetes-list-map-keys")
    items = node.get("items") if isinstance(node.get("items"), dict) else {}
    assert isinstance(items, dict)
    where = _at(path, "x-kubernetes-list-type")
    if list_type is not None and list_type not in _LIST_TYPES:
        errors.append(f'{where}: Unsupported value: "{list_type}": supported values: '
                      '"atomic", "set", "map"')
    if list_type is not None and node.get("type") != "array":
        errors.append(f"{where}: Invalid value: must only be used on type array")
    if keys is not None and list_type != "map":
        errors.append(f"{_at(path, 'x-kubernetes-list-map-keys')}: Forbidden: must not be set "
                      f"if x-kubernetes-list-type is not map")
    if list_type == "map":
        if items.get("type") != "object":
            errors.append(f"{_at(path, 'items.type')}: Invalid value: must be object if "
                          f"x-kubernetes-list-type is map")
        if not keys:
            errors.append(f"{_at(path, 'x-kubernetes-list-map-keys')}: Required value: must "
                          f"not be empty if x-kubernetes-list-type is map")
        for key in keys or []:
            prop = (items.get("properties") or {}).get(key)
            if not isinstance(prop, dict):
                errors.append(f"{_at(path, 'x-kubernetes-list-map-keys')}: Invalid value: "
                              f'"{key}": entries must all be names of item properties')
            elif prop.get("type") in ("object", "array"):
                errors.append(f"{_at(path, 'x-kubernetes-list-map-keys')}: Invalid value: "
                              f'"{key}": must be a scalar property')
    if list_type == "set" and items.get("type") in ("object", "array"):
        errors.append(f"{where}: Invalid value: set lists must have scalar items")


def _check_junctor(sub: Any, path: str, parent: Schema, errors: list[str]) -> None:
    if not isinstance(sub, dict):
        errors.append(f"{path}: Invalid value: must be an object")
        return
    # The one exception: under x-kubernetes-int-or-string, junctors may name the two types
    # (kubebuilder's "anyOf: [{type: integer}, {type: string}]").
    int_or_string = parent.get("x-kubernetes-int-or-string") is True
    for key in _NOT_IN_JUNCTORS:
        if key in sub and not (key == "type" and int_or_string
                               and sub[key] in ("integer", "string")):
            errors.append(f"{_at(path, key)}: Forbidden: must be empty to be structural")
    parent_props = parent.get("properties") or {}
    for name, prop in (sub.get("properties") or {}).items():
        if name not in parent_props and not isinstance(parent.get("additionalProperties"),
                                                       dict):
            errors.append(f"{_at(path, 'properties')}[{name}]: Forbidden: must not specify "
                          f"a field not specified in the structural part of the schema")
        elif isinstance(prop, dict):
            _check_junctor(prop, f"{_at(path, 'properties')}[{name}]",
                           parent_props.get(name) or {}, errors)
    if isinstance(sub.get("items"), dict):
        parent_items = parent.get("items")
        _check_junctor(sub["items"], _at(path, "items"),
                       parent_items if isinstance(parent_items, dict) else {}, errors)
    for junctor in ("allOf", "anyOf", "oneOf"):
        for i, inner in enumerate(sub.get(junctor) or []):
            _check_junctor(inner, f"{_at(path, junctor)}[{i}]", parent, errors)
    if "not" in sub:
        _check_junctor(sub["not"], _at(path, "not"), parent, errors)


def _check_default(node: Schema, path: str, errors: list[str]) -> None:
    default = node["default"]
    where = _at(path, "default")
    if default is None and not node.get("nullable"):
        errors.append(f"{where}: Invalid value: null: must not be null for a non-nullable field")
        return
    probe = {k: v for k, v in node.items() if k != "default"}
    _, pruned = prune_with_report({"v": default}, {"type": "object", "properties": {"v": probe}})
    if pruned:
        errors.append(f"{where}: Invalid value: must not have unknown fields "
                      f"({', '.join(p.removeprefix('v.') for p in pruned)})")
    for error in validate(default, probe, path=where):
        errors.append(str(error))
