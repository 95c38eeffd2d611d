"""Pure rules of the server, as tables: names, metadata carry-over, generation, deletion
plans, garbage-collection decisions, immutable fields, CRD validation, event shapes."""

from __future__ import annotations

import datetime

import pytest

from localcluster.apiserver.kinds.conversions import event_from_core, event_to_core
from localcluster.apiserver.kinds.registry import Registry, ResourceType
from localcluster.apiserver.rules import crds, deletion, gc, immutability, meta, names

NOW = datetime.datetime(2026, 1, 2, 3, 4, 5, tzinfo=datetime.UTC)


@pytest.mark.parametrize(("name", "label", "ok"), [
    ("a", False, True), ("a.b-c", False, True), ("a.b", True, False), ("A", False, False),
    ("-a", False, False), ("a" * 63, True, True), ("a" * 64, True, False),
    ("a" * 253, False, True), ("a" * 254, False, False), ("a_b", False, False),
])
def test_name_rules(name, label, ok):
    assert (meta.name_error(name, label=label) is None) is ok


@pytest.mark.parametrize(("metadata", "field"), [
    ({}, "metadata.name"),
    ({"name": "x", "labels": {"a/b/c": "v"}}, "metadata.labels"),
    ({"name": "x", "labels": {"k": "bad value"}}, "metadata.labels.k"),
    ({"name": "x", "labels": {"k": 1}}, "metadata.labels"),
    ({"name": "x", "finalizers": "f"}, "metadata.finalizers"),
    ({"name": "x", "ownerReferences": [{"kind": "A", "name": "a", "uid": "u"}]},
     "metadata.ownerReferences[0].apiVersion"),
    ({"name": "x", "annotations": {"a": "x" * 300000}}, "metadata.annotations"),
])
def test_metadata_errors_name_the_field(metadata, field):
    causes = meta.validate_metadata({"metadata": metadata}, name_rule="subdomain", creating=True)
    assert field in [c.field for c in causes]


@pytest.mark.parametrize(("name", "rule", "ok"), [
    ("system:discovery", "path", True), ("a/b", "path", False), ("..", "path", False),
    ("50%", "path", False), ("system:discovery", "subdomain", False), ("a.b", "label", False),
])
def test_object_name_rules(name, rule, ok):
    assert (meta.object_name_error(name, rule=rule) is None) is ok


def test_valid_metadata_and_generate_name():
    ok = {"metadata": {"generateName": "x-", "labels": {"example.com/a": "b", "c": ""}}}
    assert meta.validate_metadata(ok, name_rule="subdomain", creating=True) == []
    assert meta.validate_metadata(ok, name_rule="subdomain", creating=False)  # name needed


def test_prepare_create_owns_system_fields():
    obj = meta.prepare_create({"metadata": {"name": "n", "uid": "fake", "generation": 9,
                                            "resourceVersion": "5", "namespace": "x"}},
                              namespace="ns", name="n", uid="u1", now=NOW)
    assert obj["metadata"] == {"name": "n", "namespace": "ns", "uid": "u1", "generation": 1,
                               "creationTimestamp": "2026-01-02T03:04:05Z"}


OLD = {"apiVersion": "v1", "kind": "K", "spec": {"a": 1}, "status": {"s": 1},
       "metadata": {"name": "n", "uid": "u", "generation": 3, "creationTimestamp": "t",
                    "resourceVersion": "7", "labels": {"l": "1"}}}


