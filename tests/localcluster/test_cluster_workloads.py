"""Deployments, DaemonSets and manifests/ applied at start, on a running cluster."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import yaml

import kubeclient
from kubeclient import Client, resources
from localcluster.cluster import Cluster
from localcluster.workloads.apply import ManifestError
from localcluster.workloads.shared import TEMPLATE_HASH
from tests.localcluster.clusterkit import (
    IMAGE,
    needs_root,
    options,
    running,
    try_logs,
    wait_for,
)

pytestmark = [needs_root, pytest.mark.slow]

CRD = {
    "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
    "metadata": {"name": "widgets.example.com"},
    "spec": {"group": "example.com", "scope": "Namespaced",
             "names": {"plural": "widgets", "singular": "widget", "kind": "Widget"},
             "versions": [{"name": "v1", "served": True, "storage": True, "schema": {
                 "openAPIV3Schema": {"type": "object", "properties": {
                     "spec": {"type": "object", "properties": {"size": {"type": "integer"}}}}}}}]},
}
RBAC = [
    {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "widget-system"}},
    {"apiVersion": "v1", "kind": "ServiceAccount",
     "metadata": {"name": "widget-operator", "namespace": "widget-system"}},
    {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
     "metadata": {"name": "widget-operator"},
     "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}]},
    {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
     "metadata": {"name": "widget-operator"},
     "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                 "name": "widget-operator"},
     "subjects": [{"kind": "ServiceAccount", "name": "widget-operator",
                   "namespace": "widget-system"}]},
]


def deployment(name: str, ns: str, *args: str, replicas: int = 1,
               sa: str | None = None) -> dict:
    spec: dict = {"containers": [{"name": "main", "image": IMAGE, "args": list(args), "env": [
        {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}]}]}
    if sa:
        spec["serviceAccountName"] = sa
    return {"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": name, "namespace": ns},
            "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}},
                     "template": {"metadata": {"labels": {"app": name}}, "spec": spec}}}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    root = tmp_path_factory.mktemp("workloads")
    manifests = root / "manifests"
    for sub in ("crds", "rbac", "deploy"):
        (manifests / sub).mkdir(parents=True)
    (manifests / "crds" / "widgets.yaml").write_text(yaml.safe_dump(CRD))
    (manifests / "rbac" / "rbac.yaml").write_text(yaml.safe_dump_all(RBAC))
    (manifests / "deploy" / "operator.yaml").write_text(yaml.safe_dump_all([
        deployment("widget-operator", "widget-system", "whoami", "sleep", "600",
                   sa="widget-operator"),
        {"apiVersion": "example.com/v1", "kind": "Widget",
         "metadata": {"name": "w1", "namespace": "widget-system"}, "spec": {"size": 3}},
    ]))
    with running(str(root / "state"), manifests=str(manifests)) as c:
        yield c


@pytest.fixture
def kube(cluster: Cluster) -> Client:
    assert cluster.kube is not None
    return cluster.kube


def owned_pods(kube: Client, ns: str, app: str) -> list[dict]:
    return [p for p in kube.list(resources.PODS, ns)
            if (p["metadata"].get("labels") or {}).get("app") == app
            and not p["metadata"].get("deletionTimestamp")]


def test_manifests_applied_and_operator_runs_with_its_service_account(kube: Client) -> None:
    widgets = kubeclient.Resource("example.com", "v1", "widgets")
    assert kube.get(widgets, "w1", "widget-system")["spec"]["size"] == 3
    pods = wait_for(lambda: owned_pods(kube, "widget-system", "widget-operator"),
                    what="operator pod")
    name = pods[0]["metadata"]["name"]
    # RBAC from manifests/rbac lets the operator's token read pods: 200, not 403.
    out = wait_for(lambda: try_logs(kube, name, "widget-system"), what="operator output")
    assert out.strip() == f"whoami: 200 {name}"


def test_deployment_replicas_status_and_rollout(kube: Client) -> None:
    kube.create(resources.DEPLOYMENTS, deployment("web", "default", "sleep", "600", replicas=2),
                "default")

    def available() -> dict | None:
        st = kube.get(resources.DEPLOYMENTS, "web", "default").get("status") or {}
        return st if st.get("readyReplicas") == 2 and st.get("replicas") == 2 else None

    st = wait_for(available, what="2 ready replicas")
    assert st["availableReplicas"] == 2
    assert {c["type"]: c["status"] for c in st["conditions"]}["Available"] == "True"
    before = {p["metadata"]["name"] for p in owned_pods(kube, "default", "web")}
    old_hash = {p["metadata"]["labels"][TEMPLATE_HASH] for p in owned_pods(kube, "default",
                                                                               "web")}
    # A template change replaces every pod.
    kube.patch(resources.DEPLOYMENTS, "web", {"spec": {"template": {"metadata": {
        "annotations": {"rev": "2"}}}}}, "default")

    def rolled() -> bool:
        pods = owned_pods(kube, "default", "web")
        names = {p["metadata"]["name"] for p in pods}
        return len(pods) == 2 and not names & before and all(
            p["metadata"]["labels"][TEMPLATE_HASH] not in old_hash for p in pods)

    wait_for(rolled, timeout=60, what="rollout")
    wait_for(available, what="2 ready replicas after rollout")


def test_deployment_replaces_a_failed_pod(kube: Client) -> None:
    kube.create(resources.DEPLOYMENTS, deployment("oneshot", "default", "sleep", "0.5", "exit",
                                               "1"), "default")
    first = wait_for(lambda: owned_pods(kube, "default", "oneshot"), what="first pod")
    first_name = first[0]["metadata"]["name"]
    # restartPolicy Always keeps restarting the container in place (CrashLoopBackOff);
    # make the pod itself fail to see the controller replace it.
    kube.patch(resources.DEPLOYMENTS, "oneshot", {"spec": {"template": {"spec": {
        "restartPolicy": "Never"}}}}, "default")

    def replaced() -> bool:
        names = [p["metadata"]["name"] for p in owned_pods(kube, "default", "oneshot")]
        return bool(names) and first_name not in names

    wait_for(replaced, timeout=60, what="replacement pod")
    seen = {p["metadata"]["name"] for p in owned_pods(kube, "default", "oneshot")}
    wait_for(lambda: {p["metadata"]["name"] for p in owned_pods(kube, "default", "oneshot")}
             - seen, timeout=60, what="failed pod replaced again")


def test_daemonset_runs_one_pod_on_the_node(kube: Client) -> None:
    ds = deployment("agent", "default", "sleep", "600")
    ds["kind"] = "DaemonSet"
    ds["spec"].pop("replicas")
    kube.create(resources.DAEMONSETS, ds, "default")

    def ready() -> dict | None:
        st = kube.get(resources.DAEMONSETS, "agent", "default").get("status") or {}
        return st if st.get("numberReady") == 1 else None

    st = wait_for(ready, what="daemonset ready")
    assert st["desiredNumberScheduled"] == 1 and st["currentNumberScheduled"] == 1
    pods = owned_pods(kube, "default", "agent")
    assert len(pods) == 1 and pods[0]["spec"]["nodeName"] == "localcluster"


def test_bad_manifest_fails_start_with_file_and_object(tmp_path) -> None:
    (tmp_path / "m" / "deploy").mkdir(parents=True)
    (tmp_path / "m" / "deploy" / "bad.yaml").write_text(
        "apiVersion: example.com/v9\nkind: Gadget\nmetadata:\n  name: g\n")
    cluster = Cluster(str(tmp_path / "state"), options(manifests=str(tmp_path / "m")))
    with pytest.raises(ManifestError, match=r"bad.yaml: Gadget/g: the server does not serve"):
        cluster.start()
    assert cluster.api is None and cluster.volumes is None  # everything undone
    # ...and the lock is free again.
    again = Cluster(str(tmp_path / "state"), options(manifests=str(tmp_path / "none")))
    again.start()
    again.stop()


def test_a_replica_set_refused_by_pod_security_says_so(kube: Client) -> None:
    """In a namespace enforcing "restricted" a Deployment is admitted (with a warning) but
    its pods are not: the ReplicaSet records upstream's FailedCreate event with the
    PodSecurity refusal, and no pod runs."""
    kube.create(resources.NAMESPACES, {"metadata": {"name": "locked", "labels": {
        "pod-security.kubernetes.io/enforce": "restricted"}}})
    kube.create(resources.DEPLOYMENTS, deployment("web", "locked", "sleep", "600"), "locked")

    def failed_create() -> list[dict]:
        return [e for e in kube.list(resources.EVENTS, "locked")
                if e["reason"] == "FailedCreate"
                and e["involvedObject"]["kind"] == "ReplicaSet"]

    (event, *_) = wait_for(failed_create, timeout=60, what="FailedCreate")
    assert event["type"] == "Warning"
    assert event["message"].startswith('Error creating: pods "web-')
    assert 'is forbidden: violates PodSecurity "restricted:latest": ' \
        "allowPrivilegeEscalation != false" in event["message"]
    assert event["source"]["component"] == "replicaset-controller"
    assert owned_pods(kube, "locked", "web") == []
