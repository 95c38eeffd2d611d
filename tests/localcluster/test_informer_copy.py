"""What an informer hands out is the caller's own: changing it, however deep, leaves the
cache as it was (json_copy, the informers' faster deep copy)."""

from __future__ import annotations

import copy

from localcluster.kube.informer import json_copy


def test_a_copy_is_equal_and_shares_nothing_mutable() -> None:
    obj = {"metadata": {"name": "p", "labels": {"a": "b"},
                        "ownerReferences": [{"uid": "1", "controller": True}]},
           "spec": {"containers": [{"name": "c", "args": ["x", "y"], "ports": []}]},
           "status": {"phase": "Running", "podIP": None, "restarts": 0, "ratio": 0.5}}
    before = copy.deepcopy(obj)
    out = json_copy(obj)
    assert out == obj
    out["metadata"]["labels"]["a"] = "changed"
    out["metadata"]["ownerReferences"][0]["uid"] = "2"
    out["spec"]["containers"][0]["args"].append("z")
    out["spec"]["containers"][0]["ports"].append(1)
    out["status"]["phase"] = "Failed"
    assert obj == before
