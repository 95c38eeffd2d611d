"""The JSON merge patch (RFC 7386) that turns one object into another (pure).

A merge patch merges nested objects key by key, so writing a new value whole leaves
behind every key the old value had and the new one has not (a StorageClass that was
deleted, a limit that was removed). :func:`diff` names those keys with ``null``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def diff(old: Mapping[str, Any], new: Mapping[str, Any]) -> dict[str, Any]:
    """The merge patch taking ``old`` to ``new``: changed and added keys with their new
    values, nested objects as patches of their own, removed keys as ``None``; empty when
    they are equal. (A ``None`` inside ``new`` cannot be expressed: RFC 7386 reads it as
    a removal.)"""
    patch: dict[str, Any] = {}
    for key, value in new.items():
        before = old.get(key)
        if isinstance(value, Mapping) and isinstance(before, Mapping):
            nested = diff(before, value)
            if nested:
                patch[key] = nested
        elif key not in old or before != value:
            patch[key] = value
    for key in old:
        if key not in new:
            patch[key] = None
    return patch


def three_way(original: Mapping[str, Any] | None, modified: Mapping[str, Any],
              current: Mapping[str, Any]) -> dict[str, Any]:
    """The merge patch ``kubectl apply`` computes for an object it applied before: what
    ``modified`` (the manifest now) sets differently from ``current`` (the live object),
    and a removal (``None``) of each key ``original`` (the manifest applied last time)
    had and ``modified`` has no more. A key neither manifest names (set by a controller,
    a webhook or a user) is left as it is. Lists are compared and set whole (merge patch
    semantics; kubectl merges some built-in kinds' lists item by item). ``original``
    None: nothing is known to have been applied, so nothing is removed."""
    patch: dict[str, Any] = {}
    for key, value in modified.items():
        live = current.get(key)
        if isinstance(value, Mapping) and isinstance(live, Mapping):
            before = original.get(key) if original is not None else None
            nested = three_way(before if isinstance(before, Mapping) else None, value, live)
            if nested:
                patch[key] = nested
        elif key not in current or live != value:
            patch[key] = value
    for key in original or ():
        if key not in modified and key in current:
            patch[key] = None
    return patch
