"""The populator survives its own restarts: no duplicate objects, no lost import."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from kubeclient import Client, resources
from localcluster.cluster import Cluster
from populators import claims
from tests.fixtures.httpserver import Faults, HttpServer
from tests.fixtures.images import ImageFactory, compare
from tests.localcluster.clusterkit import (
    claim_volume,
    needs_root,
    pod,
    running,
    wait_for,
    wait_phase,
)
from tests.populators import kit

pytestmark = [needs_root, pytest.mark.slow, pytest.mark.e2e]

PHASE = "cdi.kubevirt.io/storage.pod.phase"


@pytest.fixture
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with running(str(tmp_path_factory.mktemp("restart"))) as c:
        assert c.kube is not None
        kit.install_crds(c.kube)
        yield c


def test_operator_restarts_mid_import_and_while_it_completes(
        cluster: Cluster, http_server: HttpServer, images: ImageFactory) -> None:
    kube: Client = cluster.kube  # type: ignore[assignment]
    ns = kit.namespace(kube)
    http_server.publish(images.get("raw").path, "slow.raw")
    http_server.set_faults("slow.raw", Faults(rate=768 * 1024))  # 16 MiB: ~21 s
    kit.import_source(kube, ns, "src", {"http": {"url": http_server.url_for("slow.raw")}})
    target = kit.target_claim(kube, ns, "disk", source="src")
    uid = target["metadata"]["uid"]
    pod_name = f"importer-prime-{uid}"

    with kit.operator(cluster.kubeconfig):
        wait_for(lambda: kit.annotations(kube, ns, "disk").get(PHASE) == "Running",
                 timeout=60, what="importer running")
    first = kube.get(resources.PODS, pod_name, ns)
    prime = kube.get(resources.PVCS, f"prime-{uid}", ns)

    # A second operator run while the import goes on: same PVC', same pod.
    with kit.operator(cluster.kubeconfig):
        kit.wait_for_why(lambda: kit.annotations(kube, ns, "disk").get(
            "cdi.kubevirt.io/storage.populator.progress") not in (None, "100.0%"),
            timeout=60, what="progress after the restart", why=lambda: kit.diagnosis(kube, ns))
        assert kube.get(resources.PODS, pod_name, ns)["metadata"]["uid"] == \
            first["metadata"]["uid"]
        assert kube.get(resources.PVCS, f"prime-{uid}", ns)["metadata"]["uid"] == \
            prime["metadata"]["uid"]

    # The import completes while no operator runs; the next one finishes the job.
    wait_phase(kube, resources.PODS, pod_name, "Succeeded", ns=ns, timeout=120)
    assert kube.get(resources.PVCS, "disk", ns)["status"]["phase"] == "Pending"
    with kit.operator(cluster.kubeconfig):
        claim = wait_phase(kube, resources.PVCS, "disk", "Bound", ns=ns, timeout=60)
        wait_for(lambda: kube.get_or_none(resources.PVCS, f"prime-{uid}", ns) is None,
                 timeout=60, what="PVC' deletion")
        wait_for(lambda: kube.get_or_none(resources.PODS, pod_name, ns) is None,
                 timeout=60, what="pod deletion")
    assert claim["metadata"]["annotations"][PHASE] == "Succeeded"
    assert claim["spec"]["volumeName"] == prime["spec"]["volumeName"]
    pv = kube.get(resources.PVS, claim["spec"]["volumeName"])
    assert compare(images.get("raw").path, pv["spec"]["local"]["path"] + "/disk.img")
    # One import run, one PVC' event: nothing was done twice.
    whole = [r for r in http_server.requests_for("slow.raw", "GET") if r.range is None]
    assert len(whole) == 1, http_server.requests_for("slow.raw")
    created = [e for e in kit.events_for(kube, ns, uid)
               if e["reason"] == "CreatedPVCPrimeSuccessfully"]
    assert len(created) == 1


def test_importer_waits_while_another_pod_uses_pvc_prime(
        cluster: Cluster, http_server: HttpServer, images: ImageFactory) -> None:
    """A PVC' made by an earlier operator run and since used by someone else's pod: the
    importer does not start beside that pod (ImportTargetInUse) but once it is gone."""
    kube: Client = cluster.kube  # type: ignore[assignment]
    ns = kit.namespace(kube)
    url = http_server.publish(images.get("raw").path, "disk.raw")
    kit.import_source(kube, ns, "src", {"http": {"url": url}})
    target = kit.target_claim(kube, ns, "disk", source="src")
    uid = target["metadata"]["uid"]
    prime = claims.render_prime(target=target, populator_kind="VolumeImportSource",
                                source_annotations={})
    kube.create(resources.PVCS, prime, ns)
    squatter = pod("squatter", "sleep", "3600", volumes=[claim_volume("d", f"prime-{uid}")],
                   mounts=[{"name": "d", "mountPath": "/data"}], grace=0)
    kube.create(resources.PODS, squatter, ns)
    wait_phase(kube, resources.PODS, "squatter", "Running", ns=ns, timeout=60)
    with kit.operator(cluster.kubeconfig):
        wait_for(lambda: [e for e in kit.events_for(kube, ns, uid)
                          if e["reason"] == "ImportTargetInUse"], timeout=60,
                 what="ImportTargetInUse")
        assert kube.get_or_none(resources.PODS, f"importer-prime-{uid}", ns) is None
        kube.delete(resources.PODS, "squatter", ns)
        claim = kit.wait_bound(kube, ns, "disk")
    pv = kube.get(resources.PVS, claim["spec"]["volumeName"])
    assert compare(images.get("raw").path, pv["spec"]["local"]["path"] + "/disk.img")
