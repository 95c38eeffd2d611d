"""kubeclient.mergepatch.diff: the RFC 7386 patch between two objects, checked by
applying it with an independent RFC 7386 implementation (the API server's)."""

from __future__ import annotations

from typing import Any

import pytest

from kubeclient.mergepatch import diff, three_way
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


# three_way: (last applied manifest, manifest now, live object) -> (patch, live after it)
THREE_WAY = [
    # nothing changed: no patch, whatever else the live object holds
    ({"a": 1}, {"a": 1}, {"a": 1, "status": {"x": 1}}, {}, {"a": 1, "status": {"x": 1}}),
    # a value the manifest changed is set
    ({"a": 1}, {"a": 2}, {"a": 1}, {"a": 2}, {"a": 2}),
    # a key the manifest dropped is removed; one nobody applied is kept
    ({"a": 1, "b": 2}, {"a": 1}, {"a": 1, "b": 2, "c": 3}, {"b": None}, {"a": 1, "c": 3}),
    # a key dropped from the manifest that someone removed already: nothing to remove
    ({"a": 1, "b": 2}, {"a": 1}, {"a": 1}, {}, {"a": 1}),
    # a user's edit of a key the manifest names is put back to the manifest's value
    ({"a": 1}, {"a": 1}, {"a": 5}, {"a": 1}, {"a": 1}),
    # nested: a user's key inside an applied object survives, a dropped one goes
    ({"spec": {"x": 1, "y": 2}}, {"spec": {"x": 1}},
     {"spec": {"x": 1, "y": 2, "user": True}}, {"spec": {"y": None}},
     {"spec": {"x": 1, "user": True}}),
    # nothing recorded (an object applied before records were kept): nothing removed
    (None, {"spec": {"x": 2}}, {"spec": {"x": 1, "y": 2}}, {"spec": {"x": 2}},
     {"spec": {"x": 2, "y": 2}}),
    # a whole object added by the manifest
    ({}, {"spec": {"x": {"k": 1}}}, {"spec": {}}, {"spec": {"x": {"k": 1}}},
     {"spec": {"x": {"k": 1}}}),
    # lists are set whole
    ({"l": [1]}, {"l": [1, 2]}, {"l": [1, 9]}, {"l": [1, 2]}, {"l": [1, 2]}),
    # a map that became a scalar, and the other way round
    ({"a": {"b": 1}}, {"a": 5}, {"a": {"b": 1}}, {"a": 5}, {"a": 5}),
    ({"a": 5}, {"a": {"b": 1}}, {"a": 5, "z": 0}, {"a": {"b": 1}}, {"a": {"b": 1}, "z": 0}),
]


@pytest.mark.parametrize(("original", "modified", "current", "patch", "result"), THREE_WAY)
def test_three_way(original: dict[str, Any] | None, modified: dict[str, Any],
                   current: dict[str, Any], patch: dict[str, Any],
                   result: dict[str, Any]) -> None:
    assert three_way(original, modified, current) == patch
    assert apply_merge_patch(current, patch) == result
