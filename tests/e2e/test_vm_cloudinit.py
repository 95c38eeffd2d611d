"""A VM with a cloud-init NoCloud volume whose user data is a Secret, SSH keys from
another Secret and an emptyDisk, on `rootdisk up`: it runs, the ISO is attached to its
QEMU and holds the Secret's data, the Secrets reach the launcher only as files (0440,
group 107, not world-readable), and the webhook refuses a bad cloud-init volume with
upstream's message."""

from __future__ import annotations

import json
import os
import stat
import subprocess
from pathlib import Path
from typing import Any

import pytest

import kubeclient
from kubeclient import Client, resources
from tests.e2e import kit, vmkit
from tests.fixtures.guests import write_boot_sector_disk
from tests.fixtures.httpserver import HttpServer
from tests.localcluster.clusterkit import needs_root, wait_for
from vm.controller.instance import legacy_uuid

pytestmark = [needs_root, pytest.mark.slow, pytest.mark.e2e]

USER_DATA = "#cloud-config\nrootdisk-e2e: SECRET-USER-DATA-91c2\n"
KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIE2eE2eE2eE2eE2eE2eE2eE2eE2eE2eE2eE2eE2e e2e"


@pytest.fixture(scope="module", autouse=True)
def vm_side(kube: Client) -> None:
    vmkit.wait_vm_side_ready(kube)


@pytest.fixture
def guest_url(http_server: HttpServer, tmp_path: Path) -> str:
    disk = write_boot_sector_disk(tmp_path / "guest.img", poweroff=False)
    return http_server.publish(disk, "guest.img")


def cloud_vm(name: str, url: str) -> dict[str, Any]:
    vm = vmkit.vm(name, url)
    spec = vm["spec"]["template"]["spec"]
    spec["domain"]["devices"]["disks"] += [{"name": "ci", "cdrom": {"bus": "sata"}},
                                           {"name": "scratch", "disk": {"bus": "virtio"}}]
    spec["volumes"] += [{"name": "ci", "cloudInitNoCloud": {"secretRef": {"name": "ud"}}},
                        {"name": "scratch", "emptyDisk": {"capacity": "8Mi"}}]
    spec["accessCredentials"] = [{"sshPublicKey": {
        "source": {"secret": {"secretName": "keys"}}, "propagationMethod": {"noCloud": {}}}}]
    return vm


def qemu_of(ns: str, name: str) -> int | None:
    """The pid of the guest's QEMU on this host (pods are host processes here)."""
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            argv = Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if argv and os.path.basename(argv[0]).startswith(b"qemu-system") and any(
                f"guest={ns}_{name}".encode() in a for a in argv):
            return int(entry)
    return None


@pytest.mark.timeout(900)
def test_cloud_init_secret_vm_runs_with_its_iso(kube: Client, ns: str, guest_url: str,
                                                tmp_path: Path) -> None:
    kit.secret(kube, ns, "ud", {"userdata": USER_DATA})
    kit.secret(kube, ns, "keys", {"key1": KEY})
    kube.create(vmkit.VMS, cloud_vm("ci", guest_url), ns)
    try:
        vmkit.wait_printable(kube, ns, "ci", "Running", timeout=400)
    except AssertionError:
        raise AssertionError(vmkit.diagnose(kube, ns)) from None
    pid = wait_for(lambda: qemu_of(ns, "ci"), timeout=60, what="the guest's QEMU")
    argv = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    iso_in_pod = "/var/run/kubevirt-ephemeral-disks/cloud-init-data/" + ns + "/ci/noCloud.iso"
    assert iso_in_pod in argv and "/var/run/libvirt/empty-disks/scratch.qcow2" in argv
    root = Path(f"/proc/{pid}/root")  # the launcher pod's view of its files
    out = tmp_path / "iso"
    subprocess.run(["xorriso", "-osirrox", "on", "-indev", str(root) + iso_in_pod,
                    "-extract", "/", str(out)], check=True, capture_output=True, timeout=60)
    assert (out / "user-data").read_text() == USER_DATA
    meta = json.loads((out / "meta-data").read_text())
    assert meta["local-hostname"] == "ci" and meta["public-keys"] == {"0": KEY}
    assert meta["instance-id"] == legacy_uuid("ci")  # stable across the VM's restarts
    # the Secrets are files of the pod, readable by its group (fsGroup 107) only
    for path in ("var/run/kubevirt-private/secret/ci/userdata",
                 "var/run/kubevirt-private/secret/keys-access-cred/key1"):
        st = (root / path).stat()
        assert stat.S_IMODE(st.st_mode) == 0o440 and st.st_gid == 107, path
    # and their content is in no pod spec, Event or VMI
    for res in (resources.PODS, vmkit.VMIS, kubeclient.Resource("", "v1", "events")):
        text = json.dumps(kube.list(res, ns))
        assert "SECRET-USER-DATA" not in text and "E2eE2e" not in text, res.plural


