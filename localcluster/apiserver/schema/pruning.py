"""Pruning and defaulting of custom resources (the structural-schema half of a write).

Kubernetes drops the fields a CRD's schema does not declare (unless
``x-kubernetes-preserve-unknown-fields``) and fills ``default`` values where a field is
absent, or null without being ``nullable``; a null left on a non-nullable field without a
default is dropped. apiVersion, kind and metadata of the object, and of embedded
resources, are never pruned away; the object's own metadata is managed by the server,
not by the CRD's schema.
"""

from __future__ import annotations

import copy
from typing import Any

Schema = dict[str, Any]

# ObjectMeta's fields: what an embedded resource's metadata may keep.
OBJECT_META_FIELDS = frozenset({
    "name", "generateName", "namespace", "selfLink", "uid", "resourceVersion", "generation",
    "creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds", "labels",
    "annotations", "ownerReferences", "finalizers", "managedFields",
})


def apply_defaults(obj: Any, schema: Schema) -> Any:
    """A copy of ``obj`` with the schema's defaults filled in, top-down."""
    result = copy.deepcopy(obj)
    _default(result, schema)
    return result


def _default(value: Any, schema: Any) -> None:
    if not isinstance(schema, dict):
        return
    if isinstance(value, dict):
        properties = schema.get("properties") or {}
        for key, sub in properties.items():
            if not isinstance(sub, dict) or "default" not in sub:
                continue
            if key not in value or (value[key] is None and not sub.get("nullable")):
                value[key] = copy.deepcopy(sub["default"])
        additional = schema.get("additionalProperties")
        for key in list(value):
            sub = properties.get(key)
            if sub is None and isinstance(additional, dict):
                sub = additional
                if value[key] is None and "default" in sub and not sub.get("nullable"):
                    value[key] = copy.deepcopy(sub["default"])
            if sub is None:
                continue
            if value[key] is None and not sub.get("nullable"):
                # Kubernetes prunes non-nullable nulls that have no default to fill them.
                del value[key]
                continue
            _default(value[key], sub)
    elif isinstance(value, list):
        items = schema.get("items")
        if not isinstance(items, dict):
            return
        for i, item in enumerate(value):
            if item is None and "default" in items and not items.get("nullable"):
                value[i] = copy.deepcopy(items["default"])
            _default(value[i], items)


def prune(obj: Any, schema: Schema) -> Any:
    """A copy of ``obj`` without the fields ``schema`` does not declare."""
    return prune_with_report(obj, schema)[0]


def prune_with_report(obj: Any, schema: Schema) -> tuple[Any, list[str]]:
    """Like :func:`prune`, also returning the pruned paths (for "unknown field" warnings)."""
    result = copy.deepcopy(obj)
    pruned: list[str] = []
    _prune(result, schema, "", pruned, resource_root=True, root=True)
    return result, pruned


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _prune(value: Any, schema: Any, path: str, pruned: list[str], *,
           resource_root: bool = False, root: bool = False) -> None:
    if not isinstance(schema, dict):
        return
    if isinstance(value, list):
        items = schema.get("items")
        for i, item in enumerate(value):
            if isinstance(items, dict):
                _prune(item, items, f"{path}[{i}]", pruned,
                       resource_root=bool(items.get("x-kubernetes-embedded-resource")))
        return
    if not isinstance(value, dict):
        return
    properties = schema.get("properties") or {}
    additional = schema.get("additionalProperties")
    preserve = bool(schema.get("x-kubernetes-preserve-unknown-fields"))
    for key in list(value):
        child = _join(path, key)
        if resource_root and key in ("apiVersion", "kind"):
            continue
        if resource_root and key == "metadata":
            if not root and isinstance(value[key], dict):
                for meta_key in list(value[key]):
                    if meta_key not in OBJECT_META_FIELDS:
                        del value[key][meta_key]
                        pruned.append(_join(child, meta_key))
            continue
        sub = properties.get(key)
        if sub is None and isinstance(additional, dict):
            sub = additional
        if sub is not None:
            _prune(value[key], sub, child, pruned,
                   resource_root=bool(isinstance(sub, dict)
                                      and sub.get("x-kubernetes-embedded-resource")))
        elif not (preserve or additional is True):
            del value[key]
            pruned.append(child)
