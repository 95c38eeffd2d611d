"""Finalizers, deletionTimestamp, ownerReference garbage collection, namespace deletion,
and Pod graceful deletion finished by a second DELETE (what the kubelet does)."""

from __future__ import annotations

import time

import jwt
import pytest
from kubernetes import client as k8s


def _wait(predicate, timeout=5.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.03)
    return predicate()


def _exists(read, *args):
    try:
        read(*args)
        return True
    except k8s.ApiException as err:
        if err.status == 404:
            return False
        raise


def test_finalizers_hold_the_object_until_removed(api, namespace):
    core = k8s.CoreV1Api(api)
    core.create_namespaced_config_map(namespace, {"metadata": {
        "name": "f", "finalizers": ["example.com/hold"]}})
    core.delete_namespaced_config_map("f", namespace)
    held = core.read_namespaced_config_map("f", namespace)
    assert held.metadata.deletion_timestamp is not None
    with pytest.raises(k8s.ApiException) as err:  # no new finalizers once deleting
        core.patch_namespaced_config_map("f", namespace, {"metadata": {
            "finalizers": ["example.com/hold", "example.com/more"]}})
    assert err.value.status == 422
    core.patch_namespaced_config_map("f", namespace, {"metadata": {"finalizers": None}})
    assert not _exists(core.read_namespaced_config_map, "f", namespace)


def _owner_and_dependents(core, namespace, *, block=False):
    owner = core.create_namespaced_config_map(namespace, {"metadata": {"name": "owner"}})
    ref = {"apiVersion": "v1", "kind": "ConfigMap", "name": "owner",
           "uid": owner.metadata.uid, "blockOwnerDeletion": block}
    for name in ("dep1", "dep2"):
        core.create_namespaced_config_map(namespace, {"metadata": {
            "name": name, "ownerReferences": [ref]}})
    return ref


def test_background_deletion_collects_dependents(api, namespace):
    core = k8s.CoreV1Api(api)
    _owner_and_dependents(core, namespace)
    core.create_namespaced_config_map(namespace, {"metadata": {"name": "free"}})
    core.delete_namespaced_config_map("owner", namespace,
                                      body=k8s.V1DeleteOptions(propagation_policy="Background"))
    assert _wait(lambda: [c.metadata.name for c in core.list_namespaced_config_map(
        namespace).items] == ["free", "kube-root-ca.crt"])


def test_dependent_with_another_live_owner_only_loses_the_reference(api, namespace):
    core = k8s.CoreV1Api(api)
    ref = _owner_and_dependents(core, namespace)
    other = core.create_namespaced_config_map(namespace, {"metadata": {"name": "other"}})
    other_ref = {"apiVersion": "v1", "kind": "ConfigMap", "name": "other",
                 "uid": other.metadata.uid}
    core.patch_namespaced_config_map("dep1", namespace, {"metadata": {
        "ownerReferences": [ref, other_ref]}})
    core.delete_namespaced_config_map("owner", namespace)
    assert _wait(lambda: not _exists(core.read_namespaced_config_map, "dep2", namespace))
    dep1 = core.read_namespaced_config_map("dep1", namespace)
    assert [r.name for r in dep1.metadata.owner_references] == ["other"]


def test_foreground_waits_for_blocking_dependents(api, namespace):
    core = k8s.CoreV1Api(api)
    _owner_and_dependents(core, namespace, block=True)
    core.patch_namespaced_config_map("dep1", namespace, {"metadata": {
        "finalizers": ["example.com/slow"]}})
    core.delete_namespaced_config_map("owner", namespace,
                                      body=k8s.V1DeleteOptions(propagation_policy="Foreground"))
    assert _wait(lambda: not _exists(core.read_namespaced_config_map, "dep2", namespace))
    owner = core.read_namespaced_config_map("owner", namespace)
    assert owner.metadata.deletion_timestamp is not None
    assert "foregroundDeletion" in owner.metadata.finalizers
    core.patch_namespaced_config_map("dep1", namespace, {"metadata": {"finalizers": None}})
    assert _wait(lambda: not _exists(core.read_namespaced_config_map, "owner", namespace))


def test_orphan_keeps_dependents_without_the_reference(api, namespace):
    core = k8s.CoreV1Api(api)
    _owner_and_dependents(core, namespace)
    core.delete_namespaced_config_map("owner", namespace,
                                      body=k8s.V1DeleteOptions(propagation_policy="Orphan"))
    assert _wait(lambda: not _exists(core.read_namespaced_config_map, "owner", namespace))
    for name in ("dep1", "dep2"):
        assert core.read_namespaced_config_map(name, namespace).metadata.owner_references is None


