"""OpenAPI v3 validation of custom resources, as a CRD version's ``openAPIV3Schema``.

kube-apiserver validates a custom resource in three steps, which the server calls in this
order: :func:`prune` drops fields the schema does not know, :func:`apply_defaults` fills
defaults, :func:`validate` reports every violation as a :class:`FieldError` (the 422's
causes). Pruning and defaulting live in :mod:`.pruning`; :mod:`.structural` rejects, at CRD
create time, the schemas Kubernetes calls non-structural (it uses :func:`validate` to check
defaults, so it imports this module and not the other way round).

Supported: type (integer vs number), nullable, enum, required, pattern, min/maxLength,
minimum/maximum (+exclusive), multipleOf, min/maxItems, uniqueItems, min/maxProperties,
the common string formats, additionalProperties (bool or schema), items, properties,
allOf/anyOf/oneOf/not, and the ``x-kubernetes-`` extensions int-or-string,
preserve-unknown-fields, embedded-resource and list-type (map/set). CEL rules
(``x-kubernetes-validations``) are not evaluated.
"""

from __future__ import annotations

import base64
import binascii
import ipaddress
import json
import math
import re
import uuid
from collections.abc import Callable
from datetime import datetime
from typing import Any

from . import go_regexp
from .field_errors import (
    DUPLICATE,
    FORBIDDEN,
    INVALID,
    NOT_SUPPORTED,
    REQUIRED,
    TOO_LONG,
    TOO_MANY,
    TYPE_INVALID,
    FieldError,
    index,
    join,
    render_value,
)

__all__ = ["FieldError", "validate"]

Schema = dict[str, Any]


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "integer" if value.is_integer() else "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object" if isinstance(value, dict) else type(value).__name__


def _type_ok(value: Any, wanted: str) -> bool:
    actual = _json_type(value)
    return actual == wanted or (wanted == "number" and actual == "integer")


def _in_body(path: str) -> str:
    return f"{path or 'body'} in body"


def _rfc3339(text: str) -> bool:
    if not re.fullmatch(r"\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}:\d{2}(\.\d+)?([Zz]|[+-]\d{2}:\d{2})",
                        text):
        return False
    try:
        datetime.fromisoformat(text.upper().replace("Z", "+00:00").replace(" ", "T"))
    except ValueError:
        return False
    return True


def _is_date(text: str) -> bool:
    if not re.fullmatch(r"\d{4}-\d{2}-\d{2}", text):
        return False
    try:
        datetime.strptime(text, "%Y-%m-%d")
    except ValueError:
        return False
    return True


def _is_base64(text: str) -> bool:
    try:
        base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        return False
    return True


def _is_ip(text: str, version: int) -> bool:
    try:
        return ipaddress.ip_address(text).version == version
    except ValueError:
        return False


def _is_cidr(text: str) -> bool:
    try:
        ipaddress.ip_network(text, strict=False)
    except ValueError:
        return False
    return "/" in text


def _is_uuid(text: str) -> bool:
    try:
        uuid.UUID(text)
    except ValueError:
        return False
    return len(text) == 36


_DURATION = re.compile(r"^([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$")
_HOSTNAME = re.compile(r"^(?=.{1,253}$)[A-Za-z0-9]([-A-Za-z0-9]{0,61}[A-Za-z0-9])?"
                       r"(\.[A-Za-z0-9]([-A-Za-z0-9]{0,61}[A-Za-z0-9])?)*$")

# Formats checked on strings; others (password, anything unknown) are accepted as is.
_STRING_FORMATS: dict[str, Callable[[str], bool]] = {
    "date-time": _rfc3339,
    "datetime": _rfc3339,
    "date": _is_date,
    "byte": _is_base64,
    "uri": lambda s: bool(re.match(r"^[A-Za-z][A-Za-z0-9+.-]*:", s)),
    "uuid": _is_uuid,
    "ipv4": lambda s: _is_ip(s, 4),
    "ipv6": lambda s: _is_ip(s, 6),
    "cidr": _is_cidr,
    "hostname": lambda s: bool(_HOSTNAME.match(s)),
    "email": lambda s: bool(re.fullmatch(r"[^@\s]+@[^@\s]+\.[^@\s]+", s)),
    "duration": lambda s: s == "0" or bool(_DURATION.match(s)),
    "mac": lambda s: bool(re.fullmatch(r"([0-9A-Fa-f]{2}[:-]){5}[0-9A-Fa-f]{2}", s)),
}
_INT_RANGES = {"int32": (-(2**31), 2**31 - 1), "int64": (-(2**63), 2**63 - 1)}


