"""``/openapi/v2`` in protobuf (pure): a Swagger 2.0 document (the JSON form this server
makes) encoded as gnostic's ``openapi.v2.Document`` message, the form kubectl asks for
(``Accept: application/com.github.proto-openapi.spec.v2@v1.0+protobuf``) when it
validates input on the client (kinds whose PATCH takes no ``fieldValidation``: an
aggregated API's create-only kind, a ``List``) and for ``kubectl explain
--output=plaintext-openapiv2``.

Field numbers are those of gnostic's ``openapiv2/OpenAPIv2.proto``. Only what the JSON
documents here hold is encoded: schemas (types, properties, items, ``$ref``,
``additionalProperties``, ``allOf``, enums, bounds, vendor extensions), and operations
with their query and body parameters and responses. An ``Any`` (a default, an enum value,
a vendor extension's value) carries its value as YAML text; JSON is that.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Callable, Mapping
from typing import Any

CONTENT_TYPE = "application/com.github.proto-openapi.spec.v2.v1.0+protobuf"
"""What kube-openapi answers with (the ``@`` of the asked type is no valid media type)."""

Obj = Mapping[str, Any]


def _varint(value: int) -> bytes:
    value &= (1 << 64) - 1
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _key(number: int, wire: int) -> bytes:
    return _varint(number << 3 | wire)


def _bytes(number: int, data: bytes) -> bytes:
    return _key(number, 2) + _varint(len(data)) + data


def _string(number: int, value: Any) -> bytes:
    return _bytes(number, str(value).encode()) if value not in (None, "") else b""


def _bool(number: int, value: Any) -> bytes:
    return _key(number, 0) + b"\x01" if value is True else b""


def _int(number: int, value: Any) -> bytes:
    if isinstance(value, bool) or not isinstance(value, int) or value == 0:
        return b""
    return _key(number, 0) + _varint(value)


def _double(number: int, value: Any) -> bytes:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return b""
    return _key(number, 1) + struct.pack("<d", float(value))


def _strings(number: int, values: Any) -> bytes:
    return b"".join(_string(number, v) for v in values or [])


def _any(value: Any) -> bytes:
    """gnostic's Any: the value as YAML text (field 2)."""
    return _string(2, json.dumps(value, separators=(",", ":")))


def _message(number: int, data: bytes) -> bytes:
    return _bytes(number, data)


def _named(number: int, items: Any, encode: Callable[[Any], bytes]) -> bytes:
    """A map as gnostic's ordered Named* pairs: name (1), value (2)."""
    if not isinstance(items, Mapping):
        return b""
    return b"".join(_message(number, _string(1, name) + _message(2, encode(value)))
                    for name, value in items.items())


def _extensions(number: int, obj: Obj) -> bytes:
    return _named(number, {k: v for k, v in obj.items() if k.startswith("x-")}, _any)


