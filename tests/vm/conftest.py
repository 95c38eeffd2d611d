"""Fixtures of the VM side's API tests: a real localcluster API server with the CRDs."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from kubeclient import Client, KubeError, Resource
from kubeclient.resources import CRDS
from localcluster.apiserver.threaded import ServerThread

ROOT = Path(__file__).resolve().parents[2]
RBAC_KINDS = {
    "ServiceAccount": Resource("", "v1", "serviceaccounts"),
    "ClusterRole": Resource("rbac.authorization.k8s.io", "v1", "clusterroles", namespaced=False),
    "ClusterRoleBinding": Resource("rbac.authorization.k8s.io", "v1", "clusterrolebindings",
                                   namespaced=False),
    "Role": Resource("rbac.authorization.k8s.io", "v1", "roles"),
    "RoleBinding": Resource("rbac.authorization.k8s.io", "v1", "rolebindings"),
}
"""The API resource of each kind the manifests' RBAC files hold (but their Namespace)."""
CRD_FILES = ("virtualmachines.yaml", "virtualmachineinstances.yaml", "kubevirts.yaml",
             "datavolumes.yaml", "datasources.yaml")


def kube_for(server: object, token: str | None = None) -> Client:
    """A client of a test API server, as its admin unless ``token`` is given."""
    from kubernetes import client as k8s
    config = k8s.Configuration()
    config.host = server.url  # type: ignore[attr-defined]
    config.ssl_ca_cert = str(server.ca_path)  # type: ignore[attr-defined]
    token = token or server.admin_token  # type: ignore[attr-defined]
    config.api_key = {"authorization": f"Bearer {token}"}
    return Client(config)


def wait_served(kube: Client, path: str) -> None:
    import time
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        try:
            kube.request("GET", path)
            return
        except KubeError:
            time.sleep(0.1)
    raise AssertionError(f"{path} never served")


@pytest.fixture(scope="module")
def api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Client]:
    thread = ServerThread(tmp_path_factory.mktemp("apiserver"), bookmark_interval=0.5)
    server = thread.start()
    kube = kube_for(server)
    try:
        for name in CRD_FILES:
            crd = yaml.safe_load((ROOT / "manifests" / "crds" / name).read_text())
            kube.create(CRDS, crd)
        wait_served(kube, "/apis/kubevirt.io/v1/virtualmachines")
        wait_served(kube, "/apis/cdi.kubevirt.io/v1beta1/datavolumes")
        wait_served(kube, "/apis/cdi.kubevirt.io/v1beta1/datasources")
        yield kube
    finally:
        kube.api.close()
        thread.stop()
