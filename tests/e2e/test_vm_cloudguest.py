"""The Debian cloud guest on `rootdisk up`: one VM, booted under TCG once for every test
of the module (a boot of this guest costs minutes of the suite's two cores).

The VM's root is ``ephemeral`` over a golden claim a DataVolume imported, on ``bus:
sata`` (AHCI); its cloudInitNoCloud volume is a ``cdrom`` on ``bus: sata``, its
user-data from a Secret (``secretRef``) with ``networkData`` (an extra route on the NIC
matched by its MAC); a readiness probe runs in the guest through the agent (exec).
- The guest agent connects on its virtio-serial port: AgentConnected, guestOSInfo, and
  virt-api's guestosinfo and filesystemlist subresources through the API server.
- The probe gates the VMI's Ready condition both ways; the user-data and networkData are
  applied in the guest; a Service selecting the VM's labels lists it as ready only while
  the probe passes; an SSH login works through `rootdisk ssh`, through that Service's
  endpoint and through `rootdisk port-forward` to sshd.
- Over `rootdisk ssh` as the user-data's user (these came from
  tests/rootdisk/test_cloudguest_boot.py, which booted the guest on QEMU alone for them):
  cloud-init ends ``status: done``, runcmd ran, the hostname is the meta-data's; sudo
  works, root's and the user's passwords are locked, sshd refuses passwords and root; a
  key cloud-init did not install is refused, and so is root; the boot is measured
  (systemd-analyze); root is mounted from the SATA disk and the guest's only block
  devices are that disk and the seed's CD-ROM (``cidata``).
(That an ``ephemeral`` root's writes go with the VMI at a restart while the golden claim's
bytes stay is proven on the small agent guest in tests/e2e/test_vm.py, a Debian boot less.)
(A Debian VM whose root a dataVolumeTemplate imports boots in tests/e2e/test_demo.py,
with its root and its seed on virtio disks.)"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from kubeclient import Client, KubeError, resources
from localcluster.cluster import Cluster
from tests.e2e import kit, vmkit
from tests.fixtures.cloudvm import SSH_OPTIONS, keypair, retry_dropped
from tests.fixtures.httpserver import HttpServer
from tests.fixtures.s3server import free_ports
from tests.localcluster.clusterkit import needs_root, wait_for
from tests.vm.agent.cloudguest import cloud_guest_qcow2
from vm import nodeports
from vm.domain.podnet import node_port

pytestmark = [needs_root, pytest.mark.slow, pytest.mark.e2e, pytest.mark.cloud_guest,
              pytest.mark.timeout(1200)]  # the first to run boots the VM in its set-up
ROOT = Path(__file__).resolve().parents[2]
NAME = "cg"
MAC = "02:00:00:5e:10:01"
GOLDEN = "golden"
USERDATA_MARK = "USERDATA-FROM-SECRET-7f3a"
READY_FILE = "/run/rootdisk-ready"
USER = "tester"


@pytest.fixture(scope="module", autouse=True)
def vm_side(kube: Client) -> None:
    vmkit.wait_vm_side_ready(kube)


def _user_data(public_key: str) -> str:
    return "#cloud-config\n" + json.dumps({
        "users": [{"name": USER, "shell": "/bin/bash",
                   "sudo": "ALL=(ALL) NOPASSWD:ALL", "ssh_authorized_keys": [public_key]}],
        "runcmd": [["sh", "-c", f"echo {USERDATA_MARK} > /var/tmp/rootdisk-userdata"]],
    }) + "\n"


NETWORK_DATA = json.dumps({"version": 2, "ethernets": {"nic0": {
    "match": {"macaddress": MAC}, "dhcp4": True,
    "routes": [{"to": "192.0.2.0/24", "via": "10.0.2.1"}]}}})


def _vm() -> dict[str, Any]:
    return {"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachine",
            "metadata": {"name": NAME},
            "spec": {"runStrategy": "Always", "template": {
                "metadata": {"labels": {"app": f"{NAME}-app"}},
                "spec": {
                    "terminationGracePeriodSeconds": 5,
                    "domain": {"resources": {"requests": {"memory": "512Mi"}},
                               "devices": {
                                   "disks": [{"name": "root", "bootOrder": 1,
                                              "disk": {"bus": "sata"}},
                                             {"name": "ci", "cdrom": {"bus": "sata"}}],
                                   "interfaces": [{"name": "default", "masquerade": {},
                                                   "macAddress": MAC,
                                                   "ports": [{"name": "ssh", "port": 22}]}]}},
                    "networks": [{"name": "default", "pod": {}}],
                    "volumes": [{"name": "root", "ephemeral": {
                                    "persistentVolumeClaim": {"claimName": GOLDEN}}},
                                {"name": "ci", "cloudInitNoCloud": {
                                    "secretRef": {"name": "cg-ud"},
                                    "networkData": NETWORK_DATA}}],
                    "readinessProbe": {"exec": {"command": ["test", "-e", READY_FILE]},
                                       "periodSeconds": 2, "failureThreshold": 1,
                                       "timeoutSeconds": 5}}}}}


def _ssh(cluster: Cluster, ns: str, name: str, key: Path, command: str,
         user: str = USER, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return retry_dropped(
        [sys.executable, "-m", "rootdisk", "ssh", f"{user}@vm/{name}", "-n", ns,
         "--kubeconfig", cluster.kubeconfig, "-i", str(key),
         *(f"--local-ssh-opts={o}" for o in SSH_OPTIONS), "--command", command],
        timeout=timeout, cwd=ROOT)


def _ready(kube: Client, ns: str) -> dict[str, Any]:
    vmi = kube.get_or_none(vmkit.VMIS, NAME, ns) or {}
    return next((c for c in (vmi.get("status") or {}).get("conditions") or []
                 if c.get("type") == "Ready"), {})


def _endpoint(kube: Client, ns: str, kind: str) -> tuple[str, int] | None:
    """The Service cg-ssh's first endpoint among ``addresses`` or ``notReadyAddresses``."""
    ep = kube.get_or_none(resources.ENDPOINTS, "cg-ssh", ns) or {}
    for subset in ep.get("subsets") or []:
        for addr in subset.get(kind) or []:
            return str(addr["ip"]), int(subset["ports"][0]["port"])
    return None


