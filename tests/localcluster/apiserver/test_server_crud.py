"""Every verb on built-in types through the official ``kubernetes`` client."""

from __future__ import annotations

import json

import pytest
from kubernetes import client as k8s

from .server_fixtures import Raw


def _status(err: k8s.ApiException) -> dict:
    return json.loads(err.body)


def test_create_get_list_update_delete(api, namespace):
    core = k8s.CoreV1Api(api)
    created = core.create_namespaced_config_map(namespace, {
        "metadata": {"name": "one", "labels": {"app": "a"}}, "data": {"k": "v"}})
    meta = created.metadata
    assert meta.uid and meta.creation_timestamp and int(meta.resource_version) > 0
    got = core.read_namespaced_config_map("one", namespace)
    assert got.data == {"k": "v"} and got.metadata.uid == meta.uid
    got.data["k"] = "w"
    updated = core.replace_namespaced_config_map("one", namespace, got)
    assert updated.data == {"k": "w"}
    assert int(updated.metadata.resource_version) > int(meta.resource_version)
    assert updated.metadata.uid == meta.uid
    assert updated.metadata.creation_timestamp == meta.creation_timestamp
    items = core.list_namespaced_config_map(namespace).items
    assert [i.metadata.name for i in items] == ["kube-root-ca.crt", "one"]
    core.delete_namespaced_config_map("one", namespace)
    with pytest.raises(k8s.ApiException) as err:
        core.read_namespaced_config_map("one", namespace)
    assert err.value.status == 404
    status = _status(err.value)
    assert status["kind"] == "Status" and status["reason"] == "NotFound"
    assert status["message"] == 'configmaps "one" not found'
    assert status["details"] == {"name": "one", "kind": "configmaps"}


def test_resource_versions_are_global_and_increasing(api, namespace):
    core = k8s.CoreV1Api(api)
    a = core.create_namespaced_config_map(namespace, {"metadata": {"name": "a"}})
    b = core.create_namespaced_secret(namespace, {"metadata": {"name": "b"},
                                                  "stringData": {"x": "y"}})
    assert int(b.metadata.resource_version) > int(a.metadata.resource_version)
    assert b.data == {"x": "eQ=="} and b.type == "Opaque"
    listed = core.list_namespaced_config_map(namespace)
    assert int(listed.metadata.resource_version) >= int(b.metadata.resource_version)


def test_generate_name(api, namespace):
    core = k8s.CoreV1Api(api)
    names = {core.create_namespaced_config_map(namespace, {
        "metadata": {"generateName": "gen-"}}).metadata.name for _ in range(5)}
    assert len(names) == 5
    assert all(n.startswith("gen-") and len(n) == 9 for n in names)


def test_already_exists(api, namespace):
    core = k8s.CoreV1Api(api)
    core.create_namespaced_config_map(namespace, {"metadata": {"name": "dup"}})
    with pytest.raises(k8s.ApiException) as err:
        core.create_namespaced_config_map(namespace, {"metadata": {"name": "dup"},
                                                      "data": {"a": "b"}})
    assert err.value.status == 409 and _status(err.value)["reason"] == "AlreadyExists"
    assert core.read_namespaced_config_map("dup", namespace).data is None


def test_stale_update_conflicts(api, namespace):
    core = k8s.CoreV1Api(api)
    first = core.create_namespaced_config_map(namespace, {"metadata": {"name": "c"},
                                                          "data": {"n": "0"}})
    core.patch_namespaced_config_map("c", namespace, {"data": {"n": "1"}})
    first.data = {"n": "stale"}
    with pytest.raises(k8s.ApiException) as err:
        core.replace_namespaced_config_map("c", namespace, first)
    assert err.value.status == 409
    status = _status(err.value)
    assert status["reason"] == "Conflict" and "the object has been modified" in status["message"]
    assert core.read_namespaced_config_map("c", namespace).data == {"n": "1"}


