"""DataVolumes from HTTP on `rootdisk up`: the operator pod, the populator, the importer pod."""

from __future__ import annotations

import pytest

from localcluster.controllers import client
from localcluster.controllers.client import Kube
from tests.e2e import kit
from tests.fixtures.httpserver import HttpServer
from tests.fixtures.images import ImageFactory, compare
from tests.localcluster.clusterkit import needs_root, wait_for

pytestmark = [needs_root, pytest.mark.slow, pytest.mark.e2e]


def test_http_qcow2_filesystem_succeeds_with_content(kube: Kube, ns: str,
                                                      http_server: HttpServer,
                                                      images: ImageFactory) -> None:
    url = http_server.publish(images.get("qcow2").path, "disk.qcow2")
    dv = kube.create(kit.DVS, kit.datavolume(
        "disk", {"http": {"url": url}},
        storage={"storageClassName": "local-immediate"}), ns)
    status = kit.wait_dv(kube, ns, "disk", ("Succeeded", "Failed"))
    assert status["phase"] == "Succeeded", str(status["conditions"])
    assert status["progress"] == "100.0%" and status["claimName"] == "disk"
    assert kit.condition(status, "Ready")["status"] == "True"
    assert kit.condition(status, "Bound")["reason"] == "Bound"
    claim = kube.get(client.PVCS, "disk", ns)
    # sized for the class's measured overhead (0.03) on top of the 64 MiB asked for
    assert claim["spec"]["resources"]["requests"]["storage"] == str(-(-64 * 2**20 * 103 // 100))
    assert claim["metadata"]["ownerReferences"][0]["uid"] == dv["metadata"]["uid"]
    assert compare(images.get("raw").path, kit.volume_path(kube, claim))
    reasons = [e["reason"] for e in kit.events_for(kube, ns, dv["metadata"]["uid"])]
    assert "ImportSucceeded" in reasons
    # the VolumeImportSource is gone once the DataVolume succeeded
    wait_for(lambda: not kube.list(kit.VIS, ns)["items"], timeout=60, what="VIS deleted")
