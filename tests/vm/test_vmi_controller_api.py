"""The VMI controller's sync against a real API server: finalizer, launcher pod, phases
from the pod, ErrorPvcNotFound, the WaitForFirstConsumer binding pod, deletion."""

from __future__ import annotations

import json
import uuid

import pytest

from kubeclient import Client
from kubeclient.resources import DATAVOLUMES, EVENTS, KUBEVIRTS, NAMESPACES, PODS, PVCS, VMIS
from vm.vmi.kube import FINALIZER, sync_vmi


@pytest.fixture
def ns(api: Client) -> str:
    name = f"vmi-{uuid.uuid4().hex[:8]}"
    api.create(NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    return name


def make_vmi(api: Client, ns: str) -> dict:
    return api.create(VMIS, {
        "apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance",
        "metadata": {"name": "v1"},
        "spec": {"domain": {"resources": {"requests": {"memory": "128Mi"}},
                            "devices": {"disks": [{"name": "root", "disk": {"bus": "virtio"}}]}},
                 "networks": [{"name": "default", "pod": {}}],
                 "volumes": [{"name": "root", "dataVolume": {"name": "root-dv"}}]}}, ns)


def make_dv(api: Client, ns: str, phase: str) -> None:
    api.create(DATAVOLUMES, {"apiVersion": "cdi.kubevirt.io/v1beta1", "kind": "DataVolume",
                     "metadata": {"name": "root-dv"},
                     "spec": {"source": {"blank": {}},
                              "storage": {"resources": {"requests": {"storage": "1Gi"}}}}}, ns)
    api.patch(DATAVOLUMES, "root-dv", {"status": {"phase": phase}}, ns, subresource="status")


def make_pvc(api: Client, ns: str, mode: str = "Filesystem") -> None:
    api.create(PVCS, {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
                      "metadata": {"name": "root-dv"},
                      "spec": {"accessModes": ["ReadWriteOnce"], "volumeMode": mode,
                               "resources": {"requests": {"storage": "1Gi"}}}}, ns)


def vmi_status(api: Client, ns: str) -> dict:
    return (api.get_or_none(VMIS, "v1", ns) or {}).get("status") or {}


def pods(api: Client, ns: str) -> list[dict]:
    return api.list(PODS, ns)


def test_launcher_pod_and_phases(api: Client, ns: str) -> None:
    vmi = make_vmi(api, ns)
    make_dv(api, ns, "Succeeded")
    make_pvc(api, ns, mode="Block")
    api.create(KUBEVIRTS, {"apiVersion": "kubevirt.io/v1", "kind": "KubeVirt",
                           "metadata": {"name": "kubevirt"},
                           "spec": {"configuration": {"launcherDriver": "libvirt"}}}, ns)
    sync_vmi(api, ns, "v1")
    assert FINALIZER in api.get_or_none(VMIS, "v1", ns)["metadata"]["finalizers"]
    sync_vmi(api, ns, "v1")
    [pod] = pods(api, ns)
    assert pod["metadata"]["labels"]["kubevirt.io/created-by"] == vmi["metadata"]["uid"]
    compute = pod["spec"]["containers"][0]
    env = {e["name"]: e.get("value") for e in compute["env"]}
    assert {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}} in \
        compute["env"]
    assert env["LAUNCHER_DRIVER"] == "libvirt"
    assert env["USE_EMULATION"] == "true"  # no node advertises devices.kubevirt.io/kvm
    assert json.loads(env["VMI"])["metadata"]["uid"] == vmi["metadata"]["uid"]
    assert compute["volumeDevices"] == [{"name": "root", "devicePath": "/dev/root"}]
    assert vmi_status(api, ns)["phase"] == "Pending"
    sync_vmi(api, ns, "v1")
    assert len(pods(api, ns)) == 1  # not created twice
    assert vmi_status(api, ns)["phase"] == "Scheduling"

    name = pod["metadata"]["name"]
    api.patch(PODS, name, {"spec": {"nodeName": "node1"}}, ns)
    api.patch(PODS, name, {"status": {"phase": "Running", "podIP": "127.9.0.1", "conditions": [
        {"type": "Ready", "status": "True"}, {"type": "PodScheduled", "status": "True"}]}},
        ns, subresource="status")
    sync_vmi(api, ns, "v1")
    st = vmi_status(api, ns)
    assert (st["phase"], st["nodeName"]) == ("Scheduled", "node1")
    assert st["interfaces"][0]["ipAddress"] == "127.9.0.1"  # the pod network's address
    assert api.get_or_none(VMIS, "v1", ns)["metadata"]["labels"]["kubevirt.io/nodeName"] == "node1"

    api.patch(PODS, name, {"status": {"phase": "Failed", "containerStatuses": [{
        "name": "compute", "ready": False, "restartCount": 0, "image": "x", "imageID": "",
        "state": {"terminated": {"exitCode": 3, "reason": "Error", "message": json.dumps(
            {"phase": "Failed", "reason": "GuestCrashed", "message": "qemu crashed"})}}}]}},
        ns, subresource="status")
    sync_vmi(api, ns, "v1")
    st = vmi_status(api, ns)
    assert (st["phase"], st["reason"]) == ("Failed", "GuestCrashed")
    assert [t["phase"] for t in st["phaseTransitionTimestamps"]] == [
        "Pending", "Scheduling", "Scheduled", "Failed"]

    # deletion: the pod goes first (here by hand: there is no kubelet), then the finalizer
    api.delete(VMIS, "v1", ns)
    sync_vmi(api, ns, "v1")
    assert api.get_or_none(VMIS, "v1", ns) is not None
    for p in pods(api, ns):
        api.delete(PODS, p["metadata"]["name"], ns, grace_period=0)
    sync_vmi(api, ns, "v1")
    assert api.get_or_none(VMIS, "v1", ns) is None