def test_merge_json_and_strategic_patches(api, namespace, raw: Raw):
    core = k8s.CoreV1Api(api)
    core.create_namespaced_config_map(namespace, {"metadata": {"name": "p"},
                                                  "data": {"a": "1", "b": "2"}})
    path = f"/api/v1/namespaces/{namespace}/configmaps/p"
    code, body = raw.request("PATCH", path, {"data": {"a": None, "c": "3"}},
                             content_type="application/merge-patch+json")
    assert code == 200 and body["data"] == {"b": "2", "c": "3"}
    code, body = raw.request("PATCH", path, [{"op": "test", "path": "/data/b", "value": "2"},
                                             {"op": "replace", "path": "/data/b", "value": "9"}],
                             content_type="application/json-patch+json")
    assert code == 200 and body["data"]["b"] == "9"
    code, body = raw.request("PATCH", path, [{"op": "test", "path": "/data/b", "value": "2"},
                                             {"op": "remove", "path": "/data/b"}],
                             content_type="application/json-patch+json")
    assert code in (409, 422), body
    assert body["kind"] == "Status"
    assert core.read_namespaced_config_map("p", namespace).data["b"] == "9"
    pod = {"metadata": {"name": "pod"}, "spec": {"containers": [
        {"name": "a", "image": "img:1"}, {"name": "b", "image": "img:1"}]}}
    core.create_namespaced_pod(namespace, pod)
    # the typed client sends strategic merge patch for a dict body
    patched = core.patch_namespaced_pod("pod", namespace, {"spec": {"containers": [
        {"name": "b", "image": "img:2"}]}})
    assert [(c.name, c.image) for c in patched.spec.containers] == [("a", "img:1"),
                                                                    ("b", "img:2")]
    code, body = raw.request("PATCH", path, {"data": {}}, content_type="text/plain")
    assert code == 415 and body["reason"] == "UnsupportedMediaType"


def test_patch_with_stale_resource_version_conflicts(api, namespace, raw: Raw):
    k8s.CoreV1Api(api).create_namespaced_config_map(namespace, {"metadata": {"name": "r"}})
    code, body = raw.request("PATCH", f"/api/v1/namespaces/{namespace}/configmaps/r",
                             {"metadata": {"resourceVersion": "1"}, "data": {"a": "b"}},
                             content_type="application/merge-patch+json")
    assert code == 409 and body["reason"] == "Conflict"


def test_label_and_field_selectors(api, namespace):
    core = k8s.CoreV1Api(api)
    for name, labels in (("x1", {"app": "x", "tier": "web"}), ("x2", {"app": "x"}),
                         ("y1", {"app": "y"})):
        core.create_namespaced_config_map(namespace, {"metadata": {"name": name,
                                                                   "labels": labels}})

    def names(**kw):
        return [i.metadata.name for i in core.list_namespaced_config_map(namespace, **kw).items]

    assert names(label_selector="app=x") == ["x1", "x2"]
    assert names(label_selector="app in (x,y),!tier") == ["x2", "y1"]
    assert names(label_selector="tier") == ["x1"]
    assert names(field_selector="metadata.name=y1") == ["y1"]
    assert names(field_selector="metadata.name!=y1", label_selector="app") == ["x1", "x2"]
    cluster_wide = core.list_config_map_for_all_namespaces(label_selector="app=y").items
    assert [(i.metadata.namespace, i.metadata.name) for i in cluster_wide] == [(namespace, "y1")]
    with pytest.raises(k8s.ApiException) as err:
        core.list_namespaced_config_map(namespace, label_selector="app in (x")
    assert err.value.status == 400 and _status(err.value)["reason"] == "BadRequest"


def test_pagination(api, namespace):
    core = k8s.CoreV1Api(api)
    for i in range(7):
        core.create_namespaced_config_map(namespace, {"metadata": {"name": f"page-{i}"}})
    seen, token, pages = [], None, 0
    while True:
        page = core.list_namespaced_config_map(namespace, limit=3, _continue=token)
        pages += 1
        seen += [i.metadata.name for i in page.items]
        token = page.metadata._continue
        if not token:
            break
    assert pages == 3 and seen == ["kube-root-ca.crt"] + [f"page-{i}" for i in range(7)]
    with pytest.raises(k8s.ApiException) as err:
        core.list_namespaced_config_map(namespace, limit=3, _continue="garbage!")
    assert err.value.status == 400


