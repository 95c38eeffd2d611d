"""Strategic merge patch: kubectl's default patch format for built-in kinds.

Like a JSON merge patch, except that lists the Go types tag ``patchStrategy: merge`` are
merged element by element (by ``patchMergeKey``; primitives as a set) instead of being
replaced, and the patch may carry directives:

- ``$patch: replace | delete | merge`` in a map (replace the map, delete it) or as a list
  element (``{"$patch": "replace"}`` replaces the list; an element with its merge key and
  ``$patch: delete`` removes the matching element);
- ``$deleteFromPrimitiveList/<field>: [values]`` removes values from a primitive list;
- ``$setElementOrder/<field>: [...]`` fixes the order of a merged list (kubectl apply);
- ``$retainKeys: [names]`` drops the map's keys not named (union fields like a volume
  source or a deployment strategy).

Merged lists take upstream's element order: the elements the patch names (or its
``$setElementOrder`` lists) in that order, interleaved with the server's other elements by
their server positions; an element new to the server goes before the server's remaining
ones, so adding a lone element with ``kubectl patch`` puts it first, as on a real cluster.

Which lists merge is in :mod:`.strategic_types`. Errors are :class:`PatchError`.
"""

from __future__ import annotations

import copy
import json
from typing import Any

from .strategic_types import BUILTIN_KINDS, ListRule, field_rule

_PATCH = "$patch"
_RETAIN = "$retainKeys"
_ORDER = "$setElementOrder/"
_DELETE_PRIM = "$deleteFromPrimitiveList/"


class PatchError(ValueError):
    """A patch that is malformed (400) or cannot be applied (422)."""

    def __init__(self, message: str, *, status_code: int = 422) -> None:
        super().__init__(message)
        self.message = message
        self.status_code = status_code


class _Deleted:
    """Marker: the map carrying ``$patch: delete`` goes away."""


_DELETED = _Deleted()


def supports_strategic(kind: str) -> bool:
    """Whether kube-apiserver would accept a strategic merge patch for ``kind``."""
    return kind in BUILTIN_KINDS


def strategic_merge_patch(
    target: dict[str, Any], patch: dict[str, Any], *, kind: str
) -> dict[str, Any]:
    """Apply a strategic merge ``patch`` to an object of ``kind``; returns a new dict."""
    if not isinstance(patch, dict):
        raise PatchError("strategic merge patch must be a JSON object", status_code=400)
    root = dict(patch)
    result = _merge_map(target if isinstance(target, dict) else {}, root, kind, root=True)
    if isinstance(result, _Deleted):
        return {}
    return result


def _is_directive(key: str) -> bool:
    return key in (_PATCH, _RETAIN) or key.startswith((_ORDER, _DELETE_PRIM))


def _strip(value: Any) -> Any:
    """A patch value with its directives removed and nulls dropped, as stored."""
    if isinstance(value, dict):
        return {k: _strip(v) for k, v in value.items() if not _is_directive(k) and v is not None}
    if isinstance(value, list):
        return [_strip(v) for v in value if not (isinstance(v, dict) and v.get(_PATCH))]
    return copy.deepcopy(value)


def _merge_map(
    orig: dict[str, Any], patch: dict[str, Any], struct: str | None, *, root: bool = False
) -> dict[str, Any] | _Deleted:
    directive = patch.get(_PATCH)
    if directive is not None:
        if directive == "delete":
            return _DELETED
        if directive == "replace":
            return _merge_map({}, {k: v for k, v in patch.items() if k != _PATCH}, struct,
                              root=root)
        if directive != "merge":
            raise PatchError(f"unknown patch type {directive!r} in $patch directive")
    result = copy.deepcopy(orig)

    retain = patch.get(_RETAIN)
    if retain is not None:
        if not isinstance(retain, list) or not all(isinstance(k, str) for k in retain):
            raise PatchError("$retainKeys must be a list of field names")
        extra = sorted(k for k, v in patch.items()
                       if not _is_directive(k) and v is not None and k not in retain)
        if extra:
            raise PatchError(f"fields {extra} are not listed in $retainKeys {retain}")
        result = {k: v for k, v in result.items() if k in retain}

    for key, value in patch.items():
        if key.startswith(_DELETE_PRIM):
            field = key[len(_DELETE_PRIM):]
            if not isinstance(value, list):
                raise PatchError(f"{key} must be a list")
            current = result.get(field)
            if isinstance(current, list):
                result[field] = [v for v in current if v not in value]

    for key, value in patch.items():
        if _is_directive(key):
            continue
        rule = "ObjectMeta" if root and key == "metadata" else field_rule(struct, key)
        if value is None:
            result.pop(key, None)
        elif isinstance(value, dict):
            sub_struct = rule if isinstance(rule, str) else None
            current = result.get(key)
            merged = _merge_map(current if isinstance(current, dict) else {}, value,
                                sub_struct)
            if isinstance(merged, _Deleted):
                result.pop(key, None)
            else:
                result[key] = merged
        elif isinstance(value, list):
            current = result.get(key)
            if isinstance(rule, ListRule) and rule.merge:
                server = current if isinstance(current, list) else []
                items = _merge_list(server, value, rule, key)
                if items is None:  # {"$patch": "replace"}
                    result[key] = _replace_list(value)
                else:
                    order = patch.get(_ORDER + key, value)
                    result[key] = _normalize_order(items, _order_list(order, key), server,
                                                   rule, key)
            else:
                result[key] = _replace_list(value)
        else:
            result[key] = copy.deepcopy(value)

    # $setElementOrder for a list the patch does not otherwise touch: only reorder it.
    for key, value in patch.items():
        if key.startswith(_ORDER):
            field = key[len(_ORDER):]
            rule = field_rule(struct, field)
            if not isinstance(rule, ListRule) or not rule.merge:
                raise PatchError(f"{key}: {field} is not a merged list")
            order = _order_list(value, field)
            if not isinstance(patch.get(field), list) and isinstance(result.get(field), list):
                result[field] = _normalize_order(result[field], order, result[field], rule,
                                                 field)
    return result