def test_missing_pvc(api: Client, ns: str) -> None:
    make_vmi(api, ns)
    make_dv(api, ns, "Succeeded")
    sync_vmi(api, ns, "v1")
    sync_vmi(api, ns, "v1")
    assert pods(api, ns) == []
    conds = {c["type"]: c for c in vmi_status(api, ns)["conditions"]}
    assert conds["Synchronized"]["reason"] == "FailedPvcNotFound"
    assert f"PVC {ns}/root-dv does not exist" in conds["Synchronized"]["message"]
    assert "FailedPvcNotFound" in [e["reason"] for e in api.list(EVENTS, ns)]
    make_pvc(api, ns)
    sync_vmi(api, ns, "v1")
    assert len(pods(api, ns)) == 1
    conds = {c["type"]: c for c in vmi_status(api, ns)["conditions"]}
    assert "Synchronized" not in conds


def test_wait_for_first_consumer_gets_a_binding_pod(api: Client, ns: str) -> None:
    make_vmi(api, ns)
    make_dv(api, ns, "WaitForFirstConsumer")
    make_pvc(api, ns)
    sync_vmi(api, ns, "v1")
    sync_vmi(api, ns, "v1")
    [pod] = pods(api, ns)
    assert pod["metadata"]["annotations"]["kubevirt.io/ephemeral-provisioning"] == "true"
    sync_vmi(api, ns, "v1")
    assert len(pods(api, ns)) == 1
    api.patch(DATAVOLUMES, "root-dv", {"status": {"phase": "Succeeded"}}, ns, subresource="status")
    sync_vmi(api, ns, "v1")  # the binding pod goes
    sync_vmi(api, ns, "v1")  # the launcher comes
    left = pods(api, ns)
    launchers = [p for p in left if not (p["metadata"].get("annotations") or {}).get(
        "kubevirt.io/ephemeral-provisioning") and not p["metadata"].get("deletionTimestamp")]
    assert len(launchers) == 1


def test_failed_datavolume_fails_the_vmi(api: Client, ns: str) -> None:
    make_vmi(api, ns)
    make_dv(api, ns, "Failed")
    sync_vmi(api, ns, "v1")
    sync_vmi(api, ns, "v1")
    assert vmi_status(api, ns)["phase"] == "Failed"
    assert pods(api, ns) == []