def validate(obj: Any, schema: Schema, *, path: str = "") -> list[FieldError]:
    """Every violation of ``schema`` by ``obj`` (empty when valid)."""
    errors: list[FieldError] = []
    _validate(obj, schema, path, errors, root=not path)
    return errors


def _validate(value: Any, schema: Schema, path: str, errors: list[FieldError], *,
              root: bool = False) -> None:
    if not isinstance(schema, dict) or not schema:
        return
    if value is None:
        if schema.get("nullable"):
            return
        if "type" in schema or schema.get("x-kubernetes-int-or-string"):
            wanted = schema.get("type") or "integer or string"
            errors.append(FieldError(path, TYPE_INVALID,
                                     f"{_in_body(path)} must be of type {wanted}: \"null\"",
                                     "null"))
            return
    if schema.get("x-kubernetes-int-or-string"):
        if _json_type(value) not in ("integer", "string"):
            actual = _json_type(value)
            errors.append(FieldError(path, TYPE_INVALID, f"{_in_body(path)} must be of type "
                                     f"integer or string: {render_value(actual)}", actual))
            return
    elif "type" in schema and not _type_ok(value, schema["type"]):
        # As kube-openapi: the "value" shown for a type error is the JSON type found.
        actual = _json_type(value)
        errors.append(FieldError(path, TYPE_INVALID, f"{_in_body(path)} must be of type "
                                 f"{schema['type']}: {render_value(actual)}", actual))
        return

    if "enum" in schema and not any(_json_equal(value, e) for e in schema["enum"]):
        # As Kubernetes: every allowed value is shown quoted, non-strings as their JSON.
        supported = ", ".join(json.dumps(e if isinstance(e, str) else json.dumps(e))
                              for e in schema["enum"])
        errors.append(FieldError(path, NOT_SUPPORTED, f"supported values: {supported}", value))

    if isinstance(value, str):
        _validate_string(value, schema, path, errors)
    elif isinstance(value, int | float) and not isinstance(value, bool):
        _validate_number(value, schema, path, errors)
    elif isinstance(value, list):
        _validate_array(value, schema, path, errors)
    elif isinstance(value, dict):
        _validate_object(value, schema, path, errors, root=root)

    for sub in schema.get("allOf") or []:
        _validate(value, sub, path, errors, root=root)
    if schema.get("anyOf") and not any(_passes(value, s, path) for s in schema["anyOf"]):
        errors.append(FieldError(path, INVALID,
                                 f"{_in_body(path)} must validate at least one schema (anyOf)",
                                 value))
    if schema.get("oneOf"):
        matched = sum(1 for s in schema["oneOf"] if _passes(value, s, path))
        if matched != 1:
            errors.append(FieldError(path, INVALID, f"{_in_body(path)} must validate one and "
                                     f"only one schema (oneOf). Found {matched} valid "
                                     f"alternatives", value))
    if isinstance(schema.get("not"), dict) and _passes(value, schema["not"], path):
        errors.append(FieldError(path, INVALID,
                                 f"{_in_body(path)} must not validate the schema (not)", value))


def _passes(value: Any, schema: Schema, path: str) -> bool:
    return not validate(value, schema, path=path)


def _json_equal(a: Any, b: Any) -> bool:
    return json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True) or (
        _json_type(a) in ("integer", "number") and _json_type(b) in ("integer", "number")
        and a == b)


def _validate_string(value: str, schema: Schema, path: str, errors: list[FieldError]) -> None:
    where = _in_body(path)
    length = len(value)
    if "minLength" in schema and length < schema["minLength"]:
        errors.append(FieldError(path, INVALID, f"{where} should be at least "
                                 f"{schema['minLength']} chars long", value))
    if "maxLength" in schema and length > schema["maxLength"]:
        errors.append(FieldError(path, TOO_LONG, f"may not be longer than "
                                 f"{schema['maxLength']}", value))
    if "pattern" in schema:
        try:
            matched = go_regexp.search(schema["pattern"], value)
        except go_regexp.PatternError:
            matched = True  # an invalid pattern is rejected when the CRD is created
        if not matched:
            errors.append(FieldError(path, INVALID,
                                     f"{where} should match '{schema['pattern']}'", value))
    check = _STRING_FORMATS.get(schema.get("format", ""))
    if check is not None and not check(value):
        errors.append(FieldError(path, INVALID, f"{where} must be of type "
                                 f"{schema['format']}: {render_value(value)}", value))