def test_delete_preconditions(api, namespace):
    core = k8s.CoreV1Api(api)
    cm = core.create_namespaced_config_map(namespace, {"metadata": {"name": "pre"}})
    with pytest.raises(k8s.ApiException) as err:
        core.delete_namespaced_config_map("pre", namespace, body=k8s.V1DeleteOptions(
            preconditions=k8s.V1Preconditions(uid="not-the-uid")))
    assert err.value.status == 409 and "Precondition failed" in _status(err.value)["message"]
    core.delete_namespaced_config_map("pre", namespace, body=k8s.V1DeleteOptions(
        preconditions=k8s.V1Preconditions(uid=cm.metadata.uid,
                                          resource_version=cm.metadata.resource_version)))
    assert [i.metadata.name for i in core.list_namespaced_config_map(namespace).items] == [
        "kube-root-ca.crt"]


def test_delete_collection(api, namespace):
    core = k8s.CoreV1Api(api)
    for name, app in (("d1", "gone"), ("d2", "gone"), ("d3", "kept")):
        core.create_namespaced_config_map(namespace, {"metadata": {"name": name,
                                                                   "labels": {"app": app}}})
    core.delete_collection_namespaced_config_map(namespace, label_selector="app=gone")
    assert [i.metadata.name for i in core.list_namespaced_config_map(namespace).items] == [
        "d3", "kube-root-ca.crt"]


def test_namespace_must_exist_and_names_are_checked(api):
    core = k8s.CoreV1Api(api)
    with pytest.raises(k8s.ApiException) as err:
        core.create_namespaced_config_map("no-such-ns", {"metadata": {"name": "a"}})
    assert err.value.status == 404
    assert _status(err.value)["message"] == 'namespaces "no-such-ns" not found'
    with pytest.raises(k8s.ApiException) as err:
        core.create_namespace({"metadata": {"name": "Bad_Name"}})
    status = _status(err.value)
    assert err.value.status == 422 and status["reason"] == "Invalid"
    assert status["details"]["causes"][0]["field"] == "metadata.name"
    assert "RFC 1123" in status["message"]


def test_system_namespaces_and_default_service_accounts(api, namespace):
    core = k8s.CoreV1Api(api)
    names = {n.metadata.name for n in core.list_namespace().items}
    assert {"default", "kube-system", "kube-public", "kube-node-lease"} <= names
    import time
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        sas = [s.metadata.name for s in core.list_namespaced_service_account(namespace).items]
        if sas == ["default"]:
            break
        time.sleep(0.05)
    assert sas == ["default"]


def test_generation_bumps_on_spec_changes_only(api, namespace):
    apps = k8s.AppsV1Api(api)
    dep = apps.create_namespaced_deployment(namespace, {
        "metadata": {"name": "web"},
        "spec": {"selector": {"matchLabels": {"app": "web"}}, "template": {
            "metadata": {"labels": {"app": "web"}},
            "spec": {"containers": [{"name": "c", "image": "i"}]}}}})
    assert dep.metadata.generation == 1 and dep.spec.replicas == 1
    dep = apps.patch_namespaced_deployment("web", namespace, {"metadata": {"labels": {"a": "b"}}})
    assert dep.metadata.generation == 1
    dep = apps.patch_namespaced_deployment("web", namespace, {"spec": {"replicas": 3}})
    assert dep.metadata.generation == 2
    # status goes through /status only; the main resource ignores it
    dep = apps.patch_namespaced_deployment_status("web", namespace, {
        "status": {"replicas": 3}, "spec": {"replicas": 5}})
    assert dep.status.replicas == 3 and dep.spec.replicas == 3 and dep.metadata.generation == 2
    dep = apps.patch_namespaced_deployment("web", namespace, {"status": {"replicas": 7}})
    assert dep.status.replicas == 3


def test_pod_defaults_and_immutable_spec(api, namespace):
    core = k8s.CoreV1Api(api)
    pod = core.create_namespaced_pod(namespace, {
        "metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "image": "i:1"}]},
        "status": {"phase": "Running"}})
    assert pod.status.phase == "Pending"
    assert pod.spec.service_account_name == "default" and pod.spec.restart_policy == "Always"
    with pytest.raises(k8s.ApiException) as err:
        core.patch_namespaced_pod("p", namespace, {"spec": {"restartPolicy": "Never"}})
    assert err.value.status == 422
    pod = core.patch_namespaced_pod("p", namespace, {"spec": {"containers": [
        {"name": "c", "image": "i:2"}]}})
    assert pod.spec.containers[0].image == "i:2"


