"""One `rootdisk up` cluster per module with the project's manifests applied, so the CDI
operator runs as a pod from manifests/deploy with manifests/rbac's permissions."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from kubeclient import Client, KubeError
from localcluster.cluster import Cluster
from rootdisk.cmd_cluster import POD_PIDS_LIMIT
from tests.e2e import kit, vmkit
from tests.localcluster.clusterkit import running


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with running(str(tmp_path_factory.mktemp("e2e")), manifests=kit.MANIFESTS,
                 pod_pids_limit=POD_PIDS_LIMIT) as c:
        kube = kit.cluster_kube(c)
        kit.wait_operator_ready(kube)
        yield c


@pytest.fixture(scope="module")
def kube(cluster: Cluster) -> Client:
    return kit.cluster_kube(cluster)


@pytest.fixture
def ns(kube: Client) -> Iterator[str]:
    """A namespace of the test's own. Its VirtualMachines and VMIs are deleted when the
    test ends: a guest left running under TCG (the cluster lives for the whole module)
    took a third of a core from the next tests' guests."""
    name = kit.namespace(kube)
    yield name
    for res in (vmkit.VMS, vmkit.VMIS):
        try:
            for obj in kube.list(res, name):
                kube.delete(res, obj["metadata"]["name"], name)
        except KubeError:
            pass  # no KubeVirt API in this module's cluster, or already going
