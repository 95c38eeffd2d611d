"""The import populator on localcluster: real importer pods, real volumes, real HTTP."""

from __future__ import annotations

import os

import pytest

from localcluster.controllers import client
from localcluster.controllers.client import Kube
from tests.fixtures.httpserver import HttpServer
from tests.fixtures.images import ImageFactory, compare
from tests.localcluster.clusterkit import needs_root, wait_for, wait_phase
from tests.populators import kit

pytestmark = [needs_root, pytest.mark.slow, pytest.mark.e2e]

PHASE = "cdi.kubevirt.io/storage.pod.phase"


def _volume_file(kube: Kube, claim: dict) -> str:
    pv = kube.get(client.PVS, claim["spec"]["volumeName"])
    path = pv["spec"]["local"]["path"]
    return os.path.join(path, "disk.img") if pv["spec"]["volumeMode"] == "Filesystem" \
        else os.path.realpath(path)


@pytest.mark.usefixtures("operator")
def test_http_qcow2_filesystem_immediate(kube: Kube, ns: str, http_server: HttpServer,
                                         images: ImageFactory) -> None:
    url = http_server.publish(images.get("qcow2").path, "disk.qcow2")
    kit.import_source(kube, ns, "src", {"http": {"url": url}})
    target = kit.target_claim(kube, ns, "disk", source="src")
    uid = target["metadata"]["uid"]
    claim = wait_phase(kube, client.PVCS, "disk", "Bound", ns=ns, timeout=120)
    ann = claim["metadata"]["annotations"]
    assert ann[PHASE] == "Succeeded", ann
    assert ann["cdi.kubevirt.io/storage.populator.progress"] == "100.0%"
    assert ann["cdi.kubevirt.io/storage.populator.pvcPrime"] == f"prime-{uid}"
    assert compare(images.get("raw").path, _volume_file(kube, claim))
    # Nothing outlives the import: PVC' and the importer pod are removed.
    wait_for(lambda: kube.get_or_none(client.PVCS, f"prime-{uid}", ns) is None,
             timeout=60, what="PVC' deletion")
    wait_for(lambda: kube.get_or_none(client.PODS, f"importer-prime-{uid}", ns) is None,
             timeout=60, what="importer pod deletion")
