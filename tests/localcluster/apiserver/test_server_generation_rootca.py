"""Kinds without a spec carry no ``metadata.generation`` (as upstream's registries); every
namespace has its ``kube-root-ca.crt`` ConfigMap with the cluster CA, put back when
deleted or edited (the root-CA publisher). Real server on loopback."""

from __future__ import annotations

import time

from kubernetes import client as k8s


def _wait(predicate, timeout=10.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.03)
    return predicate()


def test_configmaps_secrets_pods_have_no_generation(api, namespace):
    core = k8s.CoreV1Api(api)
    cm = core.create_namespaced_config_map(namespace, {"metadata": {"name": "g"},
                                                       "data": {"a": "1"}})
    assert cm.metadata.generation is None
    cm = core.patch_namespaced_config_map("g", namespace, {"data": {"a": "2"}})
    assert cm.metadata.generation is None and cm.data == {"a": "2"}
    # A client cannot set one either.
    cm = core.create_namespaced_config_map(namespace, {"metadata": {"name": "g2",
                                                                    "generation": 7}})
    assert cm.metadata.generation is None
    secret = core.create_namespaced_secret(namespace, {"metadata": {"name": "s"},
                                                       "stringData": {"a": "b"}})
    assert secret.metadata.generation is None
    pod = core.create_namespaced_pod(namespace, {"metadata": {"name": "p"}, "spec": {
        "containers": [{"name": "c", "image": "busybox"}]}})
    assert pod.metadata.generation is None


def test_deployments_count_generations(api, namespace):
    apps = k8s.AppsV1Api(api)
    spec = {"selector": {"matchLabels": {"app": "x"}}, "template": {
        "metadata": {"labels": {"app": "x"}},
        "spec": {"containers": [{"name": "c", "image": "busybox"}]}}}
    dep = apps.create_namespaced_deployment(namespace, {"metadata": {"name": "d"},
                                                        "spec": {**spec, "replicas": 1}})
    assert dep.metadata.generation == 1
    dep = apps.patch_namespaced_deployment("d", namespace, {"spec": {"replicas": 2}})
    assert dep.metadata.generation == 2
    dep = apps.patch_namespaced_deployment("d", namespace, {"metadata": {"labels": {"a": "b"}}})
    assert dep.metadata.generation == 2


def test_every_namespace_has_the_root_ca(api, namespace, shared_server):
    core = k8s.CoreV1Api(api)
    ca = shared_server.ca_path.read_text()
    for ns in (namespace, "default", "kube-system"):
        cm = core.read_namespaced_config_map("kube-root-ca.crt", ns)
        assert cm.data == {"ca.crt": ca}
        assert cm.metadata.generation is None


def test_root_ca_is_put_back_when_deleted_or_edited(api, namespace, shared_server):
    core = k8s.CoreV1Api(api)
    ca = shared_server.ca_path.read_text()
    first = core.read_namespaced_config_map("kube-root-ca.crt", namespace)
    core.delete_namespaced_config_map("kube-root-ca.crt", namespace)

    def recreated():
        try:
            cm = core.read_namespaced_config_map("kube-root-ca.crt", namespace)
        except k8s.ApiException:
            return False
        return cm.metadata.uid != first.metadata.uid and cm.data == {"ca.crt": ca}

    assert _wait(recreated)
    core.patch_namespaced_config_map("kube-root-ca.crt", namespace,
                                     {"data": {"ca.crt": "forged", "extra": "x"}})
    assert _wait(lambda: core.read_namespaced_config_map(
        "kube-root-ca.crt", namespace).data == {"ca.crt": ca})


def test_namespace_deletion_is_not_blocked_by_the_root_ca(api):
    core = k8s.CoreV1Api(api)
    core.create_namespace({"metadata": {"name": "ca-gone"}})
    assert _wait(lambda: any(c.metadata.name == "kube-root-ca.crt" for c in
                             core.list_namespaced_config_map("ca-gone").items))
    core.delete_namespace("ca-gone")

    def gone():
        try:
            core.read_namespace("ca-gone")
        except k8s.ApiException as err:
            return err.status == 404
        return False

    assert _wait(gone)
    assert core.list_namespaced_config_map("ca-gone").items == []
