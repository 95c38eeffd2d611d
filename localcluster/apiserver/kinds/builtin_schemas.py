"""Kubernetes' own schemas for the built-in kinds, as of one stated release (v1.32).

kube-apiserver decodes a built-in object into its Go type: a field the type does not have
is an unknown field (refused under ``fieldValidation=Strict``, a warning under ``Warn``,
dropped under ``Ignore``), a value of the wrong JSON type fails the decoding (400). The
same types are what ``/openapi/v3`` and ``/openapi/v2`` describe, and what ``kubectl
explain`` prints. Their definitions come from the ``kubernetes-validate`` package, which
ships upstream's OpenAPI definitions of every release converted to JSON Schema; this module
reads the v1.32 set (the kubectl this project is tested with) and offers it in two forms:

- :func:`openapi_definitions`: OpenAPI shapes (one ``type``, ``$ref`` into
  ``#/components/schemas`` or ``#/definitions``), for the OpenAPI documents;
- :func:`check`: a walk of an object against the compiled type tree, reporting unknown
  fields (and removing them when asked) and type mismatches with their field paths.

Checks here are the decoder's, not validation: enum values, formats other than base64
bytes, and required fields are left to ``rules/validation.py``, as upstream leaves them to its
validation functions.
"""

from __future__ import annotations

import base64
import binascii
import copy
import json
from dataclasses import dataclass, field
from functools import cache
from importlib import resources
from typing import Any

KUBERNETES_VERSION = "v1.32.0"
_DATA = f"kubernetes-json-schema/{KUBERNETES_VERSION}-local/_definitions.json"
_INT_OR_STRING = "io.k8s.apimachinery.pkg.util.intstr.IntOrString"
_QUANTITY = "io.k8s.apimachinery.pkg.api.resource.Quantity"
OBJECT_META = "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"

Schema = dict[str, Any]


@cache
def _raw_definitions() -> dict[str, Schema]:
    text = resources.files("kubernetes_validate").joinpath(_DATA).read_text("utf-8")
    defs: dict[str, Schema] = json.loads(text)["$defs"]
    return defs


def _ref_name(ref: str) -> str:
    return ref.rsplit("/", 1)[-1]


# -- OpenAPI form ----------------------------------------------------------------------------


def _to_openapi(node: Any, prefix: str) -> Any:
    if isinstance(node, list):
        return [_to_openapi(item, prefix) for item in node]
    if not isinstance(node, dict):
        return node
    out: Schema = {}
    for key, value in node.items():
        if key == "type":
            if _type_of(node) != "any":
                out["type"] = _type_of(node)
        elif key == "$ref":
            out["$ref"] = prefix + _ref_name(value)
        elif key in ("properties", "additionalProperties", "items"):
            if key == "properties":
                out[key] = {k: _wrap_ref(_to_openapi(v, prefix)) for k, v in value.items()}
            else:
                out[key] = _wrap_ref(_to_openapi(value, prefix))
        elif key in ("$schema", "$id"):
            continue
        else:
            out[key] = _to_openapi(value, prefix)
    return out


def _wrap_ref(node: Any) -> Any:
    """As upstream's v3 documents: a reference with siblings is written ``allOf: [$ref]``."""
    if isinstance(node, dict) and "$ref" in node and len(node) > 1:
        node = dict(node)
        node["allOf"] = [{"$ref": node.pop("$ref")}]
    return node


@cache
def _openapi(prefix: str) -> dict[str, Schema]:
    out: dict[str, Schema] = {}
    for name, schema in _raw_definitions().items():
        if name == _INT_OR_STRING:
            out[name] = {"description": schema.get("description", ""), "type": "string",
                         "format": "int-or-string"}
        elif name == _QUANTITY:
            out[name] = {"description": schema.get("description", ""), "type": "string"}
        else:
            out[name] = _to_openapi(schema, prefix)
    return out


def openapi_definitions(*, v2: bool = False) -> dict[str, Schema]:
    """Every definition in OpenAPI form (shared: callers must not modify it)."""
    return _openapi("#/definitions/" if v2 else "#/components/schemas/")


def referenced(names: list[str], *, v2: bool = False) -> dict[str, Schema]:
    """``names`` and every definition they reach, for a self-contained document."""
    defs = openapi_definitions(v2=v2)
    out: dict[str, Schema] = {}
    todo = [n for n in names if n in defs]
    while todo:
        name = todo.pop()
        if name in out:
            continue
        out[name] = defs[name]
        todo.extend(_refs_in(defs[name]) - out.keys())
    return {k: copy.deepcopy(v) for k, v in sorted(out.items())}


def _refs_in(node: Any) -> set[str]:
    found: set[str] = set()
    stack = [node]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            ref = item.get("$ref")
            if isinstance(ref, str):
                found.add(_ref_name(ref))
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return found


@cache
def _by_kind() -> dict[tuple[str, str, str], str]:
    out: dict[tuple[str, str, str], str] = {}
    for name, schema in _raw_definitions().items():
        for gvk in schema.get("x-kubernetes-group-version-kind") or []:
            out[(gvk["group"], gvk["version"], gvk["kind"])] = name
    return out


def definition_name(group: str, version: str, kind: str) -> str | None:
    """The definition describing ``group/version, kind``, or None when there is none."""
    return _by_kind().get((group, version, kind))


# -- the checking form -----------------------------------------------------------------------