def _order_list(value: Any, field: str) -> list[Any]:
    if not isinstance(value, list):
        raise PatchError(f"{_ORDER}{field} must be a list")
    return value


def _replace_list(value: list[Any]) -> list[Any]:
    # Even an atomic list may carry {"$patch": "replace"}; it means the same thing here.
    return [_strip(v) for v in value if not (isinstance(v, dict) and v.get(_PATCH) == "replace")]


def _merge_list(orig: list[Any], patch: list[Any], rule: ListRule,
                field: str) -> list[Any] | None:
    """Merge element by element (None: the patch replaces the list). New elements are
    appended here; :func:`_normalize_order` then decides where they go."""
    if any(isinstance(v, dict) and v.get(_PATCH) == "replace" and len(v) == 1 for v in patch):
        return None
    if rule.key is None:
        if any(isinstance(v, dict | list) for v in patch):
            raise PatchError(f"{field}: a merged list of primitives may not contain objects")
        out: list[Any] = []
        for v in [*orig, *patch]:  # a set-like list keeps one of each value
            if v not in out:
                out.append(copy.deepcopy(v))
        return out
    key = rule.key
    result = copy.deepcopy(orig)
    for element in patch:
        if not isinstance(element, dict):
            raise PatchError(f"{field}: element {element!r} is not an object with key {key!r}")
        if key not in element:
            raise PatchError(f"{field}: element {element!r} does not contain declared merge "
                             f"key: {key}")
        index = next((i for i, o in enumerate(result)
                      if isinstance(o, dict) and o.get(key) == element[key]), None)
        if element.get(_PATCH) == "delete":
            result = [o for o in result if not (isinstance(o, dict) and o.get(key) == element[key])]
            continue
        merged = _merge_map(result[index] if index is not None else {}, element, rule.elem)
        if isinstance(merged, _Deleted):
            continue
        if index is None:
            result.append(merged)
        else:
            result[index] = merged
    return result


def _identity(item: Any, rule: ListRule, field: str) -> str:
    if rule.key is None:
        return json.dumps(item, sort_keys=True)
    if not isinstance(item, dict) or rule.key not in item:
        raise PatchError(f"{field}: element {item!r} does not contain declared merge key: "
                         f"{rule.key}")
    return json.dumps(item[rule.key], sort_keys=True)


def _normalize_order(merged: list[Any], order: list[Any], server: list[Any], rule: ListRule,
                     field: str) -> list[Any]:
    """Kubernetes' element order for a merged list.

    Elements named by ``order`` (the patch's list, or its ``$setElementOrder``) come in
    that order; the others keep the server's order; the two runs are interleaved by the
    server's positions, and an element the server did not have goes before the remaining
    server-only ones (so an element added by a patch alone lands first, as upstream).
    """
    order_pos: dict[str, int] = {}
    for position, item in enumerate(order):
        if isinstance(item, dict) and item.get(_PATCH) and rule.key not in item:
            continue  # a bare directive element names nothing
        order_pos.setdefault(_identity(item, rule, field), position)
    server_pos: dict[str, int] = {}
    for position, item in enumerate(server):
        if rule.key is None or (isinstance(item, dict) and rule.key in item):
            server_pos.setdefault(_identity(item, rule, field), position)

    def ident(item: Any) -> str | None:
        if rule.key is not None and not (isinstance(item, dict) and rule.key in item):
            return None
        return _identity(item, rule, field)

    named = sorted((m for m in merged if ident(m) in order_pos),
                   key=lambda m: order_pos[str(ident(m))])
    server_only = [m for m in merged if ident(m) not in order_pos]
    out: list[Any] = []
    i = j = 0
    while i < len(server_only) or j < len(named):
        if j >= len(named):
            out.append(server_only[i])
            i += 1
            continue
        if i < len(server_only):
            left, right = server_pos.get(str(ident(server_only[i]))), \
                server_pos.get(str(ident(named[j])))
            if left is not None and right is not None and left < right:
                out.append(server_only[i])
                i += 1
                continue
        out.append(named[j])
        j += 1
    return out
