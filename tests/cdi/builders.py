"""DataVolume, claim and class builders for the CDI table tests."""

from __future__ import annotations

import copy
from typing import Any

LOCAL = "local.localcluster.rootdisk.io"


def dv(name: str = "disk", *, storage: dict[str, Any] | None = None,
       pvc: dict[str, Any] | None = None, source: dict[str, Any] | None = None,
       annotations: dict[str, str] | None = None, labels: dict[str, str] | None = None,
       status: dict[str, Any] | None = None, **spec: Any) -> dict[str, Any]:
    s: dict[str, Any] = {"source": source if source is not None
                         else {"http": {"url": "http://127.0.0.1:8080/disk.qcow2"}}, **spec}
    if storage is not None:
        s["storage"] = storage
    if pvc is not None:
        s["pvc"] = pvc
    obj: dict[str, Any] = {
        "apiVersion": "cdi.kubevirt.io/v1beta1", "kind": "DataVolume",
        "metadata": {"name": name, "namespace": "ns", "uid": "dv-uid",
                     "labels": labels or {}, "annotations": annotations or {}},
        "spec": s}
    if status is not None:
        obj["status"] = status
    return obj


def sc(name: str = "local", *, provisioner: str = LOCAL, binding: str = "Immediate",
       annotations: dict[str, str] | None = None) -> dict[str, Any]:
    return {"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
            "metadata": {"name": name, "annotations": annotations or {}},
            "provisioner": provisioner, "volumeBindingMode": binding}


def claim(name: str = "disk", *, phase: str = "Pending", anns: dict[str, str] | None = None,
          populator: bool = True) -> dict[str, Any]:
    spec: dict[str, Any] = {"accessModes": ["ReadWriteOnce"], "storageClassName": "local"}
    if populator:
        spec["dataSourceRef"] = {"apiGroup": "cdi.kubevirt.io", "kind": "VolumeImportSource",
                                 "name": "volume-import-source-dv-uid"}
    return {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
            "metadata": {"name": name, "namespace": "ns", "annotations": dict(anns or {})},
            "spec": spec, "status": {"phase": phase}}


def with_(obj: dict[str, Any], **changes: Any) -> dict[str, Any]:
    out = copy.deepcopy(obj)
    out.update(changes)
    return out
