"""The launcher pod of a VMI (upstream's ``renderLaunchManifest``), and the temporary pod
that makes WaitForFirstConsumer claims bind.

The pod runs ``rootdisk/launcher`` as uid/gid 107 with fsGroup 107, no capabilities, no
privilege escalation, no service-account token and ``restartPolicy: Never``. Its
``VMI`` variable is the VMI (name, namespace, uid, spec); ``LAUNCHER_DRIVER`` and
``USE_EMULATION`` come from the KubeVirt configuration. Disks: a Filesystem claim is
mounted at ``/var/run/kubevirt-private/vmi-disks/<volume>`` (the launcher uses
``disk.img`` there), a Block claim is the device ``/dev/<volume>``. The control socket
directory ``/var/run/kubevirt/sockets`` is the VMI's own directory on the node,
``/var/run/kubevirt/sockets/<vmi uid>`` (hostPath, made by the node handler: the pod
waits for it), where the handler finds ``<vmi uid>.sock``; no other VMI's socket is in
the pod's reach (see docs/vm.md). The grace period is the VMI's + 30 s, as upstream.
Secrets for cloud-init and SSH keys are Secret volumes (``vm.vmi.secret_volumes``): their
content is never in the pod spec (the ``VMI`` variable holds only their names).
"""

from __future__ import annotations

import json
import posixpath
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from vm.domain.probes import PROBES, container_probe
from vm.vmi.claims import ClaimView, DiskClaim
from vm.vmi.overhead import pod_resources
from vm.vmi.secret_volumes import render as render_secrets
from vocab import kubevirt as names

PRIVATE = "/var/run/kubevirt-private"
PUBLIC = "/var/run/kubevirt"
SOCKETS = "/var/run/kubevirt/sockets"
HOST_SOCKETS = "/var/run/kubevirt/sockets"
LIBVIRT = "/var/run/libvirt"
EPHEMERAL = "/var/run/kubevirt-ephemeral-disks"
IMAGE_VOLUMES = "/var/run/kubevirt-image-volume"
"""Where each containerDisk's image volume is mounted (``disk_<volume index>``), as
upstream's ImageVolume feature gate mounts them."""
CONSOLE_LOG = f"{PRIVATE}/console.log"
DISKS = f"{PRIVATE}/vmi-disks"
DEFAULT_GRACE = 30
GRACE_EXTRA = 30


@dataclass(frozen=True)
class LauncherConfig:
    image: str = names.LAUNCHER_IMAGE
    driver: str = "qemu"
    emulation: bool = True
    overhead_ratio: str | None = None
    memory_overcommit: int = 100
    """``developerConfiguration.memoryOvercommit``: percent of the guest's memory a VMI
    without a memory request or limit is given as request."""
    host_sockets: str = HOST_SOCKETS
    unprivileged_start: int = 1024
    """The node's ``net.ipv4.ip_unprivileged_port_start``: a probed guest port below it
    is where the launcher took it (``podnet.node_port``)."""


CONSOLE_LOG_CPU_LIMIT = "100m"


def grace_seconds(spec: Mapping[str, Any]) -> int:
    value = spec.get("terminationGracePeriodSeconds")
    return DEFAULT_GRACE if value is None else max(0, int(value))


# the annotations the launcher reads (cloud-init meta-data's instance type)
ENV_ANNOTATIONS = (names.ANN_CLUSTER_INSTANCETYPE, names.ANN_INSTANCETYPE)


def vmi_env(vmi: Mapping[str, Any]) -> str:
    meta = vmi.get("metadata") or {}
    out = {k: meta[k] for k in ("name", "namespace", "uid") if k in meta}
    annotations = {k: v for k, v in (meta.get("annotations") or {}).items()
                   if k in ENV_ANNOTATIONS}
    if annotations:
        out["annotations"] = annotations
    return json.dumps({
        "apiVersion": names.API_VERSION, "kind": names.VMI_KIND,
        "metadata": out,
        "spec": vmi.get("spec") or {},
    }, separators=(",", ":"), sort_keys=True)