def _v2_ref(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    """``{"allOf": [{"$ref": r}], …}`` (how v3 gives a reference a description) as v2
    writes it, ``{"$ref": r, …}``: kube-openapi's v2 models read a schema with neither a
    type nor properties nor a ``$ref`` as any value, so kubectl would not descend."""
    all_of = obj.get("allOf")
    if "$ref" in obj or not isinstance(all_of, list) or len(all_of) != 1 or not isinstance(
            all_of[0], Mapping) or set(all_of[0]) != {"$ref"}:
        return obj
    return {**{k: v for k, v in obj.items() if k != "allOf"}, "$ref": all_of[0]["$ref"]}


def schema(obj: Any) -> bytes:
    """One Schema message."""
    if not isinstance(obj, Mapping):
        return b""
    obj = _v2_ref(obj)
    out = [_string(1, obj.get("$ref")), _string(2, obj.get("format")),
           _string(3, obj.get("title")), _string(4, obj.get("description"))]
    if "default" in obj:
        out.append(_message(5, _any(obj["default"])))
    out += [_double(6, obj.get("multipleOf")), _double(7, obj.get("maximum")),
            _bool(8, obj.get("exclusiveMaximum")), _double(9, obj.get("minimum")),
            _bool(10, obj.get("exclusiveMinimum")), _int(11, obj.get("maxLength")),
            _int(12, obj.get("minLength")), _string(13, obj.get("pattern")),
            _int(14, obj.get("maxItems")), _int(15, obj.get("minItems")),
            _bool(16, obj.get("uniqueItems")), _int(17, obj.get("maxProperties")),
            _int(18, obj.get("minProperties")), _strings(19, obj.get("required"))]
    out += [_message(20, _any(v)) for v in obj.get("enum") or []]
    extra = obj.get("additionalProperties")
    if isinstance(extra, bool):
        out.append(_message(21, _key(2, 0) + (b"\x01" if extra else b"\x00")))
    elif isinstance(extra, Mapping):
        out.append(_message(21, _message(1, schema(extra))))
    kind = obj.get("type")
    if kind:
        out.append(_message(22, _strings(1, [kind] if isinstance(kind, str) else kind)))
    items = obj.get("items")
    if items is not None:
        listed = items if isinstance(items, list) else [items]
        out.append(_message(23, b"".join(_message(1, schema(i)) for i in listed)))
    out += [_message(24, schema(s)) for s in obj.get("allOf") or []]
    if isinstance(obj.get("properties"), Mapping):
        out.append(_message(25, _named(1, obj["properties"], schema)))
    out += [_bool(27, obj.get("readOnly")), _extensions(31, obj)]
    return b"".join(out)


def _parameter(obj: Obj) -> bytes:
    """A ParametersItem: a reference (2), else a body (Parameter 1 → 1) or a query, path
    or header parameter (Parameter 1 → NonBodyParameter 2 → 3, 4, 1)."""
    if "$ref" in obj:
        return _message(2, _string(1, obj["$ref"]))
    where = obj.get("in")
    if where == "body":
        body = (_string(1, obj.get("description")) + _string(2, obj.get("name"))
                + _string(3, where) + _bool(4, obj.get("required"))
                + _message(5, schema(obj.get("schema"))) + _extensions(6, obj))
        return _message(1, _message(1, body))
    sub = (_bool(1, obj.get("required")) + _string(2, where)
           + _string(3, obj.get("description")) + _string(4, obj.get("name")))
    if where == "query":
        sub += (_bool(5, obj.get("allowEmptyValue")) + _string(6, obj.get("type"))
                + _string(7, obj.get("format")) + _bool(20, obj.get("uniqueItems")))
        choice = 3
    else:
        sub += _string(5, obj.get("type")) + _string(6, obj.get("format")) + _bool(
            19, obj.get("uniqueItems"))
        choice = 4 if where == "path" else 1
    return _message(1, _message(2, _message(choice, sub)))


def _response(obj: Any) -> bytes:
    """A ResponseValue: a reference (2) or a Response (1)."""
    if not isinstance(obj, Mapping):
        return b""
    if "$ref" in obj:
        return _message(2, _string(1, obj["$ref"]))
    body = _string(1, obj.get("description"))
    if isinstance(obj.get("schema"), Mapping):
        body += _message(2, _message(1, schema(obj["schema"])))
    return _message(1, body + _extensions(5, obj))


def _operation(obj: Any) -> bytes:
    if not isinstance(obj, Mapping):
        return b""
    out = [_strings(1, obj.get("tags")), _string(2, obj.get("summary")),
           _string(3, obj.get("description")), _string(5, obj.get("operationId")),
           _strings(6, obj.get("produces")), _strings(7, obj.get("consumes"))]
    out += [_message(8, _parameter(p)) for p in obj.get("parameters") or []
            if isinstance(p, Mapping)]
    if isinstance(obj.get("responses"), Mapping):
        out.append(_message(9, _named(1, obj["responses"], _response)))
    out += [_strings(10, obj.get("schemes")), _bool(11, obj.get("deprecated")),
            _extensions(13, obj)]
    return b"".join(out)


_VERBS = {"get": 2, "put": 3, "post": 4, "delete": 5, "options": 6, "head": 7, "patch": 8}


def _path_item(obj: Any) -> bytes:
    if not isinstance(obj, Mapping):
        return b""
    out = [_string(1, obj.get("$ref"))]
    out += [_message(number, _operation(obj[verb])) for verb, number in _VERBS.items()
            if verb in obj]
    out += [_message(9, _parameter(p)) for p in obj.get("parameters") or []
            if isinstance(p, Mapping)]
    return b"".join(out) + _extensions(10, obj)


def document(swagger: Obj) -> bytes:
    """The ``openapi.v2.Document`` message of a Swagger 2.0 document."""
    info = swagger.get("info") or {}
    out = [_string(1, swagger.get("swagger")),
           _message(2, _string(1, info.get("title")) + _string(2, info.get("version"))
                    + _string(3, info.get("description"))),
           _string(3, swagger.get("host")), _string(4, swagger.get("basePath")),
           _strings(5, swagger.get("schemes")), _strings(6, swagger.get("consumes")),
           _strings(7, swagger.get("produces"))]
    paths = swagger.get("paths") or {}
    out.append(_message(8, _extensions(1, paths) + _named(
        2, {k: v for k, v in paths.items() if not k.startswith("x-")}, _path_item)))
    out.append(_message(9, _named(1, swagger.get("definitions") or {}, schema)))
    out.append(_extensions(16, swagger))
    return b"".join(out)