@pytest.mark.parametrize(("new", "has_status", "sub", "spec", "status", "gen", "labels"), [
    ({"spec": {"a": 2}, "status": {"s": 2}, "metadata": {"labels": {"l": "2"}}},
     True, "", {"a": 2}, {"s": 1}, 4, {"l": "2"}),
    ({"spec": {"a": 1}, "status": {"s": 2}, "metadata": {}}, True, "", {"a": 1}, {"s": 1},
     3, None),
    ({"spec": {"a": 9}, "status": {"s": 2}, "metadata": {"labels": {}}}, True, "status",
     {"a": 1}, {"s": 2}, 3, {"l": "1"}),
    ({"spec": {"a": 1}, "status": {"s": 2}, "metadata": {}}, False, "", {"a": 1}, {"s": 2},
     3, None),
])
def test_carry_over(new, has_status, sub, spec, status, gen, labels):
    out = meta.carry_over(OLD, {"apiVersion": "v1", "kind": "K", **new},
                          has_status=has_status, subresource=sub)
    assert out["spec"] == spec and out["status"] == status
    assert out["metadata"]["generation"] == gen
    assert out["metadata"]["uid"] == "u" and out["metadata"]["creationTimestamp"] == "t"
    assert out["metadata"].get("labels") == labels


def test_generation_without_spec_counts_other_fields():
    old = {"kind": "ConfigMap", "data": {"a": "1"}, "metadata": {"name": "c", "generation": 1}}
    new = {"kind": "ConfigMap", "data": {"a": "2"}, "metadata": {"name": "c"}}
    assert meta.carry_over(old, new, has_status=False, subresource="")["metadata"][
        "generation"] == 2


def test_finalizers_cannot_be_added_while_deleting():
    old = {"metadata": {"deletionTimestamp": "t", "finalizers": ["a"]}}
    assert meta.finalizer_additions_error(old, {"metadata": {"finalizers": ["a", "b"]}})
    assert meta.finalizer_additions_error(old, {"metadata": {"finalizers": []}}) is None


def _pod(node="n1", phase="Running", grace=None):
    spec = {"nodeName": node} if node else {}
    if grace is not None:
        spec["terminationGracePeriodSeconds"] = grace
    return {"kind": "Pod", "metadata": {"name": "p"}, "spec": spec,
            "status": {"phase": phase}}


@pytest.mark.parametrize(("obj", "propagation", "grace", "remove", "finalizers", "dgps"), [
    ({"kind": "ConfigMap", "metadata": {"name": "c"}}, None, None, True, None, None),
    ({"kind": "ConfigMap", "metadata": {"name": "c", "finalizers": ["x"]}}, None, None,
     False, ["x"], 0),
    ({"kind": "ConfigMap", "metadata": {"name": "c"}}, "Foreground", None, False,
     ["foregroundDeletion"], 0),
    ({"kind": "ConfigMap", "metadata": {"name": "c"}}, "Orphan", None, False, ["orphan"], 0),
    (_pod(), None, None, False, None, 30),
    (_pod(grace=5), None, None, False, None, 5),
    (_pod(), None, 0, True, None, None),
    (_pod(node=""), None, None, True, None, None),
    (_pod(phase="Succeeded"), None, None, True, None, None),
    ({"kind": "Namespace", "metadata": {"name": "n"}, "spec": {"finalizers": ["kubernetes"]}},
     None, None, False, None, 0),
    ({"kind": "CustomResourceDefinition", "metadata": {"name": "a.b"}}, None, None, False,
     ["customresourcecleanup.apiextensions.k8s.io"], 0),
])
def test_plan_delete(obj, propagation, grace, remove, finalizers, dgps):
    plan = deletion.plan_delete(obj, propagation=propagation, grace_seconds=grace, now=NOW)
    assert plan.remove is remove
    if not remove:
        m = plan.obj["metadata"]
        assert m.get("finalizers") == finalizers
        assert m["deletionGracePeriodSeconds"] == dgps
        assert m["deletionTimestamp"] == meta.format_time(NOW + datetime.timedelta(
            seconds=dgps))


def test_second_delete_only_shortens_the_grace_period():
    first = deletion.plan_delete(_pod(), propagation=None, grace_seconds=None, now=NOW).obj
    longer = deletion.plan_delete(first, propagation=None, grace_seconds=60, now=NOW)
    assert longer.obj["metadata"]["deletionGracePeriodSeconds"] == 30
    final = deletion.plan_delete(first, propagation=None, grace_seconds=0, now=NOW)
    assert final.remove


