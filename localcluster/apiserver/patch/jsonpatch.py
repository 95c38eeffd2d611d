"""The three patch formats kube-apiserver accepts on PATCH.

Clients pick the format with the Content-Type: kopf and the Python client send JSON merge
patches (RFC 7386), ``kubectl patch --type=json`` sends JSON patches (RFC 6902, with
``test`` for optimistic checks), and ``kubectl apply``/``kubectl patch`` default to
strategic merge patch for the built-in kinds (see :mod:`.strategic`). All functions are
pure: they return new documents and never mutate their inputs.

Errors follow kube-apiserver's split: a patch document that cannot be understood is a
400 (BadRequest); a well-formed patch that cannot be applied (a failed ``test``, a path
that does not exist) is a 422 (Invalid).
"""

from __future__ import annotations

import copy
from typing import Any

from .strategic import PatchError, strategic_merge_patch, supports_strategic

__all__ = [
    "PatchError",
    "json_patch",
    "merge_patch",
    "strategic_merge_patch",
    "supports_strategic",
]

def merge_patch(target: dict[str, Any], patch: dict[str, Any]) -> dict[str, Any]:
    """Apply a JSON merge patch (RFC 7386): maps merge, ``null`` deletes, the rest replaces."""
    if not isinstance(patch, dict):
        raise PatchError("merge patch must be a JSON object", status_code=400)
    result = _merge_value(target if isinstance(target, dict) else {}, patch)
    assert isinstance(result, dict)
    return result


def _merge_value(target: Any, patch: Any) -> Any:
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    base: dict[str, Any] = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            base.pop(key, None)
        else:
            base[key] = _merge_value(base.get(key), value)
    # Untouched keys are shared with the input so far; copy them so callers may mutate.
    return {k: (copy.deepcopy(v) if k not in patch else v) for k, v in base.items()}


# --------------------------------------------------------------------------- JSON patch


def _parse_pointer(pointer: Any, *, op_index: int) -> list[str]:
    if not isinstance(pointer, str):
        raise PatchError(f"operation {op_index}: path must be a string", status_code=400)
    if pointer == "":
        return []
    if not pointer.startswith("/"):
        raise PatchError(
            f"operation {op_index}: JSON pointer {pointer!r} must start with '/'",
            status_code=400,
        )
    parts = pointer[1:].split("/")
    out = []
    for part in parts:
        # ~1 first, then ~0 (RFC 6901 §4), so "~01" decodes to "~1" and not to "/".
        out.append(part.replace("~1", "/").replace("~0", "~"))
    return out


def _list_index(part: str, length: int, *, allow_end: bool, path: str) -> int:
    if part == "-" and allow_end:
        return length
    if not part.isdigit() or (len(part) > 1 and part.startswith("0")):
        raise PatchError(f"invalid array index {part!r} in path {path!r}", status_code=422)
    index = int(part)
    limit = length if allow_end else length - 1
    if index > limit:
        raise PatchError(f"array index {index} out of range in path {path!r}", status_code=422)
    return index


def _walk(doc: Any, parts: list[str], path: str) -> Any:
    node = doc
    for part in parts:
        if isinstance(node, dict):
            if part not in node:
                raise PatchError(f"path {path!r} does not exist: missing key {part!r}",
                                 status_code=422)
            node = node[part]
        elif isinstance(node, list):
            node = node[_list_index(part, len(node), allow_end=False, path=path)]
        else:
            raise PatchError(f"path {path!r} does not exist: {part!r} is not in a container",
                             status_code=422)
    return node


def _add(doc: Any, parts: list[str], value: Any, path: str) -> Any:
    if not parts:
        return value
    parent = _walk(doc, parts[:-1], path)
    last = parts[-1]
    if isinstance(parent, dict):
        parent[last] = value
    elif isinstance(parent, list):
        parent.insert(_list_index(last, len(parent), allow_end=True, path=path), value)
    else:
        raise PatchError(f"path {path!r}: parent is not an object or array", status_code=422)
    return doc