def test_events_core_and_events_k8s_io_share_objects(api, namespace):
    core = k8s.CoreV1Api(api)
    events = k8s.EventsV1Api(api)
    events.create_namespaced_event(namespace, {
        "metadata": {"name": "e1"}, "regarding": {"kind": "Pod", "name": "p",
                                                  "namespace": namespace},
        "reason": "Started", "note": "it started", "type": "Normal",
        "eventTime": "2026-01-01T00:00:00.000000Z", "action": "Start",
        "reportingController": "test", "reportingInstance": "test-1"})
    ev = core.read_namespaced_event("e1", namespace)
    assert ev.message == "it started" and ev.involved_object.name == "p"
    core.create_namespaced_event(namespace, {
        "metadata": {"name": "e2"}, "involvedObject": {"kind": "Pod", "name": "q"},
        "reason": "Pulled", "message": "pulled it", "type": "Normal",
        "eventTime": "2026-01-01T00:00:00.000000Z"})
    back = events.read_namespaced_event("e2", namespace)
    assert back.note == "pulled it" and back.regarding.name == "q"
    found = core.list_namespaced_event(namespace, field_selector="involvedObject.name=q").items
    assert [e.metadata.name for e in found] == ["e2"]


def test_leases(api, namespace):
    coord = k8s.CoordinationV1Api(api)
    lease = coord.create_namespaced_lease(namespace, {
        "metadata": {"name": "leader"}, "spec": {"holderIdentity": "a",
                                                 "leaseDurationSeconds": 15}})
    lease.spec.holder_identity = "b"
    assert coord.replace_namespaced_lease("leader", namespace, lease).spec.holder_identity == "b"


def test_discovery(api, raw: Raw):
    groups = {g.name for g in k8s.ApisApi(api).get_api_versions().groups}
    assert {"apps", "rbac.authorization.k8s.io", "apiextensions.k8s.io", "storage.k8s.io",
            "coordination.k8s.io", "events.k8s.io", "authorization.k8s.io",
            "admissionregistration.k8s.io"} <= groups
    resources = {r.name: r for r in k8s.CoreV1Api(api).get_api_resources().resources}
    assert resources["pods"].namespaced and not resources["nodes"].namespaced
    assert "pods/status" in resources and "pods/log" in resources
    assert resources["configmaps"].short_names == ["cm"]
    code, version = raw.request("GET", "/version")
    assert code == 200 and version["major"] == "1"
    code, body = raw.request("GET", "/apis/nope.example.com/v1/things")
    assert code == 404 and body["kind"] == "Status"


def test_concurrent_writers_lose_nothing(api, namespace):
    from concurrent.futures import ThreadPoolExecutor

    core = k8s.CoreV1Api(api)
    core.create_namespaced_config_map(namespace, {"metadata": {"name": "hot"}, "data": {}})

    def patch(i):
        core.patch_namespaced_config_map("hot", namespace, {"data": {f"k{i}": str(i)}})

    def increment(_):
        while True:
            cm = core.read_namespaced_config_map("hot", namespace)
            cm.data = {**(cm.data or {}), "n": str(int((cm.data or {}).get("n", "0")) + 1)}
            try:
                core.replace_namespaced_config_map("hot", namespace, cm)
                return
            except k8s.ApiException as err:
                assert err.status == 409
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(patch, range(40)))
        list(pool.map(increment, range(20)))
    data = core.read_namespaced_config_map("hot", namespace).data
    assert {k: v for k, v in data.items() if k != "n"} == {f"k{i}": str(i) for i in range(40)}
    assert data["n"] == "20"


