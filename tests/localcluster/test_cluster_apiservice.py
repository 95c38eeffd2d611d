"""Identity and aggregation with pods on the node: an APIService backed by a pod (the
aggregated API server ``aggpod.py``, reached through its Service's endpoints) serves a
subresource through the API server to kubectl, authorizing the caller itself with a
SubjectAccessReview, as KubeVirt's virt-api does; and the kubelet replaces a running
pod's service-account token (``tokenwatch.py``)."""

from __future__ import annotations

import base64
import json
import os
import subprocess
from collections.abc import Iterator

import pytest

import kubeclient
from kubeclient import Client, resources
from localcluster.apiserver.tls import ensure_tls
from localcluster.cluster import Cluster
from tests.localcluster.clusterkit import needs_root, running, try_logs, wait_for

pytestmark = [needs_root, pytest.mark.slow]

AGGPOD = os.path.join(os.path.dirname(__file__), "aggpod.py")
TOKENWATCH = os.path.join(os.path.dirname(__file__), "tokenwatch.py")
KUBECTL = "/usr/bin/kubectl"
NS, GROUP = "agg", "subresources.example.com"
SECRETS = kubeclient.Resource("", "v1", "secrets")
SAS = kubeclient.Resource("", "v1", "serviceaccounts")
NSS = kubeclient.Resource("", "v1", "namespaces")
ROLEBINDINGS = kubeclient.Resource("rbac.authorization.k8s.io", "v1", "rolebindings")
CRBS = kubeclient.Resource("rbac.authorization.k8s.io", "v1", "clusterrolebindings")
APISERVICES = kubeclient.Resource("apiregistration.k8s.io", "v1", "apiservices")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with running(str(tmp_path_factory.mktemp("agg")),
                 extra_images={"rootdisk/aggpod": ["python", AGGPOD],
                               "rootdisk/tokenwatch": ["python", TOKENWATCH]}) as c:
        yield c


def _binding(name: str, kind: str, role: str, namespace: str | None) -> dict:
    meta = {"name": name, **({"namespace": namespace} if namespace else {})}
    return {"metadata": meta, "roleRef": {"apiGroup": "rbac.authorization.k8s.io",
                                          "kind": kind, "name": role},
            "subjects": [{"kind": "ServiceAccount", "name": "aggpod", "namespace": NS}]}


def _kubectl(cluster: Cluster, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run([KUBECTL, "--kubeconfig", cluster.kubeconfig, *args],
                          capture_output=True, text=True, timeout=60, check=check)


def test_an_apiservice_backed_by_a_pod(cluster: Cluster, tmp_path) -> None:
    kube: Client = cluster.kube
    tls = ensure_tls(tmp_path / "pki", dns_names=(f"aggpod.{NS}.svc",))
    kube.create(NSS, {"metadata": {"name": NS}})
    kube.create(SAS, {"metadata": {"name": "aggpod"}}, NS)
    kube.create(ROLEBINDINGS, _binding("aggpod-auth-reader", "Role",
                                       "extension-apiserver-authentication-reader", None),
                "kube-system")
    kube.create(CRBS, _binding("aggpod-delegator", "ClusterRole", "system:auth-delegator",
                               None))
    kube.create(SECRETS, {"metadata": {"name": "aggpod-tls"}, "type": "kubernetes.io/tls",
                          "data": {"tls.crt": base64.b64encode(
                              tls.server_cert.read_bytes()).decode(),
                                   "tls.key": base64.b64encode(
                              tls.server_key.read_bytes()).decode()}}, NS)
    kube.create(resources.PODS, {"metadata": {"name": "aggpod", "labels": {"app": "aggpod"}},
                              "spec": {"serviceAccountName": "aggpod", "containers": [{
                                  "name": "main", "image": "rootdisk/aggpod",
                                  "ports": [{"name": "https", "containerPort": 17443}],
                                  "env": [{"name": "POD_IP", "valueFrom": {"fieldRef": {
                                      "fieldPath": "status.podIP"}}}],
                                  "volumeMounts": [{"name": "tls", "mountPath": "/tls"}]}],
                                  "volumes": [{"name": "tls", "secret": {
                                      "secretName": "aggpod-tls"}}]}}, NS)
    kube.create(resources.SERVICES, {"metadata": {"name": "aggpod"}, "spec": {
        "selector": {"app": "aggpod"}, "ports": [{"port": 443, "targetPort": "https"}]}}, NS)
    kube.create(APISERVICES, {"metadata": {"name": f"v1.{GROUP}"}, "spec": {
        "group": GROUP, "version": "v1", "groupPriorityMinimum": 1000, "versionPriority": 15,
        "caBundle": base64.b64encode(tls.ca_pem()).decode(),
        "service": {"namespace": NS, "name": "aggpod", "port": 443}}})

    def available() -> bool:
        conds = (kube.get(APISERVICES, f"v1.{GROUP}").get("status") or {}).get(
            "conditions") or []
        return any(c["type"] == "Available" and c["status"] == "True" for c in conds)

    try:
        wait_for(available, timeout=90, what="APIService available")
    except AssertionError as err:
        status = kube.get(APISERVICES, f"v1.{GROUP}").get("status")
        pod = kube.get(resources.PODS, "aggpod", NS).get("status")
        raise AssertionError(f"{err}: {status}; pod {pod}; log "
                             f"{try_logs(kube, 'aggpod', NS)!r}") from None
    out = _kubectl(cluster, "get", "--raw",
                   f"/apis/{GROUP}/v1/namespaces/{NS}/things/vm1/echo").stdout
    assert json.loads(out) == {"user": "admin", "name": "vm1"}
    # A service account without rights on things/echo is refused (403) by the server.
    denied = _kubectl(cluster, "get", "--raw",
                      f"/apis/{GROUP}/v1/namespaces/{NS}/things/vm1/echo",
                      f"--as=system:serviceaccount:{NS}:aggpod", check=False)
    assert denied.returncode != 0 and "forbidden" in denied.stderr.lower()
    kube.delete(resources.PODS, "aggpod", NS, grace_period=1)



def test_the_kubelet_rotates_a_running_pods_token(cluster: Cluster) -> None:
    """The rotation time of the pod's tokens is moved to now (instead of waiting 48
    minutes for 80% of the hour): the running container then reads a new token, which
    the API server accepts."""
    kube: Client = cluster.kube
    assert cluster.node is not None
    kube.create(resources.PODS, {"metadata": {"name": "tokenwatch"}, "spec": {
        "restartPolicy": "Never", "containers": [{
            "name": "main", "image": "rootdisk/tokenwatch", "args": ["120"]}]}}, "default")
    wait_for(lambda: "first" in try_logs(kube, "tokenwatch", "default"), timeout=60,
             what="the pod's first token")
    worker = cluster.node.worker("default", "tokenwatch")
    assert worker is not None and worker._tokens
    for token in worker._tokens:
        token.refresh_at = 0.0
    out = wait_for(lambda: (lambda t: t if "rotated" in t or "unchanged" in t else None)(
        try_logs(kube, "tokenwatch", "default")), timeout=150, what="the rotated token")
    lines = {word: rest for word, _, rest in (line.partition(" ") for line in out.splitlines())}
    assert "rotated" in lines, out
    jti, status = lines["rotated"].split()
    assert jti != lines["first"] and status == "200"
