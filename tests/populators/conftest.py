"""A localcluster with the populator CRDs and the populators' handlers running in this
process (kopf), shared by the module's tests; each test works in its own namespace."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from kubeclient import Client
from localcluster.cluster import Cluster
from tests.localcluster.clusterkit import running
from tests.populators import kit

#: The importer's own in-pod retries, kept short so that pod restarts come quickly.
IMPORTER_TUNING = {"IMPORTER_RETRY_ATTEMPTS": "2", "IMPORTER_RETRY_DELAY": "0.2"}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with running(str(tmp_path_factory.mktemp("populators"))) as c:
        assert c.kube is not None
        kit.install_crds(c.kube)
        yield c


@pytest.fixture(scope="module")
def kube(cluster: Cluster) -> Client:
    assert cluster.kube is not None
    return cluster.kube


@pytest.fixture(scope="module")
def operator(cluster: Cluster) -> Iterator[None]:
    with kit.operator(cluster.kubeconfig, **IMPORTER_TUNING):
        yield


@pytest.fixture
def ns(kube: Client) -> str:
    return kit.namespace(kube)