@pytest.mark.parametrize(("pre", "error"), [
    (None, False), ({"uid": "u"}, False), ({"uid": "v"}, True),
    ({"resourceVersion": "7"}, False), ({"resourceVersion": "6"}, True),
])
def test_delete_preconditions(pre, error):
    obj = {"metadata": {"uid": "u", "resourceVersion": "7"}}
    assert (deletion.precondition_error(obj, pre) is not None) is error


def _dep(*refs):
    return {"metadata": {"name": "d", "ownerReferences": [
        {"uid": uid, "blockOwnerDeletion": block} for uid, block in refs]}}


@pytest.mark.parametrize(("dep", "live", "action"), [
    (_dep(("a", False)), set(), "delete"),
    (_dep(("a", False), ("b", False)), {"b"}, "detach"),
    (_dep(("a", False), ("b", False)), set(), "delete"),
    (_dep(("b", False)), {"b"}, "keep"),
])
def test_on_owner_gone(dep, live, action):
    assert gc.on_owner_gone(dep, owner_uid="a", live_uids=live) == action


def test_gc_helpers():
    dep = _dep(("a", True), ("b", False))
    assert gc.owner_uids(dep) == {"a", "b"}
    assert gc.blocks_foreground(dep, "a") and not gc.blocks_foreground(dep, "b")
    assert gc.owner_uids(gc.without_owner(dep, "a")) == {"b"}
    assert "ownerReferences" not in gc.without_owner(_dep(("a", False)), "a")["metadata"]


@pytest.mark.parametrize(("kind", "old", "new", "field"), [
    ("Pod", {"spec": {"containers": [{"name": "c", "image": "1"}], "restartPolicy": "Always"}},
     {"spec": {"containers": [{"name": "c", "image": "1"}], "restartPolicy": "Never"}}, "spec"),
    ("Pod", {"spec": {"nodeName": "a"}}, {"spec": {"nodeName": "b"}}, "spec.nodeName"),
    ("PersistentVolumeClaim", {"spec": {"storageClassName": "a"}},
     {"spec": {"storageClassName": "b"}}, "spec"),
    ("PersistentVolumeClaim", {"spec": {"volumeName": "a"}}, {"spec": {"volumeName": "b"}},
     "spec"),
    ("ConfigMap", {"immutable": True, "data": {"a": "1"}},
     {"immutable": True, "data": {"a": "2"}}, "data"),
    ("Secret", {"type": "Opaque"}, {"type": "kubernetes.io/tls"}, "type"),
    ("StorageClass", {"provisioner": "a"}, {"provisioner": "b"}, "provisioner"),
    ("Deployment", {"spec": {"selector": {"a": "b"}}}, {"spec": {"selector": {}}},
     "spec.selector"),
])
def test_immutable_fields(kind, old, new, field):
    assert field in [c.field for c in immutability.immutable_changes(kind, old, new)]


@pytest.mark.parametrize(("kind", "old", "new"), [
    ("Pod", {"spec": {"containers": [{"name": "c", "image": "1"}]}},
     {"spec": {"containers": [{"name": "c", "image": "2"}], "nodeName": "n"}}),
    ("PersistentVolumeClaim", {"spec": {"resources": {"requests": {"storage": "1Gi"}}}},
     {"spec": {"resources": {"requests": {"storage": "2Gi"}}, "volumeName": "pv"}}),
    ("ConfigMap", {"data": {"a": "1"}}, {"data": {"a": "2"}}),
])
def test_allowed_changes(kind, old, new):
    assert immutability.immutable_changes(kind, old, new) == []


