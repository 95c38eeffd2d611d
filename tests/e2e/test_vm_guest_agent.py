"""The guest agent on `rootdisk up`: the Debian cloud guest (qemu-guest-agent inside)
imported by a dataVolumeTemplate, booted under TCG by a launcher pod; the handler pod
sets AgentConnected and guestOSInfo, and guestosinfo answers through the API server."""

from __future__ import annotations

from typing import Any

import pytest

from kubeclient import Client
from tests.e2e import vmkit
from tests.fixtures.httpserver import HttpServer
from tests.localcluster.clusterkit import needs_root, wait_for
from tests.vm.agent.cloudguest import cloud_guest_qcow2

pytestmark = [needs_root, pytest.mark.slow, pytest.mark.e2e]


@pytest.fixture(scope="module", autouse=True)
def vm_side(kube: Client) -> None:
    vmkit.wait_vm_side_ready(kube)


def _conditions(kube: Client, ns: str) -> dict[str, Any]:
    vmi = kube.get_or_none(vmkit.VMIS, "ga", ns) or {}
    return {c["type"]: c for c in (vmi.get("status") or {}).get("conditions") or []}


@pytest.mark.timeout(900)
def test_agent_connected_and_guestosinfo(kube: Client, ns: str, http_server: HttpServer) -> None:
    url = http_server.publish(cloud_guest_qcow2(), "cloud.qcow2")
    vm = vmkit.vm("ga", url, size="2Gi")
    vm["spec"]["template"]["spec"]["domain"]["resources"]["requests"]["memory"] = "512Mi"
    kube.create(vmkit.VMS, vm, ns)
    try:
        vmkit.wait_printable(kube, ns, "ga", "Running", timeout=500)
    except AssertionError:
        raise AssertionError(vmkit.diagnose(kube, ns)) from None
    base = f"/apis/subresources.kubevirt.io/v1/namespaces/{ns}/virtualmachineinstances/ga"
    wait_for(lambda: "AgentConnected" in _conditions(kube, ns), timeout=300,
             what="AgentConnected on the VMI")
    assert _conditions(kube, ns)["AgentConnected"]["status"] == "True"
    status = kube.get(vmkit.VMIS, "ga", ns)["status"]
    wait_for(lambda: (kube.get(vmkit.VMIS, "ga", ns)["status"].get("guestOSInfo") or {}).get(
        "id") == "debian", timeout=60, what="guestOSInfo")
    info = kube.request("GET", base + "/guestosinfo")
    assert info["os"]["id"] == "debian", info
    assert {"name": "guest-ping", "enabled": True} in info["supportedCommands"]
    fs = kube.request("GET", base + "/filesystemlist")
    assert any(d["mountPoint"] == "/" for d in fs["items"]), fs
    assert status["phase"] == "Running"