@dataclass(eq=False)
class _Node:
    """One compiled type: ``kind`` is object, map, array, string, integer, number,
    boolean, int-or-string, quantity, bytes or any."""

    kind: str = "any"
    props: dict[str, _Node] = field(default_factory=dict)
    item: _Node | None = None


_SCALARS = {"string", "integer", "number", "boolean"}


@cache
def _compiled() -> dict[str, _Node]:
    return {}


def _node_for(name: str) -> _Node:
    nodes = _compiled()
    node = nodes.get(name)
    if node is None:
        node = nodes[name] = _Node()
        _fill(node, _raw_definitions()[name])
    return node


def _compile(schema: Schema) -> _Node:
    ref = schema.get("$ref")
    if isinstance(ref, str):
        return _node_for(_ref_name(ref))
    node = _Node()
    _fill(node, schema)
    return node


def _type_of(schema: Schema) -> str:
    """The JSON type of a schema (``type`` is a string, or a list with "null")."""
    wanted = schema.get("type")
    if isinstance(wanted, list):
        wanted = next((t for t in wanted if t != "null"), None)
    return wanted if isinstance(wanted, str) else "any"


def _fill(node: _Node, schema: Schema) -> None:
    if "oneOf" in schema:
        types = {_type_of(alt) for alt in schema["oneOf"]}
        node.kind = "int-or-string" if "integer" in types else "quantity"
        return
    wanted = _type_of(schema)
    if wanted == "object":
        if "properties" in schema:
            node.kind = "object"
            node.props = {k: _compile(v) for k, v in schema["properties"].items()}
        elif isinstance(schema.get("additionalProperties"), dict):
            node.kind = "map"
            node.item = _compile(schema["additionalProperties"])
        else:
            node.kind = "any"
    elif wanted == "array":
        node.kind = "array"
        items = schema.get("items")
        node.item = _compile(items) if isinstance(items, dict) else _Node()
    elif wanted == "string" and schema.get("format") == "byte":
        node.kind = "bytes"
    elif wanted in _SCALARS:
        node.kind = wanted
    elif "properties" in schema:
        node.kind = "object"
        node.props = {k: _compile(v) for k, v in schema["properties"].items()}


@dataclass(frozen=True)
class TypeError_:
    """A value the decoder cannot take: at ``path``, a ``found`` where ``wanted`` goes."""

    path: str
    found: str
    wanted: str
    detail: str = ""


@dataclass
class Report:
    unknown: list[str] = field(default_factory=list)
    type_errors: list[TypeError_] = field(default_factory=list)


_WANTED = {"object": "object", "map": "object", "array": "array", "string": "string",
           "bytes": "base64 string", "integer": "integer", "number": "number",
           "boolean": "boolean", "int-or-string": "integer or string",
           "quantity": "string or number"}


def _found(value: Any) -> str:
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    return "array" if isinstance(value, list) else "object"


def check(obj: Any, definition: str, *, prune: bool, path: str = "") -> Report:
    """Walk ``obj`` against ``definition``; with ``prune`` unknown fields are removed."""
    report = Report()
    _walk(obj, _node_for(definition), path, report, prune)
    return report


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _walk(value: Any, node: _Node, path: str, report: Report, prune: bool) -> None:
    kind = node.kind
    if value is None or kind == "any":
        return
    if kind == "object":
        if not isinstance(value, dict):
            report.type_errors.append(TypeError_(path, _found(value), "object"))
            return
        props = node.props
        unknown = []
        for key, item in value.items():
            child = props.get(key)
            if child is None:
                unknown.append(key)
            elif item is not None and child.kind != "any":
                _walk(item, child, _join(path, key), report, prune)
        for key in unknown:
            report.unknown.append(_join(path, key))
            if prune:
                del value[key]
    elif kind == "map":
        if not isinstance(value, dict):
            report.type_errors.append(TypeError_(path, _found(value), "object"))
            return
        item_node = node.item
        if item_node is not None and item_node.kind != "any":
            for key, item in value.items():
                _walk(item, item_node, _join(path, str(key)), report, prune)
    elif kind == "array":
        if not isinstance(value, list):
            report.type_errors.append(TypeError_(path, _found(value), "array"))
            return
        item_node = node.item
        if item_node is not None and item_node.kind != "any":
            for i, item in enumerate(value):
                _walk(item, item_node, f"{path}[{i}]", report, prune)
    else:
        _scalar(value, kind, path, report)


def _scalar(value: Any, kind: str, path: str, report: Report) -> None:
    ok: bool
    if kind == "string":
        ok = isinstance(value, str)
    elif kind == "boolean":
        ok = isinstance(value, bool)
    elif kind == "integer":
        ok = not isinstance(value, bool) and (
            isinstance(value, int) or (isinstance(value, float) and value.is_integer()))
    elif kind == "number":
        ok = not isinstance(value, bool) and isinstance(value, int | float)
    elif kind == "int-or-string":
        ok = isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool))
    elif kind == "quantity":
        ok = isinstance(value, str) or (not isinstance(value, bool)
                                        and isinstance(value, int | float))
    else:  # bytes
        if not isinstance(value, str):
            ok = False
        else:
            try:
                base64.b64decode(value, validate=True)
            except (binascii.Error, ValueError) as err:
                report.type_errors.append(TypeError_(path, "string", _WANTED[kind],
                                                     f"illegal base64 data ({err})"))
            return
    if not ok:
        report.type_errors.append(TypeError_(path, _found(value), _WANTED[kind]))
