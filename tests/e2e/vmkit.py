"""Helpers for the VM end-to-end tests on `rootdisk up`: the VM side's pods ready, VMs
from a dataVolumeTemplate, waits, and the `rootdisk` VM commands."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import kubeclient
from kubeclient import Client, resources
from localcluster.cluster import Cluster
from tests.localcluster.clusterkit import wait_for

VMS = kubeclient.Resource("kubevirt.io", "v1", "virtualmachines")
VMIS = kubeclient.Resource("kubevirt.io", "v1", "virtualmachineinstances")
APISERVICES = kubeclient.Resource("apiregistration.k8s.io", "v1", "apiservices", namespaced=False)
WEBHOOKS = kubeclient.Resource("admissionregistration.k8s.io", "v1",
                           "validatingwebhookconfigurations", namespaced=False)
VM_NS = "kubevirt"


def _ready(pod: dict[str, Any]) -> bool:
    conds = {c["type"]: c["status"] for c in (pod.get("status") or {}).get("conditions") or []}
    return conds.get("Ready") == "True" and not pod["metadata"].get("deletionTimestamp")


def wait_vm_side_ready(kube: Client, timeout: float = 240) -> None:
    """virt-controller, virt-api and virt-handler run; the APIService is Available."""
    def pods_ready() -> bool:
        pods = kube.list(resources.PODS, VM_NS)
        labels = {(p["metadata"].get("labels") or {}).get("kubevirt.io") for p in pods
                  if _ready(p)}
        return {"virt-controller", "virt-api", "virt-handler"} <= labels
    wait_for(pods_ready, timeout=timeout, what="VM side pods Ready")

    def available() -> bool:
        svc = kube.get_or_none(APISERVICES, "v1.subresources.kubevirt.io") or {}
        return any(c.get("type") == "Available" and c.get("status") == "True"
                   for c in (svc.get("status") or {}).get("conditions") or [])
    wait_for(available, timeout=timeout, what="APIService Available")
    wait_for(lambda: all((h.get("clientConfig") or {}).get("caBundle") for h in
                         kube.get(WEBHOOKS, "virt-api-validator")["webhooks"]),
             timeout=timeout, what="virt-api webhook caBundle")


def vm(name: str, url: str, *, strategy: str = "Always", size: str = "64Mi",
       storage_class: str | None = None) -> dict[str, Any]:
    storage: dict[str, Any] = {"resources": {"requests": {"storage": size}}}
    if storage_class:
        storage["storageClassName"] = storage_class
    return {
        "apiVersion": "kubevirt.io/v1", "kind": "VirtualMachine",
        "metadata": {"name": name},
        "spec": {
            "runStrategy": strategy,
            "dataVolumeTemplates": [{"metadata": {"name": f"{name}-root"},
                                     "spec": {"source": {"http": {"url": url}},
                                              "storage": storage}}],
            "template": {"spec": {
                "terminationGracePeriodSeconds": 5,
                "domain": {"resources": {"requests": {"memory": "64Mi"}},
                           "devices": {"disks": [{"name": "root", "bootOrder": 1,
                                                  "disk": {"bus": "virtio"}}]}},
                "volumes": [{"name": "root", "dataVolume": {"name": f"{name}-root"}}]}},
        },
    }


def root_vm(name: str, volume: dict[str, Any], *, memory: str = "64Mi") -> dict[str, Any]:
    """A VM (runStrategy Always) whose one disk, its root on virtio, is ``volume`` (the
    volume's source: ``{"ephemeral": ...}``, ``{"containerDisk": ...}``, ...)."""
    return {"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachine",
            "metadata": {"name": name},
            "spec": {"runStrategy": "Always", "template": {"spec": {
                "terminationGracePeriodSeconds": 5,
                "domain": {"resources": {"requests": {"memory": memory}},
                           "devices": {"disks": [{"name": "root", "bootOrder": 1,
                                                  "disk": {"bus": "virtio"}}]}},
                "volumes": [{"name": "root", **volume}]}}}}


def ephemeral_vm(name: str, claim: str, *, memory: str = "64Mi") -> dict[str, Any]:
    """A VM whose root is ``ephemeral`` over the claim ``claim``."""
    return root_vm(name, {"ephemeral": {"persistentVolumeClaim": {"claimName": claim}}},
                   memory=memory)


def printable(kube: Client, ns: str, name: str) -> str:
    return str(((kube.get_or_none(VMS, name, ns) or {}).get("status") or {}).get(
        "printableStatus") or "")


def wait_printable(kube: Client, ns: str, name: str, want: str | tuple[str, ...],
                   timeout: float = 300) -> str:
    wants = (want,) if isinstance(want, str) else want
    return str(wait_for(lambda: (s := printable(kube, ns, name)) in wants and s,
                        timeout=timeout, what=f"VM {ns}/{name} {wants} (now "
                        f"{printable(kube, ns, name)!r})"))


def vmi_uid(kube: Client, ns: str, name: str) -> str:
    return str(((kube.get_or_none(VMIS, name, ns) or {}).get("metadata") or {}).get("uid")
               or "")


def agent_uid(kube: Client, ns: str, name: str) -> str:
    """The uid of the VMI ``name`` while its guest agent is connected, else ""."""
    vmi = kube.get_or_none(VMIS, name, ns) or {}
    connected = any(c.get("type") == "AgentConnected" and c.get("status") == "True"
                    for c in (vmi.get("status") or {}).get("conditions") or [])
    return str((vmi.get("metadata") or {}).get("uid") or "") if connected else ""


def status_writes(kube: Client, ns: str, name: str, seconds: int) -> list[dict[str, Any]]:
    """The VMI ``name``'s status as each write in the next ``seconds`` left it (a watch from
    its current version, which the API server ends after ``seconds``). A VM whose guest
    does nothing leaves its VMI alone: two controllers that disagree on a field rewrite it
    against each other several times a second instead."""
    rv = kube.get(VMIS, name, ns)["metadata"]["resourceVersion"]
    return [dict((ev.get("object") or {}).get("status") or {})
            for ev in kube.watch(VMIS, namespace=ns, resource_version=rv, timeout=seconds,
                                 field_selector=f"metadata.name={name}")
            if ev.get("type") == "MODIFIED"]


def cli(cluster: Cluster, *argv: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "rootdisk", *argv,
                           "--kubeconfig", cluster.kubeconfig],
                          capture_output=True, text=True, timeout=timeout, check=False,
                          cwd=Path(__file__).resolve().parents[2],
                          env={**os.environ, "KUBECONFIG": "/nonexistent"})


def diagnose(kube: Client, ns: str) -> str:
    out = []
    for res in (VMS, VMIS, resources.PODS):
        for o in kube.list(res, ns):
            out.append(f"{res.plural}/{o['metadata']['name']}: "
                       f"{(o.get('status') or {}).get('phase') or ''} "
                       f"{(o.get('status') or {}).get('printableStatus') or ''} "
                       f"{(o.get('status') or {}).get('conditions')}")
    return "\n".join(out)
