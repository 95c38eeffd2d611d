"""kubeclient.mergepatch.diff: the RFC 7386 patch between two objects, checked by
applying it with an independent RFC 7386 implementation (the API server's)."""

from __future__ import annotations

from typing import Any

import pytest

from kubeclient.mergepatch import diff
from localcluster.apiserver.patch.jsonpatch import merge_patch as apply_merge_patch


@pytest.mark.parametrize(("old", "new", "patch"), [
    ({}, {}, {}),
    ({"a": 1}, {"a": 1}, {}),
    ({"a": 1}, {"a": 2}, {"a": 2}),
    ({"a": 1}, {}, {"a": None}),
    ({}, {"a": {"b": 1}}, {"a": {"b": 1}}),
    ({"a": {"b": 1, "c": 2}}, {"a": {"b": 1}}, {"a": {"c": None}}),
    ({"a": {"b": {"x": 1, "y": 2}}}, {"a": {"b": {"x": 1}}}, {"a": {"b": {"y": None}}}),
    ({"a": {"b": 1}}, {"a": 5}, {"a": 5}),
    ({"a": 5}, {"a": {"b": 1}}, {"a": {"b": 1}}),
    ({"a": [1, 2]}, {"a": [1]}, {"a": [1]}),  # lists are replaced whole
    ({"a": {"b": 1}}, {"a": {}}, {"a": {"b": None}}),
])
def test_diff(old: dict[str, Any], new: dict[str, Any], patch: dict[str, Any]) -> None:
    assert diff(old, new) == patch
    assert apply_merge_patch(old, patch) == new