@dataclass
class Guest:
    ns: str
    key: Path


@pytest.fixture(scope="module")
def guest(cluster: Cluster, kube: Client, vm_side: None,
          tmp_path_factory: pytest.TempPathFactory) -> Iterator[Guest]:
    """The VM, Running with its guest agent connected; its VMs and VMIs deleted after."""
    work = tmp_path_factory.mktemp("cloudguest")
    key, public = keypair(work)
    ns = kit.namespace(kube)
    (work / "www").mkdir()
    try:
        with HttpServer(work / "www") as server:
            url = server.publish(cloud_guest_qcow2(), "cloud.qcow2")
            kube.create(kit.DVS, kit.datavolume(GOLDEN, {"http": {"url": url}}, storage={
                "storageClassName": "local-immediate",
                "resources": {"requests": {"storage": "2Gi"}}}), ns)
            kit.wait_dv(kube, ns, GOLDEN, ("Succeeded",), timeout=600)
        kit.secret(kube, ns, "cg-ud", {"userdata": _user_data(public)})
        kube.create(vmkit.VMS, _vm(), ns)
        try:
            vmkit.wait_printable(kube, ns, NAME, "Running", timeout=600)
            wait_for(lambda: vmkit.agent_uid(kube, ns, NAME), timeout=400, what="AgentConnected")
        except AssertionError as err:
            raise AssertionError(f"{err}\n{vmkit.diagnose(kube, ns)}") from None
        yield Guest(ns, key)
    finally:
        for res in (vmkit.VMS, vmkit.VMIS):
            try:
                for obj in kube.list(res, ns):
                    kube.delete(res, obj["metadata"]["name"], ns)
            except KubeError:
                pass  # already going


def test_agent_connected_and_guestosinfo(kube: Client, guest: Guest) -> None:
    """The guest agent answers on its virtio-serial port (this holds the claim of
    tests/rootdisk/test_cloudguest_boot.py's former
    test_the_guest_agent_answers_on_its_virtio_serial_port): AgentConnected and the OS
    and file systems come only from the agent's answers over that port; its guest-exec
    is the readiness probe's, which test_cloud_guest_probes_cloud_init_and_ssh sees
    gate Ready both ways."""
    ns = guest.ns
    status = kube.get(vmkit.VMIS, NAME, ns)["status"]
    assert kit.condition(status, "AgentConnected")["status"] == "True"
    wait_for(lambda: (kube.get(vmkit.VMIS, NAME, ns)["status"].get("guestOSInfo") or {}).get(
        "id") == "debian", timeout=60, what="guestOSInfo")
    base = f"/apis/subresources.kubevirt.io/v1/namespaces/{ns}/virtualmachineinstances/{NAME}"
    info = kube.request("GET", base + "/guestosinfo")
    assert info["os"]["id"] == "debian", info
    assert {"name": "guest-ping", "enabled": True} in info["supportedCommands"]
    fs = kube.request("GET", base + "/filesystemlist")
    assert any(d["mountPoint"] == "/" for d in fs["items"]), fs
    assert kube.get(vmkit.VMIS, NAME, ns)["status"]["phase"] == "Running"