def _crd(**spec_changes):
    spec = {"group": "example.com", "scope": "Namespaced",
            "names": {"plural": "things", "kind": "Thing"},
            "versions": [{"name": "v1", "served": True, "storage": True, "schema": {
                "openAPIV3Schema": {"type": "object"}}}]}
    spec.update(spec_changes)
    return {"metadata": {"name": "things.example.com"}, "spec": spec}


@pytest.mark.parametrize(("crd", "field"), [
    (_crd(group="nodots"), "spec.group"),
    (_crd(scope="Galaxy"), "spec.scope"),
    (_crd(names={"plural": "Things", "kind": "Thing"}), "spec.names.plural"),
    (_crd(versions=[]), "spec.versions"),
    (_crd(versions=[{"name": "one", "storage": True, "schema": {"openAPIV3Schema": {
        "type": "object"}}}]), "spec.versions[0].name"),
    (_crd(versions=[{"name": "v1", "storage": True}]),
     "spec.versions[0].schema.openAPIV3Schema"),
    (_crd(versions=[{"name": "v1", "storage": True, "schema": {"openAPIV3Schema": {
        "type": "string"}}}]), "spec.versions[0].schema.openAPIV3Schema"),
])
def test_crd_validation(crd, field):
    assert field in [c.field for c in crds.validate_crd(crd)]


def test_crd_serving():
    crd = _crd(versions=[
        {"name": "v1beta1", "served": True, "storage": False,
         "schema": {"openAPIV3Schema": {"type": "object"}}},
        {"name": "v1", "served": True, "storage": True, "subresources": {"status": {}},
         "schema": {"openAPIV3Schema": {"type": "object"}}},
        {"name": "v1alpha1", "served": False, "storage": False,
         "schema": {"openAPIV3Schema": {"type": "object"}}}])
    assert crds.validate_crd(crd) == []
    types = crds.served_types(crd)
    assert [(t.version, t.has_status) for t in types] == [("v1beta1", False), ("v1", True)]
    assert {t.group_resource for t in types} == {"example.com/things"}
    status = crds.crd_status(crd, now="t")
    assert status["storedVersions"] == ["v1"]
    assert status["acceptedNames"]["listKind"] == "ThingList"
    registry = Registry()
    registry.replace_crd("example.com", "things", types, crds.storage_version(crd))
    assert registry.groups()["example.com"][0] == "v1"
    assert registry.by_kind("example.com", "Thing").version == "v1"
    registry.remove_group_resource("example.com", "things")
    assert "example.com" not in registry.groups()


def test_registry_storage_key_of_converted_types():
    rt = ResourceType("events.k8s.io", "v1", "events", "Event", True, storage_group="",
                      storage_resource="events")
    assert rt.group_resource == "/events" and rt.api_version == "events.k8s.io/v1"


def test_event_shapes_round_trip():
    new = {"apiVersion": "events.k8s.io/v1", "kind": "Event", "note": "n",
           "regarding": {"name": "p"}, "deprecatedCount": 2, "reportingController": "c"}
    core = event_to_core(new)
    assert core["message"] == "n" and core["involvedObject"] == {"name": "p"}
    assert core["count"] == 2 and core["reportingComponent"] == "c"
    assert event_from_core(core) == new


def test_generated_names_and_dropped_fields():
    name = names.generated_name("x" * 70)
    assert len(name) == 63 and name.startswith("x" * 58)
    assert names.dropped_fields({"a": 1, "b": {"c": 1, "d": [{"e": 1}]}},
                                {"b": {"d": [{}]}}) == ["a", "b.c", "b.d[0].e"]


_C = {"name": "c", "image": "i"}


