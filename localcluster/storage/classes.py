"""The StorageClasses and CSIDriver the local provisioner serves (pure data).

Filesystem overhead, measured here on loop-mounted volumes made with the provisioner's
mkfs options (``mkfs.ext4 -m 0 -O ^has_journal -T largefile``), as 1 - df-avail/size:

    64 MiB 2.1%   128 MiB 2.1%   256 MiB 2.1%   512 MiB 2.2%
    1 GiB  1.8%   2 GiB   1.1%   5 GiB   0.7%   10 GiB  0.5%

So every class advertises :data:`FILESYSTEM_OVERHEAD` (3%, a bound with a margin) in the
annotation :data:`OVERHEAD_ANNOTATION`, for CDI's per-class filesystemOverhead; the
volume tests check that the bound holds. Block volumes have no overhead.

``local-reflink`` binds Immediately: its main use is being a clone source and target, and
a golden image is imported before any consumer exists.
"""

from __future__ import annotations

from typing import Any

from localcluster.kube.claims import DEFAULT_CLASS

PROVISIONER = "local.localcluster.rootdisk.io"
"""Also the CSIDriver's name, so it must be a DNS subdomain (no slash)."""
OVERHEAD_ANNOTATION = "localcluster.rootdisk.io/filesystem-overhead"
FILESYSTEM_OVERHEAD = "0.03"
POOL_PARAMETER = "pool"

LOCAL = "local"
LOCAL_IMMEDIATE = "local-immediate"
LOCAL_REFLINK = "local-reflink"


def _storage_class(name: str, *, binding: str, pool: str, default: bool) -> dict[str, Any]:
    annotations = {OVERHEAD_ANNOTATION: FILESYSTEM_OVERHEAD}
    if default:
        annotations[DEFAULT_CLASS] = "true"
    return {
        "apiVersion": "storage.k8s.io/v1",
        "kind": "StorageClass",
        "metadata": {"name": name, "annotations": annotations},
        "provisioner": PROVISIONER,
        "parameters": {POOL_PARAMETER: pool},
        "reclaimPolicy": "Delete",
        "volumeBindingMode": binding,
        "allowVolumeExpansion": True,
    }


def storage_classes() -> list[dict[str, Any]]:
    return [
        _storage_class(LOCAL, binding="WaitForFirstConsumer", pool="standard", default=True),
        _storage_class(LOCAL_IMMEDIATE, binding="Immediate", pool="standard", default=False),
        _storage_class(LOCAL_REFLINK, binding="Immediate", pool="reflink", default=False),
    ]


def csi_driver() -> dict[str, Any]:
    """Named after the provisioner: CDI uses volume populators only when it exists."""
    return {
        "apiVersion": "storage.k8s.io/v1",
        "kind": "CSIDriver",
        "metadata": {"name": PROVISIONER},
        "spec": {
            "attachRequired": False,
            "podInfoOnMount": False,
            "volumeLifecycleModes": ["Persistent"],
        },
    }
