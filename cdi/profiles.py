"""StorageProfiles: what a StorageClass can do, for completing ``spec.storage`` (pure).

One StorageProfile per StorageClass, named like it. Its status comes from its ``spec``
where an administrator filled it in, else from a table of known provisioners, as
upstream CDI's capabilities table. A class whose provisioner is unknown gets a profile
without claim property sets: a DataVolume using ``spec.storage`` on it must then name
its access modes itself.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from vocab import cdi as api

RWO, RWX, ROX = "ReadWriteOnce", "ReadWriteMany", "ReadOnlyMany"
FS, BLOCK = "Filesystem", "Block"


@dataclass(frozen=True)
class Capabilities:
    claim_property_sets: tuple[tuple[str, str], ...]  # (access mode, volume mode), preferred first
    clone_strategy: str | None = None


CAPABILITIES: Mapping[str, Capabilities] = {
    # localcluster's own provisioner: ext4 image files and loop devices on one node
    "local.localcluster.rootdisk.io": Capabilities(((RWO, FS), (RWO, BLOCK)), "csi-clone"),
    "rbd.csi.ceph.com": Capabilities(((RWX, BLOCK), (RWO, BLOCK), (RWO, FS)), "csi-clone"),
    "openshift-storage.rbd.csi.ceph.com": Capabilities(((RWX, BLOCK), (RWO, BLOCK), (RWO, FS)),
                                                       "csi-clone"),
    "cephfs.csi.ceph.com": Capabilities(((RWX, FS),), "csi-clone"),
    "openshift-storage.cephfs.csi.ceph.com": Capabilities(((RWX, FS),), "csi-clone"),
    "ebs.csi.aws.com": Capabilities(((RWO, BLOCK), (RWO, FS)), "snapshot"),
    "pd.csi.storage.gke.io": Capabilities(((RWO, BLOCK), (RWO, FS)), "snapshot"),
    "disk.csi.azure.com": Capabilities(((RWO, BLOCK), (RWO, FS)), "csi-clone"),
    "file.csi.azure.com": Capabilities(((RWX, FS),), "copy"),
    "csi.vsphere.vmware.com": Capabilities(((RWO, FS),), "copy"),
    "driver.longhorn.io": Capabilities(((RWX, BLOCK), (RWO, FS), (RWO, BLOCK)), "csi-clone"),
    "topolvm.io": Capabilities(((RWO, BLOCK), (RWO, FS)), "snapshot"),
    "hostpath.csi.k8s.io": Capabilities(((RWO, FS), (RWO, BLOCK)), "snapshot"),
    "kubevirt.io.hostpath-provisioner": Capabilities(((RWO, FS),), "snapshot"),
    "rancher.io/local-path": Capabilities(((RWO, FS),), "copy"),
    "nfs.csi.k8s.io": Capabilities(((RWX, FS),), "copy"),
    "csi.trident.netapp.io": Capabilities(((RWX, FS), (RWO, FS)), "csi-clone"),
}


MINIMUM_PVC_SIZE: Mapping[str, str] = {
    # Volumes these refuse below a size (the claim would stay Pending for ever), keyed as
    # upstream keys them: the provisioner, narrowed by the class's disk type.
    "ebs.csi.aws.com/io1": "4Gi",
    "ebs.csi.aws.com/io2": "4Gi",
    "ebs.csi.aws.com/gp": "1Gi",
    "pd.csi.storage.gke.io/hyperdisk": "4Gi",
}
"""Upstream's minimum supported sizes (AWS io1/io2 and gp2/gp3, GCE Hyperdisk Balanced)."""

_DISK_TYPES: Mapping[str, Mapping[str, str]] = {
    "ebs.csi.aws.com": {"io1": "io1", "io2": "io2", "gp2": "gp", "gp3": "gp"},
    "pd.csi.storage.gke.io": {"hyperdisk-balanced": "hyperdisk",
                              "hyperdisk-balanced-high-availability": "hyperdisk"},
}


def provisioner_key(storage_class: Mapping[str, Any]) -> str:
    """The provisioner, or ``provisioner/<kind>`` where the class's ``type`` parameter
    picks a disk kind with limits of its own (EBS io1/io2/gp, GCE Hyperdisk)."""
    provisioner = str(storage_class.get("provisioner") or "")
    kinds = _DISK_TYPES.get(provisioner)
    disk = str((storage_class.get("parameters") or {}).get("type") or "")
    if kinds and disk in kinds:
        return f"{provisioner}/{kinds[disk]}"
    return provisioner


def compute_status(
    *, storage_class: Mapping[str, Any], spec: Mapping[str, Any] | None,
) -> dict[str, Any]:
    """The StorageProfile status for ``storage_class`` with the profile's ``spec``."""
    spec = spec or {}
    provisioner = str(storage_class.get("provisioner") or "")
    caps = CAPABILITIES.get(provisioner)
    spec_sets = [s for s in spec.get("claimPropertySets") or []
                 if s.get("accessModes") and s.get("volumeMode")]
    if spec_sets:
        sets = [{"accessModes": list(s["accessModes"]), "volumeMode": s["volumeMode"]}
                for s in spec_sets]
    elif caps:
        sets = [{"accessModes": [mode], "volumeMode": vm} for mode, vm in caps.claim_property_sets]
    else:
        sets = []
    annotations = (storage_class.get("metadata") or {}).get("annotations") or {}
    strategy = (spec.get("cloneStrategy") or annotations.get(api.CLONE_STRATEGY_ANN)
                or (caps.clone_strategy if caps else None) or "copy")
    status: dict[str, Any] = {
        "storageClass": (storage_class.get("metadata") or {}).get("name"),
        "provisioner": provisioner,
        "claimPropertySets": sets,
        "cloneStrategy": strategy,
        "dataImportCronSourceFormat": spec.get("dataImportCronSourceFormat") or "pvc",
    }
    if spec.get("snapshotClass"):
        status["snapshotClass"] = spec["snapshotClass"]
    return status


def minimum_size_annotation(*, storage_class: Mapping[str, Any],
                            annotations: Mapping[str, str]) -> str | None:
    """The minimum PVC size annotation to add to a profile: from the table, unless the
    profile has one already (an administrator's value is kept)."""
    if api.MINIMUM_PVC_SIZE in annotations:
        return None
    return MINIMUM_PVC_SIZE.get(provisioner_key(storage_class))