def _validate_number(value: float, schema: Schema, path: str, errors: list[FieldError]) -> None:
    where = _in_body(path)
    if "minimum" in schema:
        low = schema["minimum"]
        if schema.get("exclusiveMinimum") and value <= low:
            errors.append(FieldError(path, INVALID, f"{where} should be greater than "
                                     f"{render_value(low)}", value))
        elif value < low:
            errors.append(FieldError(path, INVALID, f"{where} should be greater than or equal "
                                     f"to {render_value(low)}", value))
    if "maximum" in schema:
        high = schema["maximum"]
        if schema.get("exclusiveMaximum") and value >= high:
            errors.append(FieldError(path, INVALID, f"{where} should be less than "
                                     f"{render_value(high)}", value))
        elif value > high:
            errors.append(FieldError(path, INVALID, f"{where} should be less than or equal "
                                     f"to {render_value(high)}", value))
    factor = schema.get("multipleOf")
    if factor:
        quotient = value / factor
        if not math.isclose(quotient, round(quotient), rel_tol=0, abs_tol=1e-9):
            errors.append(FieldError(path, INVALID, f"{where} should be a multiple of "
                                     f"{render_value(factor)}", value))
    bounds = _INT_RANGES.get(schema.get("format", ""))
    if bounds and not bounds[0] <= value <= bounds[1]:
        errors.append(FieldError(path, INVALID, f"{where} must be of type "
                                 f"{schema['format']}: {render_value(value)}", value))


def _validate_array(value: list[Any], schema: Schema, path: str,
                    errors: list[FieldError]) -> None:
    where = _in_body(path)
    if "minItems" in schema and len(value) < schema["minItems"]:
        errors.append(FieldError(path, INVALID, f"{where} should have at least "
                                 f"{schema['minItems']} items", len(value)))
    if "maxItems" in schema and len(value) > schema["maxItems"]:
        errors.append(FieldError(path, TOO_MANY, f"must have at most {schema['maxItems']} "
                                 f"items", len(value)))
    list_type = schema.get("x-kubernetes-list-type")
    if schema.get("uniqueItems") or list_type == "set":
        seen: set[str] = set()
        for i, item in enumerate(value):
            key = json.dumps(item, sort_keys=True)
            if key in seen:
                errors.append(FieldError(index(path, i), DUPLICATE, "", item))
            seen.add(key)
    if list_type == "map":
        keys = schema.get("x-kubernetes-list-map-keys") or []
        seen_keys: set[str] = set()
        for i, item in enumerate(value):
            if not isinstance(item, dict):
                continue
            ident = json.dumps([item.get(k) for k in keys])
            if ident in seen_keys:
                errors.append(FieldError(index(path, i), DUPLICATE, "",
                                         {k: item.get(k) for k in keys if k in item}))
            seen_keys.add(ident)
    items = schema.get("items")
    if isinstance(items, dict):
        for i, item in enumerate(value):
            _validate(item, items, index(path, i), errors)


def _validate_object(value: dict[str, Any], schema: Schema, path: str,
                     errors: list[FieldError], *, root: bool) -> None:
    where = _in_body(path)
    if "minProperties" in schema and len(value) < schema["minProperties"]:
        errors.append(FieldError(path, INVALID, f"{where} should have at least "
                                 f"{schema['minProperties']} properties", len(value)))
    if "maxProperties" in schema and len(value) > schema["maxProperties"]:
        errors.append(FieldError(path, TOO_MANY, f"must have at most "
                                 f"{schema['maxProperties']} items", len(value)))
    for name in schema.get("required") or []:
        if name not in value:
            errors.append(FieldError(join(path, name), REQUIRED))
    if schema.get("x-kubernetes-embedded-resource"):
        for name in ("apiVersion", "kind"):
            if not value.get(name):
                errors.append(FieldError(join(path, name), REQUIRED))
    properties = schema.get("properties") or {}
    additional = schema.get("additionalProperties")
    for key, item in value.items():
        child = join(path, key)
        if root and key == "metadata" and key in properties:
            # Only name and generateName of the root metadata are up to the CRD's schema.
            meta_schema = properties[key].get("properties") or {}
            if isinstance(item, dict):
                for name in ("name", "generateName"):
                    if name in meta_schema and name in item:
                        _validate(item[name], meta_schema[name], join(child, name), errors)
            continue
        if key in properties:
            _validate(item, properties[key], child, errors)
        elif isinstance(additional, dict):
            _validate(item, additional, child, errors)
        elif additional is False and not (root and key in ("apiVersion", "kind", "metadata")):
            errors.append(FieldError(child, FORBIDDEN, f"{child} in body is a forbidden "
                                     f"property"))