def test_cloud_guest_probes_cloud_init_and_ssh(cluster: Cluster, kube: Client,
                                               guest: Guest) -> None:
    ns, key = guest.ns, guest.key

    def ssh(command: str) -> subprocess.CompletedProcess[str]:
        return _ssh(cluster, ns, NAME, key, command)

    # SSH login as the user the Secret's user-data made; its runcmd ran; the
    # networkData's route is on the NIC matched by MAC (DHCP still gave the address)
    last: list[str] = [""]

    def logged_in() -> str:
        done = ssh("cloud-init status --wait >/dev/null; cat /var/tmp/rootdisk-userdata; "
                   "ip -4 route show 192.0.2.0/24; ip -4 -o addr show")
        last[0] = done.stderr[-300:]
        return done.stdout if done.returncode == 0 else ""
    out = wait_for(logged_in, timeout=400, what=f"an SSH login (last: {last[0]!r})")
    assert USERDATA_MARK in out, out
    assert "192.0.2.0/24 via 10.0.2.1" in out, out
    assert "10.0.2.2/24" in out, out

    # the exec probe fails in the running, reachable guest: not Ready, the pod's reason;
    # a Service on the VM's labels lists the launcher pod as not ready. localcluster's
    # pods share the node's network, so the guest's port 22 is at the pod IP's moved
    # port (docs/vm.md, the pod network): the Service targets that
    ready = _ready(kube, ns)
    assert (ready.get("status"), ready.get("reason")) == ("False", "ContainersNotReady"), ready
    moved = node_port(22, nodeports.unprivileged_port_start())
    kube.create(resources.SERVICES, {"apiVersion": "v1", "kind": "Service",
                                  "metadata": {"name": "cg-ssh"},
                                  "spec": {"selector": {"app": f"{NAME}-app"},
                                           "ports": [{"port": 22, "targetPort": moved}]}}, ns)
    pod_ip = kube.get(vmkit.VMIS, NAME, ns)["status"]["interfaces"][0]["ipAddress"]
    assert wait_for(lambda: _endpoint(kube, ns, "notReadyAddresses"), timeout=60,
                    what="the Service's not-ready endpoint") == (pod_ip, moved)
    assert _endpoint(kube, ns, "addresses") is None
    # the probed file appears: Ready, and the Service's endpoint is ready: an SSH login
    # through it reaches the guest; the file goes: not Ready again (failureThreshold 1)
    assert ssh(f"sudo touch {READY_FILE}").returncode == 0
    wait_for(lambda: _ready(kube, ns).get("status") == "True", timeout=120,
             what="Ready=True after the probed file appeared")
    ip, port = wait_for(lambda: _endpoint(kube, ns, "addresses"), timeout=60,
                        what="the Service's ready endpoint")
    done = retry_dropped(["ssh", *SSH_OPTIONS, "-i", str(key), "-p", str(port),
                          f"tester@{ip}", "cat /var/tmp/rootdisk-userdata"], timeout=120)
    assert done.returncode == 0 and USERDATA_MARK in done.stdout, done.stderr
    assert ssh(f"sudo rm {READY_FILE}").returncode == 0
    wait_for(lambda: _ready(kube, ns).get("status") == "False", timeout=120,
             what="Ready=False after the probed file went")
    # the VM's status.ready follows the VMI's Ready a moment later (the VM controller's
    # own reconcile): wait for it, as a one-time read lost that race once
    wait_for(lambda: kube.get(vmkit.VMS, NAME, ns)["status"].get("ready") is not True,
             timeout=60, what="the VM's status.ready to follow")

    # rootdisk port-forward to the guest's sshd, and an SSH login through it
    [local] = free_ports(1)
    proc = subprocess.Popen([sys.executable, "-m", "rootdisk", "port-forward", "--kubeconfig",
                             cluster.kubeconfig, f"vm/{NAME}/{ns}", f"{local}:22"],
                            stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, cwd=ROOT)
    try:
        assert proc.stderr is not None
        assert proc.stderr.readline().decode() == f"Forwarding from 127.0.0.1:{local} -> 22\n"
        done = retry_dropped(["ssh", *SSH_OPTIONS, "-i", str(key), "-p", str(local),
                              "tester@127.0.0.1", "cat /var/tmp/rootdisk-userdata"],
                             timeout=120)
        assert done.returncode == 0 and USERDATA_MARK in done.stdout, done.stderr
    finally:
        proc.terminate()
        proc.wait(30)
        if proc.stderr is not None:
            proc.stderr.close()


