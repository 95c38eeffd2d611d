"""Deployments through ReplicaSets on a running cluster, driven as users drive them:
``kubectl rollout restart|status|history|undo`` and ``kubectl scale``; the scale
subresource of Deployments, ReplicaSets and custom resources."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from typing import Any

import pytest

import kubeclient
from kubeclient import Client, KubeError, resources
from localcluster.cluster import Cluster
from localcluster.workloads.deployments import REVISION
from localcluster.workloads.shared import TEMPLATE_HASH
from tests.localcluster.clusterkit import IMAGE, needs_root, running, wait_for

KUBECTL = shutil.which("kubectl")
pytestmark = [needs_root, pytest.mark.slow,
              pytest.mark.skipif(KUBECTL is None and not os.environ.get("CI"),
                                 reason="kubectl is not installed here")]
NS = "default"
GIZMOS = kubeclient.Resource("example.com", "v1", "gizmos")
GIZMO_CRD = {
    "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
    "metadata": {"name": "gizmos.example.com"},
    "spec": {"group": "example.com", "scope": "Namespaced",
             "names": {"plural": "gizmos", "singular": "gizmo", "kind": "Gizmo"},
             "versions": [{"name": "v1", "served": True, "storage": True,
                           "subresources": {"status": {}, "scale": {
                               "specReplicasPath": ".spec.count",
                               "statusReplicasPath": ".status.running",
                               "labelSelectorPath": ".status.selector"}},
                           "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                               "spec": {"type": "object", "properties": {
                                   "count": {"type": "integer"}}},
                               "status": {"type": "object", "properties": {
                                   "running": {"type": "integer"},
                                   "selector": {"type": "string"}}}}}}}]},
}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with running(str(tmp_path_factory.mktemp("rollout") / "state")) as c:
        yield c


@pytest.fixture
def kube(cluster: Cluster) -> Client:
    assert cluster.kube is not None
    return cluster.kube


@pytest.fixture
def kubectl(cluster: Cluster) -> Any:
    assert KUBECTL is not None, "kubectl is a test dependency (make setup installs it)"
    env = {**os.environ, "KUBECONFIG": cluster.kubeconfig}

    def run(*args: str, check: bool = True, timeout: float = 90) -> subprocess.CompletedProcess:
        proc = subprocess.run([KUBECTL, *args], env=env, capture_output=True, text=True,
                              timeout=timeout, check=False)
        if check and proc.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)}: {proc.stderr}")
        return proc

    return run


def deployment(name: str, replicas: int, **spec: Any) -> dict:
    return {"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": name, "namespace": NS},
            "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}},
                     "template": {"metadata": {"labels": {"app": name}}, "spec": {
                         "containers": [{"name": "main", "image": IMAGE,
                                         "args": ["sleep", "600"]}]}}, **spec}}


def replica_sets(kube: Client, app: str) -> list[dict]:
    return [rs for rs in kube.list(resources.REPLICASETS, NS)
            if (rs["metadata"].get("labels") or {}).get("app") == app]


def live_pods(kube: Client, app: str) -> list[dict]:
    return [p for p in kube.list(resources.PODS, NS)
            if (p["metadata"].get("labels") or {}).get("app") == app
            and not p["metadata"].get("deletionTimestamp")]


def test_pods_belong_to_a_replica_set_the_deployment_owns(kube: Client, kubectl: Any) -> None:
    kube.create(resources.DEPLOYMENTS, deployment("owned", 2), NS)
    kubectl("rollout", "status", "deployment/owned", "--timeout=60s")
    d = kube.get(resources.DEPLOYMENTS, "owned", NS)
    (rs,) = replica_sets(kube, "owned")
    assert rs["metadata"]["ownerReferences"][0]["uid"] == d["metadata"]["uid"]
    assert rs["metadata"]["annotations"][REVISION] == "1"
    assert d["metadata"]["annotations"][REVISION] == "1"
    h = rs["metadata"]["labels"][TEMPLATE_HASH]
    assert rs["metadata"]["name"] == f"owned-{h}"
    pods = live_pods(kube, "owned")
    assert len(pods) == 2
    for pod in pods:
        (ref,) = pod["metadata"]["ownerReferences"]
        assert (ref["kind"], ref["uid"]) == ("ReplicaSet", rs["metadata"]["uid"])
        assert pod["metadata"]["labels"][TEMPLATE_HASH] == h
    # A pod the Deployment owns directly (rootdisk's layout before ReplicaSets, in a data
    # directory kept across an upgrade) is replaced by the ReplicaSet's, not kept beside it.
    legacy = kube.create(resources.PODS, {
        "metadata": {"name": "owned-legacy", "labels": {"app": "owned"}, "ownerReferences": [
            {"apiVersion": "apps/v1", "kind": "Deployment", "name": "owned",
             "uid": d["metadata"]["uid"], "controller": True}]},
        "spec": d["spec"]["template"]["spec"]}, NS)
    wait_for(lambda: (kube.get_or_none(resources.PODS, "owned-legacy", NS) or {}).get(
        "metadata", {}).get("deletionTimestamp") or kube.get_or_none(
        resources.PODS, "owned-legacy", NS) is None, timeout=60, what="legacy pod deleted")
    assert legacy["metadata"]["uid"]
    assert len(live_pods(kube, "owned")) == 2
    # Deleting the Deployment takes its ReplicaSet and pods with it (garbage collection).
    kube.delete(resources.DEPLOYMENTS, "owned", NS)
    wait_for(lambda: not replica_sets(kube, "owned") and not live_pods(kube, "owned"),
             timeout=60, what="replica set and pods collected")


def test_rollout_restart_status_history_and_undo(kube: Client, kubectl: Any) -> None:
    kube.create(resources.DEPLOYMENTS, deployment("web", 2), NS)
    assert "successfully rolled out" in kubectl(
        "rollout", "status", "deployment/web", "--timeout=60s").stdout
    first = {p["metadata"]["name"] for p in live_pods(kube, "web")}

    assert "restarted" in kubectl("rollout", "restart", "deployment/web").stdout
    assert "successfully rolled out" in kubectl(
        "rollout", "status", "deployment/web", "--timeout=90s").stdout
    wait_for(lambda: len(live_pods(kube, "web")) == 2, timeout=60, what="old pods gone")
    second = {p["metadata"]["name"] for p in live_pods(kube, "web")}
    assert not first & second, "a restart replaces every pod"
    revisions = sorted(rs["metadata"]["annotations"][REVISION]
                       for rs in replica_sets(kube, "web"))
    assert revisions == ["1", "2"]
    history = kubectl("rollout", "history", "deployment/web").stdout
    assert [line.split()[0] for line in history.splitlines()[2:] if line.strip()] == ["1", "2"]

    kubectl("rollout", "undo", "deployment/web")
    kubectl("rollout", "status", "deployment/web", "--timeout=90s")
    d = kube.get(resources.DEPLOYMENTS, "web", NS)
    annotations = d["spec"]["template"]["metadata"].get("annotations") or {}
    assert "kubectl.kubernetes.io/restartedAt" not in annotations, "undo restores revision 1"
    # Revision 1's ReplicaSet came back as revision 3: no new ReplicaSet was made.
    back = {rs["metadata"]["annotations"][REVISION]: rs for rs in replica_sets(kube, "web")}
    assert sorted(back) == ["2", "3"]
    assert back["3"]["spec"]["replicas"] == 2 and back["2"]["spec"]["replicas"] == 0


def test_kubectl_scale_and_the_scale_subresource(kube: Client, kubectl: Any) -> None:
    kube.create(resources.DEPLOYMENTS, deployment("scaled", 1), NS)
    kubectl("rollout", "status", "deployment/scaled", "--timeout=60s")
    assert "scaled" in kubectl("scale", "deployment/scaled", "--replicas=3").stdout
    wait_for(lambda: len(live_pods(kube, "scaled")) == 3, timeout=60, what="3 pods")
    scale = kube.request("GET", resources.DEPLOYMENTS.path(NS, "scaled", "scale"))
    assert scale["kind"] == "Scale" and scale["apiVersion"] == "autoscaling/v1"
    assert scale["spec"]["replicas"] == 3 and scale["status"]["selector"] == "app=scaled"
    # The ReplicaSet has one too; the Deployment puts it back (it owns the count).
    (rs,) = replica_sets(kube, "scaled")
    rs_scale = kube.request("GET", resources.REPLICASETS.path(NS, rs["metadata"]["name"],
                                                           "scale"))
    assert rs_scale["spec"]["replicas"] == 3
    # Bad input names the field and changes nothing.
    with pytest.raises(KubeError) as err:
        kube.patch(resources.DEPLOYMENTS, "scaled", {"spec": {"replicas": -1}}, NS,
                   subresource="scale")
    assert err.value.status == 422 and "spec.replicas" in str(err.value)
    stale = {**scale, "spec": {"replicas": 1},
             "metadata": {**scale["metadata"], "resourceVersion": "1"}}
    with pytest.raises(KubeError) as err:
        kube.request("PUT", resources.DEPLOYMENTS.path(NS, "scaled", "scale"), body=stale)
    assert err.value.status == 409
    assert kube.get(resources.DEPLOYMENTS, "scaled", NS)["spec"]["replicas"] == 3
    kubectl("scale", "deployment/scaled", "--replicas=1")
    wait_for(lambda: len(live_pods(kube, "scaled")) == 1, timeout=60, what="1 pod")


def test_custom_resource_scale(kube: Client, kubectl: Any) -> None:
    kube.create(kubeclient.Resource("apiextensions.k8s.io", "v1", "customresourcedefinitions",
                                namespaced=False), GIZMO_CRD)
    created = wait_for(lambda: _try_create_gizmo(kube), what="gizmo created")
    kube.patch(GIZMOS, "g", {"status": {"running": 2, "selector": "app=g"}}, NS,
               subresource="status")
    kubectl("scale", "gizmo/g", "--replicas=5")
    g = kube.get(GIZMOS, "g", NS)
    assert g["spec"]["count"] == 5
    assert g["metadata"]["generation"] > created["metadata"]["generation"]
    scale = kube.request("GET", GIZMOS.path(NS, "g", "scale"))
    assert scale["spec"]["replicas"] == 5 and scale["status"] == {"replicas": 2,
                                                                  "selector": "app=g"}


def _try_create_gizmo(kube: Client) -> dict | None:
    try:
        return kube.create(GIZMOS, {"apiVersion": "example.com/v1", "kind": "Gizmo",
                                    "metadata": {"name": "g"}, "spec": {"count": 1}}, NS)
    except KubeError as err:
        if err.status == 404:
            return None
        raise


def test_crd_scale_paths_outside_spec_and_status_are_refused(kube: Client) -> None:
    bad = {**GIZMO_CRD, "metadata": {"name": "badgizmos.example.com"}}
    bad["spec"] = {**GIZMO_CRD["spec"], "names": {"plural": "badgizmos", "kind": "BadGizmo"}}
    version = dict(bad["spec"]["versions"][0])
    version["subresources"] = {"scale": {"specReplicasPath": ".metadata.replicas",
                                         "statusReplicasPath": ".status.running"}}
    bad["spec"]["versions"] = [version]
    with pytest.raises(KubeError) as err:
        kube.create(kubeclient.Resource("apiextensions.k8s.io", "v1", "customresourcedefinitions",
                                    namespaced=False), bad)
    assert err.value.status == 422
    assert "spec.versions[0].subresources.scale.specReplicasPath" in str(err.value)
