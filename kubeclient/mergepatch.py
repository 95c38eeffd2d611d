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