def _owner(vmi: Mapping[str, Any]) -> dict[str, Any]:
    meta = vmi["metadata"]
    return {"apiVersion": names.API_VERSION, "kind": names.VMI_KIND, "name": meta["name"],
            "uid": meta["uid"], "controller": True, "blockOwnerDeletion": True}


CONTAINER_SECURITY: dict[str, Any] = {
    "runAsUser": names.LAUNCHER_UID, "runAsGroup": names.LAUNCHER_UID, "runAsNonRoot": True,
    "allowPrivilegeEscalation": False, "privileged": False,
    "capabilities": {"drop": ["ALL"]},
}


def launcher_pod(*, vmi: Mapping[str, Any], claims: list[DiskClaim],
                 views: Mapping[str, ClaimView], config: LauncherConfig) -> dict[str, Any]:
    meta = vmi["metadata"]
    spec = vmi.get("spec") or {}
    name = str(meta["name"])
    res = pod_resources(spec, ratio=config.overhead_ratio, kvm=not config.emulation,
                        overcommit=config.memory_overcommit)
    # this VMI's directory alone: no other launcher's socket is in the pod's reach
    own_sockets = posixpath.join(config.host_sockets, str(meta["uid"]))
    mounts: list[dict[str, Any]] = [
        {"name": "private", "mountPath": PRIVATE},
        {"name": "public", "mountPath": PUBLIC},
        {"name": "sockets", "mountPath": SOCKETS},
        {"name": "libvirt-runtime", "mountPath": LIBVIRT},
        {"name": "ephemeral-disks", "mountPath": EPHEMERAL},
    ]
    devices: list[dict[str, Any]] = []
    volumes: list[dict[str, Any]] = [
        {"name": "private", "emptyDir": {}},
        {"name": "public", "emptyDir": {}},
        {"name": "sockets", "hostPath": {"path": own_sockets, "type": "Directory"}},
        {"name": "libvirt-runtime", "emptyDir": {}},
        {"name": "ephemeral-disks", "emptyDir": {}},
    ]
    if any((views.get(c.claim) or ClaimView(exists=True)).volume_mode != "Block"
           for c in claims):
        # its own emptyDir, so the directory holding the mount points is the volume's
        # (group-writable, fsGroup) and not one the runtime makes for the nested mounts
        # (localcluster's is root-only, so uid 107 could not reach the disks)
        mounts.append({"name": "vmi-disks", "mountPath": DISKS})
        volumes.append({"name": "vmi-disks", "emptyDir": {}})
    for c in claims:
        view = views.get(c.claim)
        volumes.append({"name": c.volume, "persistentVolumeClaim": {
            "claimName": c.claim, "readOnly": c.read_only}})
        if view is not None and view.volume_mode == "Block":
            devices.append({"name": c.volume, "devicePath": f"/dev/{c.volume}"})
        else:
            mounts.append({"name": c.volume, "mountPath": f"{DISKS}/{c.volume}",
                           "readOnly": c.read_only})
    secret_vols, secret_mounts = render_secrets(spec)
    volumes += secret_vols
    mounts += secret_mounts
    pull_secrets: list[dict[str, str]] = []
    for index, vol in enumerate(spec.get("volumes") or []):
        disk = vol.get("containerDisk") if isinstance(vol, Mapping) else None
        if not isinstance(disk, Mapping):
            continue
        image: dict[str, Any] = {"reference": str(disk.get("image") or "")}
        if disk.get("imagePullPolicy"):
            image["pullPolicy"] = disk["imagePullPolicy"]
        volumes.append({"name": vol["name"], "image": image})
        mounts.append({"name": vol["name"], "mountPath": f"{IMAGE_VOLUMES}/disk_{index}",
                       "readOnly": True})
        secret = disk.get("imagePullSecret")
        if secret and {"name": secret} not in pull_secrets:
            pull_secrets.append({"name": str(secret)})
    compute: dict[str, Any] = {
        "name": "compute",
        "image": config.image,
        "env": [
            {"name": "VMI", "value": vmi_env(vmi)},
            {"name": "LAUNCHER_DRIVER", "value": config.driver},
            {"name": "USE_EMULATION", "value": "true" if config.emulation else "false"},
            {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
        ],
        "resources": {"requests": res.requests, **({"limits": res.limits} if res.limits else {})},
        "securityContext": dict(CONTAINER_SECURITY),
        "volumeMounts": mounts,
        "terminationMessagePath": "/dev/termination-log",
        "terminationMessagePolicy": "File",
    }
    if devices:
        compute["volumeDevices"] = devices
    control_socket = posixpath.join(SOCKETS, f"{meta['uid']}.sock")
    for key in PROBES:
        if isinstance(spec.get(key), Mapping):
            compute[key] = container_probe(spec[key], socket=control_socket,
                                           unprivileged_start=config.unprivileged_start)
    console_log: dict[str, Any] = {
        "name": "guest-console-log",
        "image": config.image,
        "command": ["python", "-m", "vm.launcher.console_log", CONSOLE_LOG],
        # upstream limits its (Go) sidecar to 15m; a Python one needs ~40 ms of CPU to
        # start, which 15m stretched to seconds: the console log lagged the guest
        "resources": {"requests": {"cpu": "5m", "memory": "35M"},
                      "limits": {"cpu": CONSOLE_LOG_CPU_LIMIT, "memory": "60M"}},
        "securityContext": dict(CONTAINER_SECURITY),
        "volumeMounts": [{"name": "private", "mountPath": PRIVATE, "readOnly": True}],
    }
    pod_spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "terminationGracePeriodSeconds": grace_seconds(spec) + GRACE_EXTRA,
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "securityContext": {"runAsUser": names.LAUNCHER_UID, "runAsGroup": names.LAUNCHER_UID,
                            "fsGroup": names.LAUNCHER_UID, "runAsNonRoot": True},
        "containers": [compute, console_log],
        "volumes": volumes,
    }
    if pull_secrets:
        pod_spec["imagePullSecrets"] = pull_secrets
    for key in ("nodeSelector", "affinity", "tolerations", "schedulerName",
                "priorityClassName", "hostname", "subdomain", "dnsConfig", "dnsPolicy"):
        if spec.get(key):
            pod_spec[key] = spec[key]
    labels = {k: v for k, v in ((meta.get("labels") or {}).items())}
    labels.update({names.LABEL_APP: "virt-launcher", names.LABEL_CREATED_BY: str(meta["uid"]),
                   names.LABEL_VM_NAME: name, names.LABEL_VMI_ID: names.vmi_id_label(name)})
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {
            "generateName": f"virt-launcher-{name}-",
            "namespace": meta["namespace"],
            "labels": labels,
            "annotations": {names.ANN_DOMAIN: name,
                            "kubectl.kubernetes.io/default-container": "compute"},
            "ownerReferences": [_owner(vmi)],
        },
        "spec": pod_spec,
    }