@pytest.mark.parametrize(("kind", "obj", "field"), [
    ("Pod", {"spec": {}}, "spec.containers"),
    ("Pod", {"spec": {"containers": [{"name": "c"}]}}, "spec.containers[0].image"),
    ("Pod", {"spec": {"containers": [{"image": "i"}]}}, "spec.containers[0].name"),
    ("Pod", {"spec": {"containers": [_C, _C]}}, "spec.containers[1].name"),
    ("Pod", {"spec": {"containers": [{"name": "C_1", "image": "i"}]}},
     "spec.containers[0].name"),
    ("Pod", {"spec": {"containers": [_C], "restartPolicy": "Sometimes"}},
     "spec.restartPolicy"),
    ("PersistentVolumeClaim", {"spec": {"resources": {"requests": {"storage": "1Gi"}}}},
     "spec.accessModes"),
    ("PersistentVolumeClaim", {"spec": {"accessModes": ["ReadWriteOnce"]}},
     "spec.resources[storage]"),
    ("PersistentVolume", {"spec": {"accessModes": ["ReadWriteOnce"]}}, "spec.capacity"),
    ("Service", {"spec": {"ports": [{"port": 70000}]}}, "spec.ports[0].port"),
    ("ConfigMap", {"data": {"bad key": "v"}}, "data[bad key]"),
    ("RoleBinding", {"kind": "RoleBinding", "roleRef": {"kind": "Role"}}, "roleRef.name"),
    ("ClusterRoleBinding", {"kind": "ClusterRoleBinding",
                            "roleRef": {"kind": "Role", "name": "r"}}, "roleRef.kind"),
    ("RoleBinding", {"kind": "RoleBinding", "roleRef": {"kind": "Role", "name": "r"},
                     "subjects": [{"kind": "Robot", "name": "x"}]}, "subjects[0].kind"),
    ("Deployment", {"spec": {"template": {"spec": {"containers": [_C]}}}}, "spec.selector"),
    ("Deployment", {"spec": {"selector": {"matchLabels": {"a": "b"}}, "template": {
        "metadata": {"labels": {"a": "c"}}, "spec": {"containers": [_C]}}}},
     "spec.template.metadata.labels"),
    ("StorageClass", {}, "provisioner"),
])
def test_builtin_validation(kind, obj, field):
    from localcluster.apiserver.rules import validation

    assert field in [c.field for c in validation.validate(kind, obj)]


@pytest.mark.parametrize(("kind", "obj"), [
    ("Pod", {"spec": {"containers": [_C], "initContainers": [{"name": "i", "image": "x"}]}}),
    ("PersistentVolumeClaim", {"spec": {"accessModes": ["ReadWriteOnce"],
                                        "resources": {"requests": {"storage": "1Gi"}}}}),
    ("Deployment", {"spec": {"selector": {"matchLabels": {"a": "b"}}, "template": {
        "metadata": {"labels": {"a": "b", "x": "y"}}, "spec": {"containers": [_C]}}}}),
    ("ConfigMap", {"data": {"a.b-c_d": "v"}}),
    ("ClusterRoleBinding", {"kind": "ClusterRoleBinding", "roleRef": {
        "apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "r"},
        "subjects": [{"kind": "Group", "name": "g", "apiGroup": "rbac.authorization.k8s.io"}]}),
    ("Namespace", {}),
])
def test_builtin_validation_accepts_valid_objects(kind, obj):
    from localcluster.apiserver.rules import validation

    assert validation.validate(kind, obj) == []


def test_role_ref_is_immutable():
    old = {"roleRef": {"kind": "Role", "name": "a"}}
    new = {"roleRef": {"kind": "Role", "name": "b"}}
    assert [c.field for c in immutability.immutable_changes("RoleBinding", old, new)] == [
        "roleRef"]


def test_generation_of_custom_resources_without_status_subresource_counts_status():
    old = {"spec": {"a": 1}, "status": {"s": 1}, "metadata": {"name": "n", "generation": 1}}
    new = {"spec": {"a": 1}, "status": {"s": 2}, "metadata": {"name": "n"}}
    bumped = meta.carry_over(old, new, has_status=False, subresource="",
                             status_in_generation=True)
    assert bumped["metadata"]["generation"] == 2
    assert meta.carry_over(old, new, has_status=False, subresource="")["metadata"][
        "generation"] == 1
