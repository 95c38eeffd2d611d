"""Request bodies decoded as kube-apiserver decodes them: JSON or YAML, bounded, with the
field-validation outcomes (unknown fields, duplicate fields, values of the wrong type).

kube-apiserver decodes a body into the kind's Go type. What that decoder notices is
reported according to the request's ``fieldValidation``: ``Strict`` (what kubectl sends)
refuses the request with ``strict decoding error: unknown field "spec.x", duplicate field
"y"``; ``Warn`` (the default) answers with one ``Warning`` header per problem and drops
the unknown fields; ``Ignore`` drops them silently. A value of the wrong type is never
decodable: 400 naming the field. JSON nested deeper than :data:`MAX_DEPTH` is refused with
400 (this server recurses over objects; kube-apiserver's decoder stops at 10000 levels).
YAML bodies (``application/yaml``) are read with PyYAML's safe loader and must expand to
at most :data:`MAX_YAML_NODES` values, so aliases cannot multiply a small body into a huge
object.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import yaml

from ..errors import APIError, bad_request
from ..kinds import builtin_schemas
from . import warnings

Obj = dict[str, Any]

MAX_DEPTH = 200
MAX_YAML_NODES = 1_000_000
STRICT, WARN, IGNORE = "Strict", "Warn", "Ignore"
FIELD_VALIDATIONS = (STRICT, WARN, IGNORE)


class DecodeError(ValueError):
    """The body cannot be decoded (the message says why)."""


def _pairs_hook(duplicates: list[str]) -> Callable[[list[tuple[str, Any]]], Obj]:
    def build(pairs: list[tuple[str, Any]]) -> Obj:
        obj = dict(pairs)
        if len(obj) != len(pairs):
            seen: set[str] = set()
            for key, _ in pairs:
                if key in seen and key not in duplicates:
                    duplicates.append(key)
                seen.add(key)
        return obj
    return build


def depth_exceeds(value: Any, limit: int) -> bool:
    """Whether ``value`` nests objects/arrays deeper than ``limit`` (no recursion)."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if depth > limit:
            return True
        if isinstance(item, dict):
            stack.extend((v, depth + 1) for v in item.values() if isinstance(v, dict | list))
        elif isinstance(item, list):
            stack.extend((v, depth + 1) for v in item if isinstance(v, dict | list))
    return False


def load_json(raw: bytes) -> tuple[Any, list[str]]:
    """The decoded body and the keys that appeared twice in one object."""
    duplicates: list[str] = []
    try:
        value = json.loads(raw, object_pairs_hook=_pairs_hook(duplicates))
    except RecursionError:
        raise DecodeError(f"the request body nests deeper than {MAX_DEPTH} levels") from None
    except (ValueError, UnicodeDecodeError) as err:
        raise DecodeError(f"the request body is not valid JSON: {err}") from None
    if raw.count(b"{") + raw.count(b"[") > MAX_DEPTH and depth_exceeds(value, MAX_DEPTH):
        raise DecodeError(f"the request body nests deeper than {MAX_DEPTH} levels")
    return value, duplicates


class _Loader(yaml.SafeLoader):  # type: ignore[misc]
    """The safe loader, with timestamps left as strings (as Kubernetes' YAML→JSON does)."""


_Loader.yaml_implicit_resolvers = {
    first: [(tag, rx) for tag, rx in resolvers if tag != "tag:yaml.org,2002:timestamp"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}


def _expanded_size_exceeds(value: Any, *, nodes: int, depth: int) -> str | None:
    """Why the object, aliases expanded, is too large or too deep (None when it is not)."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    count = 0
    while stack:
        item, level = stack.pop()
        count += 1
        if count > nodes:
            return f"expands to more than {nodes} values"
        if level > depth:
            return f"nests deeper than {depth} levels"
        if isinstance(item, dict):
            stack.extend((k, level + 1) for k in item)
            stack.extend((v, level + 1) for v in item.values())
        elif isinstance(item, list):
            stack.extend((v, level + 1) for v in item)
    return None


def load_yaml(raw: bytes) -> Any:
    """One YAML document as the JSON value it stands for."""
    try:
        value = yaml.load(raw, Loader=_Loader)  # noqa: S506 -- a SafeLoader subclass
    except RecursionError:
        raise DecodeError(f"the request body nests deeper than {MAX_DEPTH} levels") from None
    except yaml.YAMLError as err:
        raise DecodeError(f"the request body is not valid YAML: {err}") from None
    why = _expanded_size_exceeds(value, nodes=MAX_YAML_NODES, depth=MAX_DEPTH)
    if why:
        raise DecodeError(f"the YAML request body {why}")
    try:
        return json.loads(json.dumps(value, allow_nan=False))
    except (TypeError, ValueError) as err:
        raise DecodeError(f"the YAML request body has a value JSON cannot hold: {err}") \
            from None


def _quoted(path: str) -> str:
    return json.dumps(path)


def check_fields(obj: Obj, *, kind: str, group: str, version: str, custom: bool,
                 validation: str, duplicates: tuple[str, ...] = ()) -> list[str]:
    """Apply the decoder's rules to a body about to be written; returns the warnings.

    Unknown fields are removed from ``obj`` unless ``validation`` is Strict, where they
    (and duplicate keys) are an error. Custom resources have their ``metadata`` checked
    here; the rest of them is their CRD schema's business.
    """
    definition = None if custom else builtin_schemas.definition_name(group, version, kind)
    if definition is not None:
        report = builtin_schemas.check(obj, definition, prune=validation != STRICT)
    else:
        report = builtin_schemas.check(obj.get("metadata"), builtin_schemas.OBJECT_META,
                                       prune=validation != STRICT, path="metadata")
    if report.type_errors:
        first = report.type_errors[0]
        group_kind = f"{kind}.{group}" if group else kind
        detail = f": {first.detail}" if first.detail else ""
        raise APIError(400, "BadRequest",
                       f'{group_kind} in version "{version}" cannot be handled as a {kind}: '
                       f"json: cannot unmarshal {first.found} into Go struct field "
                       f"{kind}.{first.path} of type {first.wanted}{detail}")
    problems = [f"duplicate field {_quoted(key)}" for key in duplicates] + [
        f"unknown field {_quoted(path)}" for path in report.unknown]
    if not problems or validation == IGNORE:
        return []
    if validation == STRICT:
        raise bad_request("strict decoding error: " + ", ".join(problems))
    return problems


def unknown_fields_outcome(paths: list[str], *, validation: str) -> list[str]:
    """For fields a CRD schema pruned: raise under Strict, the warnings under Warn."""
    if not paths or validation == IGNORE:
        return []
    problems = [f"unknown field {_quoted(path)}" for path in paths]
    if validation == STRICT:
        raise bad_request("strict decoding error: " + ", ".join(problems))
    return problems


def warning_header(text: str) -> str:
    """An RFC 7234 ``Warning`` header value, as kube-apiserver writes them (code 299)."""
    return warnings.header(text)