Login = Callable[..., subprocess.CompletedProcess[str]]


@pytest.fixture(scope="module")
def login(cluster: Cluster, guest: Guest) -> Login:
    """``rootdisk ssh tester@vm/cg -- COMMAND``, once a login works (bounded): the agent
    connects before cloud-init has made the user, so a test run on its own waits. (Each
    login costs seconds under TCG: the tests below log in once or twice each.)"""
    def ssh(command: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        return _ssh(cluster, guest.ns, NAME, guest.key, command, timeout=timeout)
    wait_for(lambda: ssh("true").returncode == 0, timeout=400, what="an SSH login")
    return ssh


def test_cloud_init_finishes_and_user_data_ran(login: Login) -> None:
    """cloud-init ends ``status: done``; the runcmd ran; the hostname is the seed's
    ``local-hostname``, which KubeVirt's NoCloud meta-data sets to the VMI's name."""
    done = login("cloud-init status --wait && cat /var/tmp/rootdisk-userdata && hostname",
                 timeout=300)
    assert done.returncode == 0, done.stderr
    *status, ran, host = done.stdout.splitlines()
    assert "status: done" in status[-1], done.stdout
    assert [ran, host] == [USERDATA_MARK, NAME], done.stdout


def test_the_user_has_sudo_and_no_password_root_is_locked(login: Login) -> None:
    out = login(f"sudo -n passwd -S root && sudo -n passwd -S {USER} && sudo -n sshd -T"
                " | grep -E '^(passwordauthentication|permitrootlogin) '")
    assert out.returncode == 0, out.stderr
    [root, user, *sshd] = out.stdout.splitlines()
    statuses = {line.split()[0]: line.split()[1] for line in (root, user)}
    assert statuses == {"root": "L", USER: "L"}, out.stdout
    assert sorted(sshd) == ["passwordauthentication no", "permitrootlogin no"], out.stdout


@pytest.mark.usefixtures("login")
def test_a_key_cloud_init_did_not_install_is_refused(cluster: Cluster, guest: Guest) -> None:
    other, _ = keypair(guest.key.parent, "other")
    wrong = _ssh(cluster, guest.ns, NAME, other, "true")
    assert wrong.returncode == 255
    assert "Permission denied (publickey)" in wrong.stderr
    as_root = _ssh(cluster, guest.ns, NAME, guest.key, "true", user="root")
    assert as_root.returncode == 255
    assert "Permission denied" in as_root.stderr


def test_boot_is_measured_by_systemd(login: Login) -> None:
    """What dominates the boot, printed for the report (systemd-analyze over SSH)."""
    # systemd-analyze refuses while the boot's jobs still run (SSH answers before):
    # wait for them first, so the test does not depend on running after the others.
    out = login("systemctl is-system-running --wait >/dev/null;"
                " systemd-analyze; systemd-analyze blame | head -12", timeout=300)
    assert out.returncode == 0, out.stderr
    print(out.stdout)
    assert re.search(r"Startup finished in .*\(kernel\)", out.stdout)


def test_the_root_disk_is_on_sata_and_the_seed_on_a_cdrom(login: Login) -> None:
    """Root mounted from the AHCI disk (no virtio-blk disk at all), the seed a CD-ROM
    labelled cidata: the only place the hostname and the user could come from."""
    out = login("findmnt -no SOURCE /; lsblk -dno NAME,TYPE,LABEL")
    assert out.returncode == 0, out.stderr
    [root, *devices] = out.stdout.splitlines()
    assert root == "/dev/sda2", out.stdout
    assert [d.split() for d in devices] == [["sda", "disk"], ["sr0", "rom", "cidata"]], out.stdout
