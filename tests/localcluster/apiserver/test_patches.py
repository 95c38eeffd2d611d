"""Merge patch, JSON patch and strategic merge patch, as kube-apiserver applies them."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from localcluster.apiserver.patch.jsonpatch import (
    PatchError,
    json_patch,
    merge_patch,
    strategic_merge_patch,
    supports_strategic,
)

# ------------------------------------------------------------------ merge patch (RFC 7386)

MERGE_CASES = [
    # RFC 7386 appendix A, as objects at the root
    ({"a": "b"}, {"a": "c"}, {"a": "c"}),
    ({"a": "b"}, {"b": "c"}, {"a": "b", "b": "c"}),
    ({"a": "b"}, {"a": None}, {}),
    ({"a": "b", "b": "c"}, {"a": None}, {"b": "c"}),
    ({"a": ["b"]}, {"a": "c"}, {"a": "c"}),
    ({"a": "c"}, {"a": ["b"]}, {"a": ["b"]}),
    ({"a": {"b": "c"}}, {"a": {"b": "d", "c": None}}, {"a": {"b": "d"}}),
    ({"a": [{"b": "c"}]}, {"a": [1]}, {"a": [1]}),
    ({"e": None}, {"a": 1}, {"e": None, "a": 1}),
    ({}, {"a": {"bb": {"ccc": None}}}, {"a": {"bb": {}}}),
    ({"a": "foo"}, {"a": {"b": 1}}, {"a": {"b": 1}}),
    # lists are replaced, never merged
    ({"metadata": {"finalizers": ["a", "b"]}}, {"metadata": {"finalizers": ["c"]}},
     {"metadata": {"finalizers": ["c"]}}),
    ({"x": 1}, {}, {"x": 1}),
]


@pytest.mark.parametrize(("target", "patch", "expected"), MERGE_CASES)
def test_merge_patch(target: dict[str, Any], patch: dict[str, Any],
                     expected: dict[str, Any]) -> None:
    before_t, before_p = copy.deepcopy(target), copy.deepcopy(patch)
    assert merge_patch(target, patch) == expected
    assert target == before_t and patch == before_p  # inputs untouched


def test_merge_patch_result_is_independent_of_input() -> None:
    target = {"spec": {"a": {"b": 1}}, "keep": {"deep": [1]}}
    out = merge_patch(target, {"spec": {"c": 2}})
    out["keep"]["deep"].append(2)
    out["spec"]["a"]["b"] = 9
    assert target == {"spec": {"a": {"b": 1}}, "keep": {"deep": [1]}}


@pytest.mark.parametrize("bad", [[], "x", 1, None])
def test_merge_patch_rejects_non_object(bad: Any) -> None:
    with pytest.raises(PatchError) as err:
        merge_patch({}, bad)
    assert err.value.status_code == 400
    assert "JSON object" in err.value.message


# ------------------------------------------------------------------ JSON patch (RFC 6902)

DOC = {"foo": "bar", "list": [1, 2, 3], "m": {"a/b": 1, "c~d": 2}, "nested": {"x": {"y": 1}}}

JSON_CASES = [
    ([{"op": "add", "path": "/baz", "value": "qux"}], {**DOC, "baz": "qux"}),
    ([{"op": "add", "path": "/list/1", "value": 9}], {**DOC, "list": [1, 9, 2, 3]}),
    ([{"op": "add", "path": "/list/-", "value": 4}], {**DOC, "list": [1, 2, 3, 4]}),
    ([{"op": "add", "path": "/list/3", "value": 4}], {**DOC, "list": [1, 2, 3, 4]}),
    ([{"op": "add", "path": "/foo", "value": {"n": 1}}], {**DOC, "foo": {"n": 1}}),
    ([{"op": "remove", "path": "/foo"}], {k: v for k, v in DOC.items() if k != "foo"}),
    ([{"op": "remove", "path": "/list/0"}], {**DOC, "list": [2, 3]}),
    ([{"op": "replace", "path": "/foo", "value": 1}], {**DOC, "foo": 1}),
    ([{"op": "replace", "path": "/list/2", "value": "z"}], {**DOC, "list": [1, 2, "z"]}),
    ([{"op": "move", "from": "/foo", "path": "/moved"}],
     {**{k: v for k, v in DOC.items() if k != "foo"}, "moved": "bar"}),
    ([{"op": "move", "from": "/list/0", "path": "/list/-"}], {**DOC, "list": [2, 3, 1]}),
    ([{"op": "copy", "from": "/nested/x", "path": "/copied"}], {**DOC, "copied": {"y": 1}}),
    ([{"op": "test", "path": "/foo", "value": "bar"}], DOC),
    ([{"op": "test", "path": "/list", "value": [1, 2, 3]}], DOC),
    ([{"op": "test", "path": "/list/0", "value": 1.0}], DOC),  # JSON numbers compare by value
    ([{"op": "test", "path": "/m/a~1b", "value": 1}], DOC),  # ~1 is '/'
    ([{"op": "test", "path": "/m/c~0d", "value": 2}], DOC),  # ~0 is '~'
    ([{"op": "replace", "path": "/m/a~1b", "value": 5}], {**DOC, "m": {"a/b": 5, "c~d": 2}}),
    ([{"op": "add", "path": "/nested/x/z", "value": None}],
     {**DOC, "nested": {"x": {"y": 1, "z": None}}}),
    # kopf-style optimistic update: test then replace
    ([{"op": "test", "path": "/foo", "value": "bar"},
      {"op": "replace", "path": "/foo", "value": "baz"}], {**DOC, "foo": "baz"}),
    ([], DOC),
    ([{"op": "test", "path": "/absent", "value": None}], DOC),  # absent tests equal to null
    ([{"op": "test", "path": "/nested/x/absent", "value": None}], DOC),
]


@pytest.mark.parametrize(("ops", "expected"), JSON_CASES)
def test_json_patch(ops: list[Any], expected: dict[str, Any]) -> None:
    before = copy.deepcopy(DOC)
    assert json_patch(DOC, ops) == expected
    assert before == DOC


JSON_FAILURES = [
    # malformed documents: 400
    ({"op": "add"}, 400, "path"),
    ("notanop", 400, "not an object"),
    ({"op": "frobnicate", "path": "/a"}, 400, "unknown op"),
    ({"op": "add", "path": "/a"}, 400, "value"),
    ({"op": "move", "path": "/a"}, 400, "from"),
    ({"op": "add", "path": "a", "value": 1}, 400, "must start with '/'"),
    ({"op": "add", "path": 5, "value": 1}, 400, "path must be a string"),
    # patches that do not apply: 422
    ({"op": "test", "path": "/foo", "value": "nope"}, 422, "test operation failed"),
    ({"op": "test", "path": "/list/0", "value": True}, 422, "test operation failed"),
    ({"op": "test", "path": "/absent", "value": 1}, 422, "missing key 'absent'"),
    ({"op": "test", "path": "/nope/absent", "value": None}, 422, "missing key 'nope'"),
    ({"op": "remove", "path": "/missing"}, 422, "nonexistent"),
    ({"op": "replace", "path": "/missing", "value": 1}, 422, "missing"),
    ({"op": "add", "path": "/missing/deep", "value": 1}, 422, "missing"),
    ({"op": "add", "path": "/list/7", "value": 1}, 422, "out of range"),
    ({"op": "remove", "path": "/list/3"}, 422, "out of range"),
    ({"op": "remove", "path": "/list/-"}, 422, "invalid array index"),
    ({"op": "add", "path": "/list/01", "value": 1}, 422, "invalid array index"),
    ({"op": "add", "path": "/foo/x", "value": 1}, 422, "not an object or array"),
    ({"op": "test", "path": "/foo/x", "value": 1}, 422, "not in a container"),
    ({"op": "move", "from": "/nested", "path": "/nested/x/z"}, 422, "own child"),
    ({"op": "remove", "path": ""}, 422, "whole document"),
    ({"op": "replace", "path": "", "value": [1]}, 422, "object at the root"),
]


@pytest.mark.parametrize(("op", "code", "fragment"), JSON_FAILURES)
def test_json_patch_failures(op: Any, code: int, fragment: str) -> None:
    before = copy.deepcopy(DOC)
    with pytest.raises(PatchError) as err:
        json_patch(DOC, [op])
    assert err.value.status_code == code
    assert fragment in err.value.message
    assert before == DOC


def test_json_patch_is_all_or_nothing() -> None:
    doc = {"a": 1}
    with pytest.raises(PatchError):
        json_patch(doc, [{"op": "replace", "path": "/a", "value": 2},
                         {"op": "test", "path": "/a", "value": 1}])
    assert doc == {"a": 1}


def test_json_patch_rejects_non_list() -> None:
    with pytest.raises(PatchError) as err:
        json_patch({}, {"op": "add"})  # type: ignore[arg-type]
    assert err.value.status_code == 400


def test_json_patch_replace_root() -> None:
    assert json_patch({"a": 1}, [{"op": "replace", "path": "", "value": {"b": 2}}]) == {"b": 2}


# ------------------------------------------------------------------ strategic merge patch

POD = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {
        "name": "p",
        "labels": {"app": "a", "tier": "t"},
        "finalizers": ["f1", "f2"],
        "ownerReferences": [{"uid": "u1", "name": "o1", "kind": "X", "apiVersion": "v1"}],
    },
    "spec": {
        "containers": [
            {"name": "main", "image": "img:1",
             "env": [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}],
             "ports": [{"containerPort": 80, "name": "http"}],
             "volumeMounts": [{"name": "data", "mountPath": "/data"}],
             "args": ["x", "y"]},
            {"name": "side", "image": "side:1"},
        ],
        "volumes": [{"name": "data", "emptyDir": {}}, {"name": "cfg", "configMap": {"name": "c"}}],
        "tolerations": [{"key": "k1", "operator": "Exists"}],
    },
    "status": {"conditions": [{"type": "Ready", "status": "False"},
                              {"type": "Initialized", "status": "True"}]},
}


def _containers(obj: dict[str, Any]) -> list[dict[str, Any]]:
    result: list[dict[str, Any]] = obj["spec"]["containers"]
    return result


SMP_CASES: list[tuple[str, dict[str, Any], Any]] = [
    ("merges a container by name",
     {"spec": {"containers": [{"name": "main", "image": "img:2"}]}},
     lambda o: [c["image"] for c in _containers(o)] == ["img:2", "side:1"]
     and _containers(o)[0]["env"] == POD["spec"]["containers"][0]["env"]),
    # Upstream's element order: what only the patch names goes before the server's
    # remaining elements, so a lone new element lands first.
    ("a new container alone goes first",
     {"spec": {"containers": [{"name": "new", "image": "n:1"}]}},
     lambda o: [c["name"] for c in _containers(o)] == ["new", "main", "side"]),
    ("a new container after a named one follows it",
     {"spec": {"containers": [{"name": "side"}, {"name": "new", "image": "n:1"}]}},
     lambda o: [c["name"] for c in _containers(o)] == ["main", "side", "new"]),
    ("a new container before a named one precedes it",
     {"spec": {"containers": [{"name": "new", "image": "n:1"}, {"name": "main"}]}},
     lambda o: [c["name"] for c in _containers(o)] == ["new", "main", "side"]),
    ("updating one keeps the server's order",
     {"spec": {"containers": [{"name": "side", "image": "s:2"}]}},
     lambda o: [c["name"] for c in _containers(o)] == ["main", "side"]),
    ("elements the patch names take the patch's order",
     {"spec": {"containers": [{"name": "side"}, {"name": "main"}]}},
     lambda o: [c["name"] for c in _containers(o)] == ["side", "main"]),
    ("deletes a container with $patch: delete",
     {"spec": {"containers": [{"name": "side", "$patch": "delete"}]}},
     lambda o: [c["name"] for c in _containers(o)] == ["main"]),
    ("merges env by name inside a merged container",
     {"spec": {"containers": [{"name": "main", "env": [{"name": "B", "value": "3"},
                                                       {"name": "C", "value": "4"}]}]}},
     lambda o: _containers(o)[0]["env"] == [{"name": "A", "value": "1"},
                                           {"name": "B", "value": "3"},
                                           {"name": "C", "value": "4"}]),
    ("merges ports by containerPort",
     {"spec": {"containers": [{"name": "main", "ports": [{"containerPort": 443}]}]}},
     lambda o: [p["containerPort"] for p in _containers(o)[0]["ports"]] == [443, 80]),
    ("merges volumeMounts by mountPath",
     {"spec": {"containers": [{"name": "main",
                               "volumeMounts": [{"name": "cfg", "mountPath": "/cfg"}]}]}},
     lambda o: len(_containers(o)[0]["volumeMounts"]) == 2),
    ("args stay atomic",
     {"spec": {"containers": [{"name": "main", "args": ["z"]}]}},
     lambda o: _containers(o)[0]["args"] == ["z"]),
    ("tolerations are atomic",
     {"spec": {"tolerations": [{"key": "k2", "operator": "Exists"}]}},
     lambda o: o["spec"]["tolerations"] == [{"key": "k2", "operator": "Exists"}]),
    ("finalizers merge as a set",
     {"metadata": {"finalizers": ["f2", "f3"]}},
     lambda o: o["metadata"]["finalizers"] == ["f1", "f2", "f3"]),
    ("$deleteFromPrimitiveList removes finalizers",
     {"metadata": {"$deleteFromPrimitiveList/finalizers": ["f1"]}},
     lambda o: o["metadata"]["finalizers"] == ["f2"]),
    ("ownerReferences merge by uid",
     {"metadata": {"ownerReferences": [{"uid": "u2", "name": "o2", "kind": "X",
                                        "apiVersion": "v1"}]}},
     lambda o: [r["uid"] for r in o["metadata"]["ownerReferences"]] == ["u2", "u1"]),
    ("a finalizer alone goes first",
     {"metadata": {"finalizers": ["f0"]}},
     lambda o: o["metadata"]["finalizers"] == ["f0", "f1", "f2"]),
    ("null deletes a label",
     {"metadata": {"labels": {"tier": None, "new": "n"}}},
     lambda o: o["metadata"]["labels"] == {"app": "a", "new": "n"}),
    ("conditions merge by type",
     {"status": {"conditions": [{"type": "Ready", "status": "True"}]}},
     lambda o: o["status"]["conditions"] == [{"type": "Ready", "status": "True"},
                                             {"type": "Initialized", "status": "True"}]),
    ("$patch: replace in a list replaces it",
     {"spec": {"containers": [{"$patch": "replace"}, {"name": "only", "image": "o"}]}},
     lambda o: _containers(o) == [{"name": "only", "image": "o"}]),
    ("$patch: replace in a map replaces it",
     {"metadata": {"labels": {"$patch": "replace", "x": "y"}}},
     lambda o: o["metadata"]["labels"] == {"x": "y"}),
    ("$patch: delete in a map deletes it",
     {"metadata": {"labels": {"$patch": "delete"}}},
     lambda o: "labels" not in o["metadata"]),
    ("$retainKeys drops the other union members",
     {"spec": {"volumes": [{"name": "data", "$retainKeys": ["name", "hostPath"],
                            "hostPath": {"path": "/h"}}]}},
     lambda o: o["spec"]["volumes"][0] == {"name": "data", "hostPath": {"path": "/h"}}),
    ("$retainKeys allows nulls for dropped members",
     {"spec": {"volumes": [{"name": "cfg", "$retainKeys": ["name", "secret"],
                            "configMap": None, "secret": {"secretName": "s"}}]}},
     lambda o: o["spec"]["volumes"][1] == {"name": "cfg", "secret": {"secretName": "s"}}),
    ("$setElementOrder orders containers",
     {"spec": {"$setElementOrder/containers": [{"name": "side"}, {"name": "main"}],
               "containers": [{"name": "main", "image": "img:3"}]}},
     lambda o: [c["name"] for c in _containers(o)] == ["side", "main"]
     and _containers(o)[1]["image"] == "img:3"),
    ("$setElementOrder keeps server-only items after their neighbour",
     {"spec": {"$setElementOrder/containers": [{"name": "new"}, {"name": "main"}],
               "containers": [{"name": "new", "image": "n"}]}},
     lambda o: [c["name"] for c in _containers(o)] == ["new", "main", "side"]),
    ("$setElementOrder on finalizers",
     {"metadata": {"$setElementOrder/finalizers": ["f2", "f1"]}},
     lambda o: o["metadata"]["finalizers"] == ["f2", "f1"]),
    ("new list elements have directives and nulls stripped",
     {"spec": {"containers": [{"name": "n", "image": "i", "env": None,
                               "$patch": "merge"}]}},
     lambda o: _containers(o)[0] == {"name": "n", "image": "i"}),
    ("scalar replace",
     {"spec": {"restartPolicy": "Never"}},
     lambda o: o["spec"]["restartPolicy"] == "Never"),
]


@pytest.mark.parametrize(("name", "patch", "check"), SMP_CASES, ids=[c[0] for c in SMP_CASES])
def test_strategic_pod(name: str, patch: dict[str, Any], check: Any) -> None:
    before = copy.deepcopy(POD)
    before_patch = copy.deepcopy(patch)
    out = strategic_merge_patch(POD, patch, kind="Pod")
    assert check(out), out
    assert before == POD and patch == before_patch


def test_strategic_deployment_template_and_service_ports() -> None:
    dep = {"kind": "Deployment", "spec": {"replicas": 1, "template": {
        "metadata": {"labels": {"app": "x"}},
        "spec": {"containers": [{"name": "c", "image": "a"}, {"name": "d", "image": "b"}]}}},
        "status": {"conditions": [{"type": "Available", "status": "False"}]}}
    out = strategic_merge_patch(
        dep, {"spec": {"template": {"spec": {"containers": [{"name": "d", "image": "z"}]}}},
              "status": {"conditions": [{"type": "Progressing", "status": "True"}]}},
        kind="Deployment")
    assert [c["image"] for c in out["spec"]["template"]["spec"]["containers"]] == ["a", "z"]
    assert [c["type"] for c in out["status"]["conditions"]] == ["Progressing", "Available"]

    svc = {"spec": {"ports": [{"port": 80, "name": "http"}, {"port": 443, "name": "https"}]}}
    out = strategic_merge_patch(svc, {"spec": {"ports": [{"port": 443, "targetPort": 8443}]}},
                                kind="Service")
    assert out["spec"]["ports"][1] == {"port": 443, "name": "https", "targetPort": 8443}

    node = {"status": {"addresses": [{"type": "InternalIP", "address": "1"}]}}
    out = strategic_merge_patch(
        node, {"status": {"addresses": [{"type": "Hostname", "address": "h"}]}}, kind="Node")
    assert len(out["status"]["addresses"]) == 2


def test_strategic_unknown_fields_behave_like_merge_patch() -> None:
    # ConfigMap has no list rules: lists replace, maps merge, null deletes.
    cm = {"metadata": {"name": "c", "finalizers": ["a"]}, "data": {"a": "1", "b": "2"},
          "items": [1, 2]}
    out = strategic_merge_patch(
        cm, {"data": {"a": None, "c": "3"}, "items": [3], "metadata": {"finalizers": ["b"]}},
        kind="ConfigMap")
    assert out == {"metadata": {"name": "c", "finalizers": ["b", "a"]},
                   "data": {"b": "2", "c": "3"}, "items": [3]}


def test_strategic_root_patch_directives() -> None:
    assert strategic_merge_patch({"a": 1}, {"$patch": "delete"}, kind="ConfigMap") == {}
    assert strategic_merge_patch({"a": 1}, {"$patch": "replace", "b": 2},
                                 kind="ConfigMap") == {"b": 2}


SMP_FAILURES = [
    ({"spec": {"containers": [{"image": "x"}]}}, 422, "does not contain declared merge key: name"),
    ({"spec": {"containers": ["str"]}}, 422, "not an object"),
    ({"metadata": {"labels": {"$patch": "frobnicate"}}}, 422, "unknown patch type"),
    ({"spec": {"volumes": [{"name": "data", "$retainKeys": ["name"], "hostPath": {}}]}}, 422,
     "not listed in $retainKeys"),
    ({"spec": {"volumes": [{"name": "data", "$retainKeys": "name"}]}}, 422,
     "$retainKeys must be a list"),
    ({"metadata": {"finalizers": [{"a": 1}]}}, 422, "may not contain objects"),
    ({"metadata": {"$deleteFromPrimitiveList/finalizers": "f1"}}, 422, "must be a list"),
    ({"spec": {"$setElementOrder/tolerations": []}}, 422, "not a merged list"),
    ({"spec": {"$setElementOrder/containers": "x"}}, 422, "must be a list"),
]


@pytest.mark.parametrize(("patch", "code", "fragment"), SMP_FAILURES)
def test_strategic_failures(patch: dict[str, Any], code: int, fragment: str) -> None:
    before = copy.deepcopy(POD)
    with pytest.raises(PatchError) as err:
        strategic_merge_patch(POD, patch, kind="Pod")
    assert err.value.status_code == code
    assert fragment in err.value.message
    assert before == POD


def test_strategic_rejects_non_object() -> None:
    with pytest.raises(PatchError) as err:
        strategic_merge_patch({}, [], kind="Pod")  # type: ignore[arg-type]
    assert err.value.status_code == 400


@pytest.mark.parametrize(("kind", "expected"), [
    ("Pod", True), ("Deployment", True), ("ConfigMap", True), ("PersistentVolumeClaim", True),
    ("CustomResourceDefinition", True), ("DataVolume", False), ("PodSpec", False),
    ("Container", False),
])
def test_supports_strategic(kind: str, expected: bool) -> None:
    assert supports_strategic(kind) is expected