def binding_pod(*, vmi: Mapping[str, Any], claims: list[DiskClaim],
                image: str = names.LAUNCHER_IMAGE) -> dict[str, Any]:
    """Upstream's temporary pod: it only mounts the claims, so the scheduler binds them."""
    meta = vmi["metadata"]
    spec = vmi.get("spec") or {}
    pod_spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "automountServiceAccountToken": False,
        "securityContext": {"runAsUser": names.LAUNCHER_UID, "runAsGroup": names.LAUNCHER_UID,
                            "fsGroup": names.LAUNCHER_UID, "runAsNonRoot": True},
        "containers": [{
            "name": "compute", "image": image,
            "command": ["/bin/sh", "-c", "echo bound PVCs"],
            "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}},
            "securityContext": dict(CONTAINER_SECURITY),
        }],
        "volumes": [{"name": c.volume, "persistentVolumeClaim": {"claimName": c.claim}}
                    for c in claims],
    }
    for key in ("nodeSelector", "affinity", "tolerations", "schedulerName"):
        if spec.get(key):
            pod_spec[key] = spec[key]
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {
            "generateName": f"virt-launcher-{meta['name']}-",
            "namespace": meta["namespace"],
            "labels": {names.LABEL_APP: "virt-launcher", names.LABEL_CREATED_BY: str(meta["uid"])},
            "annotations": {names.ANN_EPHEMERAL_PROVISIONING: "true"},
            "ownerReferences": [_owner(vmi)],
        },
        "spec": pod_spec,
    }