def test_aggregated_discovery(raw: Raw, widgets):
    accept = ("application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,"
              "application/json")
    code, doc = raw.request("GET", "/apis", headers={"Accept": accept})
    assert code == 200 and doc["kind"] == "APIGroupDiscoveryList"
    groups = {item["metadata"]["name"]: item for item in doc["items"]}
    assert "" not in groups and "example.com" in groups
    widgets_entry = groups["example.com"]["versions"][0]["resources"][0]
    assert widgets_entry["resource"] == "widgets" and widgets_entry["scope"] == "Namespaced"
    assert widgets_entry["subresources"][0]["subresource"] == "status"
    code, core = raw.request("GET", "/api", headers={"Accept": accept})
    assert [i["metadata"]["name"] for i in core["items"]] == [""]
    pods = next(r for r in core["items"][0]["versions"][0]["resources"]
                if r["resource"] == "pods")
    assert {s["subresource"] for s in pods["subresources"]} == {
        "status", "log", "binding", "exec", "attach", "portforward"}
    code, plain = raw.request("GET", "/api", headers={"Accept": "application/json"})
    assert plain["kind"] == "APIVersions"


def test_unsupported_field_selectors_are_400(api, namespace, raw: Raw):
    core = k8s.CoreV1Api(api)
    with pytest.raises(k8s.ApiException) as err:
        core.list_namespaced_config_map(namespace, field_selector="data.a=b")
    assert err.value.status == 400 and "field label not supported: data.a" in err.value.body
    core.create_namespaced_pod(namespace, {"metadata": {"name": "fp"}, "spec": {
        "nodeName": "n9", "containers": [{"name": "c", "image": "i"}]}})
    assert [p.metadata.name for p in core.list_namespaced_pod(
        namespace, field_selector="spec.nodeName=n9,status.phase=Pending").items] == ["fp"]
    assert [s.metadata.name for s in core.list_namespaced_secret(
        namespace, field_selector="type=Opaque").items] == []


def _claim(name: str, **spec: object) -> dict:
    return {"metadata": {"name": name}, "spec": {
        "accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Mi"}},
        **spec}}


def test_claims_get_the_default_storage_class(api, namespace):
    storage = k8s.StorageV1Api(api)
    core = k8s.CoreV1Api(api)
    made = []
    # Created within one second: the newest by timestamp ties, then the name decides.
    for name, default in (("dsc-a-old", "true"), ("dsc-plain", None), ("dsc-b-new", "true")):
        annotations = {"storageclass.kubernetes.io/is-default-class": default} if default else {}
        storage.create_storage_class({"metadata": {"name": name, "annotations": annotations},
                                      "provisioner": "example.com/p"})
        made.append(name)
    try:
        unset = core.create_namespaced_persistent_volume_claim(namespace, _claim("c1"))
        assert unset.spec.storage_class_name == "dsc-b-new"  # the newest default
        empty = core.create_namespaced_persistent_volume_claim(
            namespace, _claim("c2", storageClassName=""))
        assert empty.spec.storage_class_name == ""  # "" asks for no class: left alone
        named = core.create_namespaced_persistent_volume_claim(
            namespace, _claim("c3", storageClassName="dsc-plain"))
        assert named.spec.storage_class_name == "dsc-plain"
    finally:
        for name in made:
            storage.delete_storage_class(name)


def test_default_storage_class_rule():
    from localcluster.apiserver.rules.defaults import default_storage_class

    def sc(name: str, default: str | None, created: str) -> dict:
        ann = {"storageclass.kubernetes.io/is-default-class": default} if default else {}
        return {"metadata": {"name": name, "annotations": ann, "creationTimestamp": created}}

    assert default_storage_class([]) is None
    assert default_storage_class([sc("a", None, "1"), sc("b", "false", "2")]) is None
    assert default_storage_class([sc("a", "true", "1"), sc("b", "true", "2")]) == "b"
    assert default_storage_class([sc("b", "true", "1"), sc("a", "true", "1")]) == "b"


def test_delete_answers_as_the_clients_expect(api, namespace):
    """Claims, volumes, storage classes, pods... answer DELETE with the object; config
    maps and most others with a Status (each as the official client deserializes it)."""
    core = k8s.CoreV1Api(api)
    core.create_namespaced_persistent_volume_claim(namespace, _claim("gone"))
    deleted = core.delete_namespaced_persistent_volume_claim("gone", namespace)
    assert isinstance(deleted, k8s.V1PersistentVolumeClaim)
    assert deleted.metadata.name == "gone"
    core.create_namespaced_config_map(namespace, {"metadata": {"name": "gone"}})
    status = core.delete_namespaced_config_map("gone", namespace)
    assert isinstance(status, k8s.V1Status) and status.status == "Success"
