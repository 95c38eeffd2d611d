"""Helpers for the DataVolume end-to-end tests: a `rootdisk up` cluster with the
project's own manifests (the CDI operator runs as a pod, with its own RBAC), objects,
waits, and the bytes of a filled volume."""

from __future__ import annotations

import base64
import os
import uuid
from typing import Any

import kubeclient
from kubeclient import Client, resources
from localcluster.cluster import Cluster
from tests.localcluster.clusterkit import events_for as events_for  # the e2e tests read it here
from tests.localcluster.clusterkit import try_logs, wait_for

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MANIFESTS = os.path.join(ROOT, "manifests")
DVS = kubeclient.Resource("cdi.kubevirt.io", "v1beta1", "datavolumes")
VIS = kubeclient.Resource("cdi.kubevirt.io", "v1beta1", "volumeimportsources")
CDICONFIGS = kubeclient.Resource("cdi.kubevirt.io", "v1beta1", "cdiconfigs", namespaced=False)
PROFILES = kubeclient.Resource("cdi.kubevirt.io", "v1beta1", "storageprofiles", namespaced=False)
WEBHOOKS = kubeclient.Resource("admissionregistration.k8s.io", "v1",
                           "validatingwebhookconfigurations", namespaced=False)
OPERATOR_NS = "rootdisk"


def operator_pods(kube: Client) -> list[dict[str, Any]]:
    items = kube.list(resources.PODS, OPERATOR_NS)
    return [p for p in items
            if (p["metadata"].get("labels") or {}).get("app.kubernetes.io/name")
            == "rootdisk-cdi-operator"]


def wait_operator_ready(kube: Client, timeout: float = 180) -> None:
    """The operator pod is Ready, it filled CDIConfig status and trusted its webhook."""
    def ready() -> bool:
        for pod in operator_pods(kube):
            conds = {c["type"]: c["status"] for c in (pod.get("status") or {}).get(
                "conditions") or []}
            if conds.get("Ready") == "True" and not pod["metadata"].get("deletionTimestamp"):
                return True
        return False
    wait_for(ready, timeout=timeout, what="CDI operator pod Ready")
    wait_for(lambda: all((h.get("clientConfig") or {}).get("caBundle") for h in
                         kube.get(WEBHOOKS, "rootdisk-cdi")["webhooks"]),
             timeout=timeout, what="webhook caBundle")
    wait_for(lambda: ((kube.get_or_none(CDICONFIGS, "config") or {}).get("status") or {}).get(
        "filesystemOverhead"), timeout=timeout, what="CDIConfig status")


def namespace(kube: Client, prefix: str = "dv") -> str:
    name = f"{prefix}-{uuid.uuid4().hex[:8]}"
    kube.create(resources.NAMESPACES, {"apiVersion": "v1", "kind": "Namespace",
                                    "metadata": {"name": name}})
    return name


def datavolume(name: str, source: dict[str, Any], *, size: str = "64Mi",
               storage: dict[str, Any] | None = None, pvc: dict[str, Any] | None = None,
               annotations: dict[str, str] | None = None, **spec: Any) -> dict[str, Any]:
    s: dict[str, Any] = {"source": source, **spec}
    if pvc is not None:
        s["pvc"] = pvc
    else:
        s["storage"] = {"resources": {"requests": {"storage": size}}, **(storage or {})}
    return {"apiVersion": "cdi.kubevirt.io/v1beta1", "kind": "DataVolume",
            "metadata": {"name": name, "annotations": annotations or {}}, "spec": s}


def secret(kube: Client, ns: str, name: str, data: dict[str, str]) -> None:
    kube.create(resources.SECRETS, {
        "apiVersion": "v1", "kind": "Secret", "metadata": {"name": name},
        "data": {k: base64.b64encode(v.encode()).decode() for k, v in data.items()}}, ns)


def dv_status(kube: Client, ns: str, name: str) -> dict[str, Any]:
    return dict((kube.get_or_none(DVS, name, ns) or {}).get("status") or {})


def wait_dv(kube: Client, ns: str, name: str, phases: tuple[str, ...],
            timeout: float = 120) -> dict[str, Any]:
    try:
        wait_for(lambda: dv_status(kube, ns, name).get("phase") in phases, timeout=timeout,
                 what=f"DataVolume {ns}/{name} phase in {phases}")
    except AssertionError as err:
        raise AssertionError(f"{err}\n{diagnose(kube, ns)}") from None
    return dv_status(kube, ns, name)