def test_namespace_deletion_removes_content_then_itself(api, namespace):
    core = k8s.CoreV1Api(api)
    core.create_namespaced_config_map(namespace, {"metadata": {
        "name": "held", "finalizers": ["example.com/hold"]}})
    core.create_namespaced_secret(namespace, {"metadata": {"name": "s"}})
    core.delete_namespace(namespace)
    ns = core.read_namespace(namespace)
    assert ns.status.phase == "Terminating" and ns.metadata.deletion_timestamp
    with pytest.raises(k8s.ApiException) as err:
        core.create_namespaced_config_map(namespace, {"metadata": {"name": "late"}})
    assert err.value.status == 403 and "being terminated" in err.value.body
    assert _wait(lambda: not core.list_namespaced_secret(namespace).items)
    assert _exists(core.read_namespace, namespace)  # the held object keeps it
    core.patch_namespaced_config_map("held", namespace, {"metadata": {"finalizers": None}})
    assert _wait(lambda: not _exists(core.read_namespace, namespace))


def test_pod_on_a_node_is_deleted_gracefully(api, namespace):
    core = k8s.CoreV1Api(api)
    spec = {"containers": [{"name": "c", "image": "i"}]}
    core.create_namespaced_pod(namespace, {"metadata": {"name": "unscheduled"}, "spec": spec})
    core.delete_namespaced_pod("unscheduled", namespace)
    assert not _exists(core.read_namespaced_pod, "unscheduled", namespace)
    core.create_namespaced_pod(namespace, {"metadata": {"name": "bound"},
                                           "spec": {**spec, "nodeName": "node1"}})
    core.delete_namespaced_pod("bound", namespace)
    pod = core.read_namespaced_pod("bound", namespace)
    assert pod.metadata.deletion_grace_period_seconds == 30 and pod.metadata.deletion_timestamp
    # the kubelet, once the containers are stopped, finishes with gracePeriodSeconds=0
    core.delete_namespaced_pod("bound", namespace, grace_period_seconds=0)
    assert not _exists(core.read_namespaced_pod, "bound", namespace)


def test_pod_binding_and_service_account_token(api, namespace):
    core = k8s.CoreV1Api(api)
    core.create_namespaced_pod(namespace, {"metadata": {"name": "b"}, "spec": {
        "containers": [{"name": "c", "image": "i"}]}})
    core.create_namespaced_pod_binding("b", namespace, {
        "metadata": {"name": "b"}, "target": {"kind": "Node", "name": "node1"}},
        _preload_content=False)
    assert core.read_namespaced_pod("b", namespace).spec.node_name == "node1"
    _wait(lambda: core.list_namespaced_service_account(namespace).items)
    token = core.create_namespaced_service_account_token("default", namespace, {
        "spec": {"audiences": ["x"], "expirationSeconds": 600}})
    claims = jwt.decode(token.status.token, options={"verify_signature": False})
    assert claims["aud"] == ["x"] and claims["exp"] - claims["iat"] == 600
    with pytest.raises(k8s.ApiException) as err:
        core.create_namespaced_service_account_token("default", namespace, {
            "spec": {"expirationSeconds": 60}})
    assert err.value.status == 422 and "10 minutes" in err.value.body
    with pytest.raises(k8s.ApiException) as err:
        core.create_namespaced_service_account_token("nobody", namespace, {"spec": {}})
    assert err.value.status == 404


def test_dependent_created_for_a_missing_owner_is_collected(api, namespace):
    core = k8s.CoreV1Api(api)
    core.create_namespaced_config_map(namespace, {"metadata": {
        "name": "stray", "ownerReferences": [{"apiVersion": "v1", "kind": "ConfigMap",
                                              "name": "never", "uid": "no-such-uid"}]}})
    assert _wait(lambda: not _exists(core.read_namespaced_config_map, "stray", namespace))


def test_collection_resumes_after_a_restart(tmp_path):
    from localcluster.apiserver.threaded import ServerThread

    from .server_fixtures import make_client

    thread = ServerThread(tmp_path / "d")
    server = thread.start()
    with make_client(server) as c:
        core = k8s.CoreV1Api(c)
        owner = core.create_namespaced_config_map("default", {"metadata": {"name": "o"}})
        core.create_namespaced_config_map("default", {"metadata": {
            "name": "dep", "ownerReferences": [{"apiVersion": "v1", "kind": "ConfigMap",
                                                "name": "o", "uid": owner.metadata.uid}]}})
    # remove the owner behind the collector's back, as a crash between the two would
    thread.call(_remove_quietly(server, "o"))
    thread.stop()
    thread = ServerThread(tmp_path / "d")
    server = thread.start()
    try:
        with make_client(server) as c:
            core = k8s.CoreV1Api(c)
            assert _wait(lambda: not _exists(core.read_namespaced_config_map, "dep",
                                             "default"))
    finally:
        thread.stop()


async def _remove_quietly(server, name):
    stored = server.store.get("/configmaps", "default", name)
    server.store.remove("/configmaps", "default", name, stored.copy())
