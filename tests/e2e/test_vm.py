"""VirtualMachines on `rootdisk up`, every component a pod from manifests/: the root disk
imported by a dataVolumeTemplate from the test HTTP server, the guest booted by the
launcher, its marker on the console; start/stop/restart through the subresource API; an
``ephemeral`` root over a golden claim loses the guest's writes at a restart while the
claim's bytes stay (the small agent guest, which counts its boots on its root)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import kubeclient
from apiservice import cabundle
from kubeclient import Client, resources
from localcluster.cluster import Cluster
from localcluster.workloads.apply import apply_manifests
from tests.e2e import kit, vmkit
from tests.fixtures.guests import AGENT_BOOT, MARKER, GuestBuilder, write_boot_sector_disk
from tests.fixtures.httpserver import HttpServer
from tests.fixtures.images import sha256
from tests.localcluster.clusterkit import needs_root, wait_for

pytestmark = [needs_root, pytest.mark.slow, pytest.mark.e2e]


@pytest.fixture(scope="module", autouse=True)
def vm_side(kube: Client) -> None:
    vmkit.wait_vm_side_ready(kube)


@pytest.fixture
def guest_url(http_server: HttpServer, tmp_path: Path) -> str:
    disk = write_boot_sector_disk(tmp_path / "guest.img", poweroff=False)
    return http_server.publish(disk, "guest.img")


@pytest.mark.timeout(900)
def test_vm_imports_boots_and_prints_its_marker(cluster: Cluster, kube: Client, ns: str,
                                                guest_url: str) -> None:
    kube.create(vmkit.VMS, vmkit.vm("demo", guest_url), ns)
    try:
        vmkit.wait_printable(kube, ns, "demo", "Running", timeout=400)
    except AssertionError:
        raise AssertionError(vmkit.diagnose(kube, ns)) from None
    dv = kube.get(kubeclient.Resource("cdi.kubevirt.io", "v1beta1", "datavolumes"), "demo-root", ns)
    assert dv["status"]["phase"] == "Succeeded"
    assert dv["metadata"]["labels"]["kubevirt.io/created-by"] == kube.get(
        vmkit.VMS, "demo", ns)["metadata"]["uid"]
    vmi = kube.get(vmkit.VMIS, "demo", ns)
    assert vmi["status"]["phase"] == "Running" and vmi["status"]["nodeName"]
    # the guest's marker, from the launcher pod's guest-console-log container
    wait_for(lambda: MARKER in vmkit.cli(cluster, "console", "demo", "-n", ns, "--log").stdout,
             timeout=120, what="the guest's marker in `rootdisk console --log`")

    # stop: the VMI goes, the VM is Stopped; start: a new VMI runs again
    out = vmkit.cli(cluster, "stop", "demo", "-n", ns)
    assert out.returncode == 0, out.stderr
    vmkit.wait_printable(kube, ns, "demo", "Stopped", timeout=180)
    # Stopped as upstream: no VMI, or a final one; the final one then goes (its
    # finalizer is removed through virt-api's update webhook, a moment later)
    wait_for(lambda: kube.get_or_none(vmkit.VMIS, "demo", ns) is None, timeout=60,
             what="the stopped VMI to go")
    assert kube.get(vmkit.VMS, "demo", ns)["spec"]["runStrategy"] == "Halted"
    out = vmkit.cli(cluster, "start", "demo", "-n", ns)
    assert out.returncode == 0, out.stderr
    vmkit.wait_printable(kube, ns, "demo", "Running", timeout=240)
    first = vmkit.vmi_uid(kube, ns, "demo")
    out = vmkit.cli(cluster, "start", "demo", "-n", ns)
    assert out.returncode == 1 and "VM is already running" in out.stderr

    # restart: a new VMI (a new uid) reaches Running
    out = vmkit.cli(cluster, "restart", "demo", "-n", ns)
    assert out.returncode == 0, out.stderr
    wait_for(lambda: (u := vmkit.vmi_uid(kube, ns, "demo")) and u != first, timeout=240,
             what="a new VMI after restart")
    vmkit.wait_printable(kube, ns, "demo", "Running", timeout=240)


@pytest.fixture
def poweroff_url(http_server: HttpServer, tmp_path: Path) -> str:
    disk = write_boot_sector_disk(tmp_path / "off.img", poweroff=True)
    return http_server.publish(disk, "off.img")


@pytest.mark.timeout(900)
def test_guest_poweroff_restarts_under_always_not_under_rerun(kube: Client, ns: str,
                                                              poweroff_url: str) -> None:
    kube.create(vmkit.VMS, vmkit.vm("always", poweroff_url), ns)
    kube.create(vmkit.VMS, vmkit.vm("rerun", poweroff_url, strategy="RerunOnFailure"), ns)
    # Always: each VMI the guest powers off is replaced by a new one
    seen: set[str] = set()

    def restarted() -> bool:
        uid = vmkit.vmi_uid(kube, ns, "always")
        if uid:
            seen.add(uid)
        return len(seen) >= 2
    try:
        wait_for(restarted, timeout=400, what="two VMIs of the Always VM")
    except AssertionError:
        raise AssertionError(vmkit.diagnose(kube, ns)) from None
    # RerunOnFailure: the guest's clean power-off ends it; it is not started again
    vmkit.wait_printable(kube, ns, "rerun", "Stopped", timeout=300)
    status = kube.get(vmkit.VMS, "rerun", ns)["status"]
    assert status["created"] is False
    assert "startFailure" not in status


def test_failed_import_shows_datavolume_error(kube: Client, ns: str,
                                              http_server: HttpServer) -> None:
    kube.create(vmkit.VMS, vmkit.vm("broken", http_server.url_for("missing.img")), ns)
    vmkit.wait_printable(kube, ns, "broken", "DataVolumeError", timeout=240)
    # the default class binds on first consumer, so a VMI may exist (with upstream's
    # temporary binding pod), but no launcher ever runs for a disk that never came
    launchers = [p for p in kube.list(resources.PODS, ns)
                 if (p["metadata"].get("labels") or {}).get("kubevirt.io") == "virt-launcher"
                 and not (p["metadata"].get("annotations") or {}).get(
                     "kubevirt.io/ephemeral-provisioning")]
    assert launchers == []
    vmi = kube.get_or_none(vmkit.VMIS, "broken", ns)
    assert vmi is None or (vmi.get("status") or {}).get("phase") != "Running"


def test_reapplied_manifests_get_their_ca_bundles_back(kube: Client, ns: str,
                                                       guest_url: str) -> None:
    """`rootdisk up` started again applies manifests/ while the servers' pods start again
    beside it, and the manifests carry no caBundle. An APIService's caBundle is a field
    no manifest names, so the three-way apply leaves it; a webhook's sits in the
    webhooks list, which the apply sets whole (as `kubectl replace -f manifests/` would
    on any cluster). Every server that owns one writes it back within its check
    interval, and the API server calls virt-api's webhook again. Before, virt-api and the
    cdi-apiserver wrote theirs only on a renewal, hours later, and `make demo` run a
    second time failed creating its VM."""
    def bundles() -> dict[str, str]:
        found = {f"{cfg}/{hook['name']}": hook["clientConfig"].get("caBundle", "")
                 for cfg in ("virt-api-validator", "rootdisk-cdi")
                 for hook in kube.get(kit.WEBHOOKS, cfg)["webhooks"]}
        for name in ("v1.subresources.kubevirt.io", "v1beta1.upload.cdi.kubevirt.io"):
            found[name] = kube.get(vmkit.APISERVICES, name)["spec"].get("caBundle", "")
        return found

    before = bundles()
    assert all(before.values()), before
    apply_manifests(kube, kit.MANIFESTS)
    after = bundles()
    assert not all(after.values())  # the manifests emptied the webhooks'
    assert {k: v for k, v in after.items() if "/" not in k} == \
        {k: v for k, v in before.items() if "/" not in k}  # the APIServices' stayed
    wait_for(lambda: bundles() == before, timeout=cabundle.CHECK_SECONDS + 15,
             what="every caBundle written back")
    kube.request("POST", vmkit.VMS.path(ns), body=vmkit.vm("again", guest_url),
                 query={"dryRun": "All"})  # the VM webhook answers


@pytest.mark.timeout(600)
def test_a_failing_liveness_probe_replaces_the_vmi(kube: Client, ns: str,
                                                   guest_url: str) -> None:
    """A tcpSocket liveness probe on a port the guest never answers (a boot sector has no
    network stack): after failureThreshold failures the kubelet kills the compute
    container, the VMI ends, and runStrategy Always starts a new one, as upstream. Before
    vm.launcher.tcp_probe such a probe passed (QEMU's NAT accepted the connection)."""
    vm = vmkit.vm("unhealthy", guest_url)
    vm["spec"]["template"]["spec"]["livenessProbe"] = {
        "tcpSocket": {"port": 8080}, "initialDelaySeconds": 0, "periodSeconds": 2,
        "timeoutSeconds": 1, "failureThreshold": 2}
    kube.create(vmkit.VMS, vm, ns)
    try:
        vmkit.wait_printable(kube, ns, "unhealthy", "Running", timeout=400)
        first = vmkit.vmi_uid(kube, ns, "unhealthy")
        wait_for(lambda: (u := vmkit.vmi_uid(kube, ns, "unhealthy")) and u != first,
                 timeout=240, what="a new VMI after the liveness probe failed")
    except AssertionError:
        raise AssertionError(vmkit.diagnose(kube, ns)) from None
    events = kube.list(resources.EVENTS, ns)
    unhealthy = [e for e in events if e.get("reason") == "Unhealthy"]
    assert unhealthy and "Liveness probe failed" in unhealthy[0]["message"], [
        (e.get("reason"), e.get("message")) for e in events]
    assert any(e.get("reason") == "Killing" and "failed liveness probe" in e["message"]
               for e in events)


def _boots(cluster: Cluster, ns: str, name: str) -> list[str]:
    """The boot counts the VM's current VMI printed on its console (whole lines only)."""
    log = vmkit.cli(cluster, "console", name, "-n", ns, "--log").stdout
    return re.findall(rf"{AGENT_BOOT} n=(\d+)\r?\n", log)


@pytest.mark.timeout(900)
def test_ephemeral_writes_go_with_the_vmi_and_the_golden_claim_stays(
        cluster: Cluster, kube: Client, ns: str, http_server: HttpServer) -> None:
    """A VM whose root is ``ephemeral`` over a golden claim: the guest's writes go to an
    overlay that goes with the VMI. The agent guest appends a line to a file on its root
    at each boot and prints how many there are: after `rootdisk restart` the new VMI's
    guest says n=1 again (a persistent root would say n=2), and the claim's volume file
    has the SHA-256 it had before the first boot (the launcher mounts it read-only)."""
    url = http_server.publish(GuestBuilder().linux(mode="agent").qcow2, "agent.qcow2")
    kube.create(kit.DVS, kit.datavolume("golden", {"http": {"url": url}}, storage={
        "storageClassName": "local-immediate",  # bound at once: kit.volume_path finds it
        "resources": {"requests": {"storage": "128Mi"}}}), ns)
    kit.wait_dv(kube, ns, "golden", ("Succeeded",), timeout=240)
    image = kit.volume_path(kube, kube.get(resources.PVCS, "golden", ns))
    before = sha256(Path(image))
    kube.create(vmkit.VMS, vmkit.ephemeral_vm("eph", "golden", memory="256Mi"), ns)
    try:
        vmkit.wait_printable(kube, ns, "eph", "Running", timeout=240)
        first = vmkit.vmi_uid(kube, ns, "eph")
        assert wait_for(lambda: _boots(cluster, ns, "eph"), timeout=120,
                        what=f"{AGENT_BOOT} on the first VMI's console") == ["1"]
        # running, its agent connected, the guest idle: the VMI controller and the node
        # handler leave its status alone (they rewrote its interfaces and reordered its
        # conditions against each other several times a second once: a declared-nothing
        # pod network and an agent's condition, both here). Once its agent has connected
        # the handler may write once or twice more (the guest's interfaces).
        wait_for(lambda: vmkit.agent_uid(kube, ns, "eph"), timeout=120,
                 what="AgentConnected")
        writes = vmkit.status_writes(kube, ns, "eph", 5)
        assert len(writes) <= 2, [(w.get("conditions"), w.get("interfaces")) for w in writes]
        out = vmkit.cli(cluster, "restart", "eph", "-n", ns)
        assert out.returncode == 0, out.stderr
        wait_for(lambda: vmkit.vmi_uid(kube, ns, "eph") not in ("", first), timeout=180,
                 what="a new VMI after the restart")
        vmkit.wait_printable(kube, ns, "eph", "Running", timeout=180)
        assert wait_for(lambda: _boots(cluster, ns, "eph"), timeout=120,
                        what=f"{AGENT_BOOT} on the new VMI's console") == ["1"]
    except AssertionError as err:
        raise AssertionError(f"{err}\n{vmkit.diagnose(kube, ns)}") from None
    assert sha256(Path(image)) == before
