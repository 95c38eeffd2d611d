"""Pure per-kind defaults that kube-apiserver applies, so clients see familiar objects.

Only what the project's clients read back: a new Pod is Pending with a service account
and a restart policy; claims and volumes start Pending; namespaces carry the
``kubernetes`` finalizer; a Secret's ``stringData`` is folded into ``data``.
"""

from __future__ import annotations

import base64
from typing import Any

from . import bindings

Obj = dict[str, Any]


def _containers(spec: Obj) -> list[Obj]:
    out: list[Obj] = []
    for key in ("initContainers", "containers"):
        out += [c for c in spec.get(key) or [] if isinstance(c, dict)]
    return out


def on_create(kind: str, obj: Obj, *, keep_status: bool) -> None:
    """Fill defaults in place on a new object (``keep_status``: status was allowed)."""
    if kind == "Namespace":
        obj.setdefault("spec", {}).setdefault("finalizers", ["kubernetes"])
        obj["status"] = {"phase": "Active"}
    elif kind == "Pod":
        spec = obj.setdefault("spec", {})
        spec.setdefault("restartPolicy", "Always")
        spec.setdefault("terminationGracePeriodSeconds", 30)
        spec.setdefault("dnsPolicy", "ClusterFirst")
        spec.setdefault("schedulerName", "default-scheduler")
        spec.setdefault("serviceAccountName", spec.get("serviceAccount") or "default")
        spec.setdefault("serviceAccount", spec["serviceAccountName"])
        spec.setdefault("securityContext", {})
        for c in _containers(spec):
            image = str(c.get("image", ""))
            latest = ":" not in image.rsplit("/", 1)[-1] or image.endswith(":latest")
            c.setdefault("imagePullPolicy", "Always" if latest else "IfNotPresent")
            c.setdefault("terminationMessagePath", "/dev/termination-log")
            c.setdefault("terminationMessagePolicy", "File")
            c.setdefault("resources", {})
        if not keep_status:
            obj["status"] = {"phase": "Pending", "qosClass": "BestEffort"}
    elif kind == "PersistentVolumeClaim":
        obj.setdefault("spec", {}).setdefault("volumeMode", "Filesystem")
        if not keep_status:
            obj["status"] = {"phase": "Pending"}
    elif kind == "PersistentVolume":
        spec = obj.setdefault("spec", {})
        spec.setdefault("persistentVolumeReclaimPolicy", "Retain")
        spec.setdefault("volumeMode", "Filesystem")
        if not keep_status:
            obj["status"] = {"phase": "Pending"}
    elif kind == "Service":
        spec = obj.setdefault("spec", {})
        spec.setdefault("type", "ClusterIP")
        spec.setdefault("sessionAffinity", "None")
        for port in spec.get("ports") or []:
            if isinstance(port, dict):
                port.setdefault("protocol", "TCP")
                port.setdefault("targetPort", port.get("port"))
        if not keep_status:
            obj["status"] = {"loadBalancer": {}}
    elif kind == "StorageClass":
        obj.setdefault("reclaimPolicy", "Delete")
        obj.setdefault("volumeBindingMode", "Immediate")
    elif kind in ("Deployment", "DaemonSet"):
        spec = obj.setdefault("spec", {})
        if kind == "Deployment":
            spec.setdefault("replicas", 1)
        spec.setdefault("revisionHistoryLimit", 10)
        if not keep_status:
            obj["status"] = {}
    elif kind == "Secret":
        obj.setdefault("type", "Opaque")
    normalize(kind, obj)


def normalize(kind: str, obj: Obj) -> None:
    """Applied on every write: write-only fields folded into stored ones; a Namespace
    always carries ``kubernetes.io/metadata.name`` (webhooks select namespaces by it); a
    binding's roleRef and subjects get their default apiGroup."""
    if kind == "Namespace":
        meta = obj.setdefault("metadata", {})
        if meta.get("name"):
            labels = meta.get("labels") or {}
            labels["kubernetes.io/metadata.name"] = meta["name"]
            meta["labels"] = labels
    if kind in bindings.BINDING_KINDS:
        bindings.set_defaults(obj)
    if kind == "Secret" and isinstance(obj.get("stringData"), dict):
        data = obj.setdefault("data", {}) or {}
        for key, value in obj.pop("stringData").items():
            data[key] = base64.b64encode(str(value).encode()).decode()
        obj["data"] = data


DEFAULT_CLASS_ANNOTATION = "storageclass.kubernetes.io/is-default-class"


def default_storage_class(classes: list[Obj]) -> str | None:
    """The class a claim without ``storageClassName`` gets, as kube-apiserver's
    DefaultStorageClass admission picks it: one annotated as the default; the newest
    when several are (then by name, for a stable answer)."""
    defaults = [
        c for c in classes
        if (c.get("metadata", {}).get("annotations") or {}).get(DEFAULT_CLASS_ANNOTATION)
        == "true"
    ]
    if not defaults:
        return None
    newest = max(defaults, key=lambda c: (c["metadata"].get("creationTimestamp", ""),
                                          c["metadata"].get("name", "")))
    name: str = newest["metadata"]["name"]
    return name