def test_bad_cloud_init_volume_is_refused_with_upstreams_message(kube: Client, ns: str) -> None:
    vm = cloud_vm("bad", "http://127.0.0.1:1/x.img")
    vm["spec"]["template"]["spec"]["volumes"][1]["cloudInitNoCloud"] = {}
    with pytest.raises(kubeclient.KubeError) as err:
        kube.create(vmkit.VMS, vm, ns)
    assert err.value.status == 422
    assert ("spec.template.spec.volumes[1].cloudInitNoCloud must have at least one "
            "userdatasource or one networkdatasource set.") in str(err.value)


@pytest.mark.timeout(900)
def test_missing_secret_is_shown_then_the_vm_runs_once_it_exists(
        kube: Client, ns: str, guest_url: str) -> None:
    kube.create(vmkit.VMS, cloud_vm("late", guest_url), ns)
    kit.secret(kube, ns, "keys", {"key1": KEY})

    def sync_condition() -> dict[str, Any] | None:
        vmi = kube.get_or_none(vmkit.VMIS, "late", ns) or {}
        return next((c for c in (vmi.get("status") or {}).get("conditions") or []
                     if c.get("type") == "Synchronized" and c.get("status") == "False"), None)
    try:
        cond = wait_for(sync_condition, timeout=400, what="the VMI's Synchronized=False")
    except AssertionError:
        raise AssertionError(vmkit.diagnose(kube, ns)) from None
    assert cond["reason"] == "CreateContainerConfigError"
    assert 'secret "ud" not found' in cond["message"]
    kit.secret(kube, ns, "ud", {"userData": USER_DATA})  # upstream's other key name
    vmkit.wait_printable(kube, ns, "late", "Running", timeout=300)
    pid = wait_for(lambda: qemu_of(ns, "late"), timeout=60, what="the guest's QEMU")
    assert "noCloud.iso" in Path(f"/proc/{pid}/cmdline").read_text(errors="replace")


@pytest.mark.timeout(900)
def test_two_vms_share_one_golden_claim_through_overlays(kube: Client, ns: str,
                                                         guest_url: str) -> None:
    kube.create(kit.DVS, kit.datavolume("golden", {"http": {"url": guest_url}},
                                        storage={"storageClassName": "local-immediate"}), ns)
    kit.wait_dv(kube, ns, "golden", ("Succeeded",), timeout=300)
    image = kit.volume_path(kube, kube.get(resources.PVCS, "golden", ns))
    before = Path(image).read_bytes()
    for name in ("eph-a", "eph-b"):
        kube.create(vmkit.VMS, vmkit.ephemeral_vm(name, "golden"), ns)
    try:
        for name in ("eph-a", "eph-b"):
            vmkit.wait_printable(kube, ns, name, "Running", timeout=300)
    except AssertionError:
        raise AssertionError(vmkit.diagnose(kube, ns)) from None
    for name in ("eph-a", "eph-b"):
        pid = wait_for(lambda n=name: qemu_of(ns, n), timeout=60, what=f"{name}'s QEMU")
        argv = Path(f"/proc/{pid}/cmdline").read_text(errors="replace")
        assert "/var/run/kubevirt-ephemeral-disks/disk-data/root/disk.qcow2" in argv
        # the golden claim is mounted read-only in each launcher pod
        mounts = Path(f"/proc/{pid}/mounts").read_text()
        line = next(m for m in mounts.splitlines()
                    if " /var/run/kubevirt-private/vmi-disks/root " in m)
        assert " ro," in line or " ro " in line, line
    assert Path(image).read_bytes() == before