def _remove(doc: Any, parts: list[str], path: str) -> tuple[Any, Any]:
    if not parts:
        raise PatchError("cannot remove the whole document", status_code=422)
    parent = _walk(doc, parts[:-1], path)
    last = parts[-1]
    if isinstance(parent, dict):
        if last not in parent:
            raise PatchError(f"unable to remove nonexistent key {last!r} at path {path!r}",
                             status_code=422)
        return doc, parent.pop(last)
    if isinstance(parent, list):
        return doc, parent.pop(_list_index(last, len(parent), allow_end=False, path=path))
    raise PatchError(f"path {path!r}: parent is not an object or array", status_code=422)


def _missing_key(doc: Any, parts: list[str], path: str) -> bool:
    parent = _walk(doc, parts[:-1], path)
    return isinstance(parent, dict) and parts[-1] not in parent


def _is_prefix(prefix: list[str], parts: list[str]) -> bool:
    return len(prefix) < len(parts) and parts[: len(prefix)] == prefix


def json_patch(target: dict[str, Any], ops: list[Any]) -> dict[str, Any]:
    """Apply an RFC 6902 JSON patch; all-or-nothing since it works on a copy."""
    if not isinstance(ops, list):
        raise PatchError("JSON patch must be an array of operations", status_code=400)
    doc: Any = copy.deepcopy(target)
    for index, op in enumerate(ops):
        if not isinstance(op, dict):
            raise PatchError(f"operation {index} is not an object", status_code=400)
        name = op.get("op")
        if name not in ("add", "remove", "replace", "move", "copy", "test"):
            raise PatchError(f"operation {index}: unknown op {name!r}", status_code=400)
        if "path" not in op:
            raise PatchError(f"operation {index} ({name}): missing 'path'", status_code=400)
        path = op["path"]
        parts = _parse_pointer(path, op_index=index)
        if name in ("add", "replace", "test") and "value" not in op:
            raise PatchError(f"operation {index} ({name}): missing 'value'", status_code=400)
        if name in ("move", "copy") and "from" not in op:
            raise PatchError(f"operation {index} ({name}): missing 'from'", status_code=400)
        if name == "add":
            doc = _add(doc, parts, copy.deepcopy(op["value"]), path)
        elif name == "remove":
            doc, _ = _remove(doc, parts, path)
        elif name == "replace":
            _walk(doc, parts, path)  # must exist
            if parts:
                doc, _ = _remove(doc, parts, path)
            doc = _add(doc, parts, copy.deepcopy(op["value"]), path)
        elif name == "test":
            if op["value"] is None and parts and _missing_key(doc, parts, path):
                continue  # as Kubernetes' json-patch: an absent key tests equal to null
            actual = _walk(doc, parts, path)
            if not _json_equal(actual, op["value"]):
                raise PatchError(
                    f"test operation failed at path {path!r}: "
                    f"expected {op['value']!r}, found {actual!r}",
                    status_code=422,
                )
        else:
            source = _parse_pointer(op["from"], op_index=index)
            if name == "move":
                if _is_prefix(source, parts):
                    raise PatchError(
                        f"operation {index}: cannot move {op['from']!r} into its own child "
                        f"{path!r}",
                        status_code=422,
                    )
                doc, value = _remove(doc, source, op["from"])
            else:
                value = copy.deepcopy(_walk(doc, source, op["from"]))
            doc = _add(doc, parts, value, path)
    if not isinstance(doc, dict):
        raise PatchError("JSON patch must leave an object at the root", status_code=422)
    return doc


def _json_equal(a: Any, b: Any) -> bool:
    # JSON equality: 1 == 1.0 but True != 1 (Python's bool is an int).
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_json_equal(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_json_equal(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, int | float) and isinstance(b, int | float):
        return a == b
    return type(a) is type(b) and bool(a == b)
