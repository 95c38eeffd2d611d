"""On `rootdisk up`: `rootdisk start --paused` starts a VM whose guest does not run
(printableStatus Paused, the VMI's Paused condition as upstream's), `rootdisk unpause`
lets it boot and print its marker, `rootdisk pause vm NAME` (virtctl's shape) pauses it
again; the KubeVirt object is Deployed and Available."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import kubeclient
from kubeclient import Client
from localcluster.cluster import Cluster
from tests.e2e import vmkit
from tests.fixtures.guests import MARKER, write_boot_sector_disk
from tests.fixtures.httpserver import HttpServer
from tests.localcluster.clusterkit import needs_root, wait_for

pytestmark = [needs_root, pytest.mark.slow, pytest.mark.e2e]
KUBEVIRTS = kubeclient.Resource("kubevirt.io", "v1", "kubevirts")


@pytest.fixture(scope="module", autouse=True)
def vm_side(kube: Client) -> None:
    vmkit.wait_vm_side_ready(kube)


def _paused(kube: Client, ns: str, name: str) -> dict[str, Any] | None:
    vmi = kube.get_or_none(vmkit.VMIS, name, ns) or {}
    return next((c for c in (vmi.get("status") or {}).get("conditions") or []
                 if c.get("type") == "Paused"), None)


@pytest.mark.timeout(900)
def test_start_paused_unpause_pause(cluster: Cluster, kube: Client, ns: str,
                                    http_server: HttpServer, tmp_path: Path) -> None:
    url = http_server.publish(write_boot_sector_disk(tmp_path / "g.img", poweroff=False),
                              "g.img")
    kube.create(vmkit.VMS, vmkit.vm("pz", url, strategy="Halted"), ns)
    out = vmkit.cli(cluster, "start", "pz", "--paused", "-n", ns)
    assert out.returncode == 0, out.stderr
    try:
        vmkit.wait_printable(kube, ns, "pz", "Paused", timeout=400)
    except AssertionError:
        raise AssertionError(vmkit.diagnose(kube, ns)) from None
    cond = _paused(kube, ns, "pz")
    assert cond is not None and (cond["status"], cond["reason"], cond["message"]) == (
        "True", "PausedByUser", "VMI was paused by user")
    assert kube.get(vmkit.VMIS, "pz", ns)["spec"]["startStrategy"] == "Paused"
    assert MARKER not in vmkit.cli(cluster, "console", "pz", "-n", ns, "--log").stdout

    out = vmkit.cli(cluster, "unpause", "vm/pz", "-n", ns)
    assert out.returncode == 0 and out.stdout == "VMI pz was scheduled to unpause\n", out
    vmkit.wait_printable(kube, ns, "pz", "Running", timeout=120)
    wait_for(lambda: MARKER in vmkit.cli(cluster, "console", "pz", "-n", ns, "--log").stdout,
             timeout=120, what="the guest's marker once unpaused")
    assert _paused(kube, ns, "pz") is None

    out = vmkit.cli(cluster, "pause", "vm", "pz", "-n", ns)
    assert out.returncode == 0 and out.stdout == "VMI pz was scheduled to pause\n", out
    vmkit.wait_printable(kube, ns, "pz", "Paused", timeout=120)
    out = vmkit.cli(cluster, "pause", "vm/pz", "-n", ns)
    assert out.returncode == 1 and "VMI is already paused" in out.stderr, out

    kv = kube.get(KUBEVIRTS, "kubevirt", "kubevirt")
    assert kv["status"]["phase"] == "Deployed"
    assert {c["type"]: c["status"] for c in kv["status"]["conditions"]}["Available"] == "True"