def diagnose(kube: Client, ns: str) -> str:
    """What a failed wait shows: DataVolumes, claims, pods, and the operator's log tail."""
    lines = []
    for dv in kube.list(DVS, ns):
        lines.append(f"DV {dv['metadata']['name']}: {dv.get('status')}")
    for pvc in kube.list(resources.PVCS, ns):
        lines.append(f"PVC {pvc['metadata']['name']}: {pvc.get('status', {}).get('phase')} "
                     f"{pvc['metadata'].get('annotations')}")
    for pod in kube.list(resources.PODS, ns):
        lines.append(f"pod {pod['metadata']['name']}: {pod.get('status')}")
    for pod in operator_pods(kube):
        log = try_logs(kube, pod["metadata"]["name"], OPERATOR_NS)[-6000:]
        lines.append(f"operator {pod['metadata']['name']} log:\n{log}")
    return "\n".join(lines)


def condition(status: dict[str, Any], ctype: str) -> dict[str, Any]:
    return next(c for c in status.get("conditions") or [] if c["type"] == ctype)


def volume_path(kube: Client, claim: dict[str, Any]) -> str:
    """Where the claim's bytes are on this host: disk.img, or the loop device."""
    pv = kube.get(resources.PVS, claim["spec"]["volumeName"])
    path = str(pv["spec"]["local"]["path"])
    if pv["spec"].get("volumeMode") == "Filesystem":
        return os.path.join(path, "disk.img")
    return os.path.realpath(path)


def volume_apart(kube: Client, ns: str, name: str) -> None:
    """Give the volume of claim ``ns/name`` a ``nodeAffinity`` no volume provisioned here
    has (its node, or one that does not exist): what a volume on another node is to a
    host-assisted clone's placement, which then streams between two pods, as it must
    where no node reaches both volumes. This cluster has one node and its scheduler does
    not read volumes' affinity, so nothing else changes."""
    pv = kube.get(resources.PVS, kube.get(resources.PVCS, name, ns)["spec"]["volumeName"])
    expr = pv["spec"]["nodeAffinity"]["required"]["nodeSelectorTerms"][0][
        "matchExpressions"][0]
    kube.patch(resources.PVS, pv["metadata"]["name"], {"spec": {"nodeAffinity": {
        "required": {"nodeSelectorTerms": [{"matchExpressions": [
            {**expr, "values": [*expr["values"], "elsewhere.invalid"]}]}]}}}})


def pod_resources(kube: Client, requirements: dict[str, Any] | None) -> None:
    """CDIConfig ``spec.podResourceRequirements`` set (None: upstream's defaults), once
    its controller has put them in the status the populators read: a DataVolume made
    before that would get pods with the old ones."""
    from cdi.config import DEFAULT_POD_RESOURCES

    kube.patch(CDICONFIGS, "config", {"spec": {"podResourceRequirements": requirements}})
    want = requirements or DEFAULT_POD_RESOURCES
    wait_for(lambda: ((kube.get(CDICONFIGS, "config").get("status") or {}).get(
        "defaultPodResourceRequirements") == want), timeout=30,
        what="CDIConfig's status with the new pod resources")


def cluster_kube(cluster: Cluster) -> Client:
    assert cluster.kube is not None
    return cluster.kube


def consumer_pod(name: str, claim: str) -> dict[str, Any]:
    """A pod that uses ``claim`` (a WaitForFirstConsumer claim binds once it is scheduled)."""
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"restartPolicy": "Never",
                     "containers": [{"name": "main", "image": "rootdisk/testbox:test",
                                     "args": ["sleep", "600"],
                                     "volumeMounts": [{"name": "d", "mountPath": "/data"}]}],
                     "volumes": [{"name": "d", "persistentVolumeClaim": {"claimName": claim}}]}}


def leftovers(kube: Client, ns: str) -> list[str]:
    """Every claim, pod and VolumeImportSource still in ``ns``."""
    out = []
    for res in (resources.PVCS, resources.PODS, VIS):
        out += [f"{res.plural}/{o['metadata']['name']}" for o in kube.list(res, ns)]
    return out
