"""Pure validation of built-in kinds: the required fields a real cluster insists on.

Custom resources are validated by their CRD schema (``schema/``); built-in kinds have
no schema here, so the checks that catch real mistakes -- a Pod without containers or
images, a claim without access modes or size, a workload whose template does not match
its selector, bad ConfigMap keys, a binding's roleRef and subjects (``bindings``) -- are
written out, with kube-apiserver's field paths and wording. Anything a real cluster
accepts is accepted.

Pod volume names are checked as upstream checks them (DNS-1123 labels, unique, and every
volumeMount and volumeDevice naming one of them): the kubelet makes a directory or a
device node of each name under the pod's directory, as root, so a name such as
``../../etc/x`` must never reach it.
"""

from __future__ import annotations

import re
from typing import Any

from ..errors import Cause, required
from ..selectors import SelectorError, label_selector_from_dict
from . import bindings
from .meta import name_error

Obj = dict[str, Any]

_KEY = re.compile(r"[-._a-zA-Z0-9]+")
_RESTART_POLICIES = ("Always", "OnFailure", "Never")


def _volumes(spec: Obj, path: str, causes: list[Cause]) -> dict[str, bool]:
    """Check ``volumes[*].name`` as upstream's ValidateVolumes: required, a DNS-1123 label
    (the kubelet makes a directory or a device node of that name), unique. Returns the
    valid names, each with whether a block device may use it (a claim or an ephemeral
    volume)."""
    names: dict[str, bool] = {}
    volumes = spec.get("volumes")
    for i, vol in enumerate(volumes if isinstance(volumes, list) else []):
        where = f"{path}.volumes[{i}].name"
        name = vol.get("name") if isinstance(vol, dict) else None
        if not name:
            causes.append(required(where))
        elif not isinstance(name, str) or name_error(name, label=True):
            causes.append(Cause("FieldValueInvalid", f'Invalid value: "{name}": '
                                f"{name_error(str(name), label=True)}", where))
        elif name in names:
            causes.append(Cause("FieldValueDuplicate", f'Duplicate value: "{name}"', where))
        else:
            names[name] = "persistentVolumeClaim" in vol or "ephemeral" in vol
    return names


def _volume_refs(c: Obj, where: str, volumes: dict[str, bool], causes: list[Cause]) -> None:
    """A container's volumeMounts and volumeDevices name volumes of the pod (upstream's
    ValidateVolumeMounts and ValidateVolumeDevices)."""
    for key in ("volumeMounts", "volumeDevices"):
        refs = c.get(key)
        for j, ref in enumerate(refs if isinstance(refs, list) else []):
            at = f"{where}.{key}[{j}].name"
            name = ref.get("name") if isinstance(ref, dict) else None
            if not name:
                causes.append(required(at))
            if not isinstance(name, str) or name not in volumes:
                causes.append(Cause("FieldValueNotFound", f'Not found: "{name or ""}"', at))
            elif key == "volumeDevices" and not volumes[name]:
                causes.append(Cause("FieldValueInvalid", f'Invalid value: "{name}": can only '
                                    "use volume source type of PersistentVolumeClaim or "
                                    "Ephemeral for block mode", at))


def _pod_spec(spec: Any, path: str) -> list[Cause]:
    if not isinstance(spec, dict):
        return [required(path)]
    causes: list[Cause] = []
    volumes = _volumes(spec, path, causes)
    containers = spec.get("containers")
    if not isinstance(containers, list) or not containers:
        causes.append(required(f"{path}.containers"))
        containers = []
    seen: set[str] = set()
    for key, items in (("initContainers", spec.get("initContainers") or []),
                       ("containers", containers)):
        for i, c in enumerate(items if isinstance(items, list) else []):
            where = f"{path}.{key}[{i}]"
            if not isinstance(c, dict):
                causes.append(Cause("FieldValueInvalid", "Invalid value: must be an object",
                                    where))
                continue
            name = c.get("name")
            if not name:
                causes.append(required(f"{where}.name"))
            elif not isinstance(name, str) or name_error(name, label=True):
                causes.append(Cause("FieldValueInvalid", f'Invalid value: "{name}": '
                                    f"{name_error(str(name), label=True)}", f"{where}.name"))
            elif name in seen:
                causes.append(Cause("FieldValueDuplicate", f'Duplicate value: "{name}"',
                                    f"{where}.name"))
            else:
                seen.add(name)
            if not c.get("image"):
                causes.append(required(f"{where}.image"))
            _volume_refs(c, where, volumes, causes)
    policy = spec.get("restartPolicy")
    if policy is not None and policy not in _RESTART_POLICIES:
        causes.append(Cause("FieldValueNotSupported", f'Unsupported value: "{policy}": '
                            'supported values: "Always", "OnFailure", "Never"',
                            f"{path}.restartPolicy"))
    return causes


def _workload(obj: Obj) -> list[Cause]:
    spec = obj.get("spec") or {}
    selector = spec.get("selector")
    if not isinstance(selector, dict) or not (selector.get("matchLabels")
                                              or selector.get("matchExpressions")):
        return [required("spec.selector")]
    template = spec.get("template") or {}
    labels = (template.get("metadata") or {}).get("labels") or {}
    causes: list[Cause] = []
    try:
        if not label_selector_from_dict(selector).matches(labels):
            causes.append(Cause("FieldValueInvalid", f"Invalid value: {labels!r}: `selector` "
                                "does not match template `labels`",
                                "spec.template.metadata.labels"))
    except SelectorError as err:
        causes.append(Cause("FieldValueInvalid", f"Invalid value: {err}", "spec.selector"))
    return causes + _pod_spec(template.get("spec"), "spec.template.spec")


MAX_DATA_BYTES = 1024 * 1024  # a ConfigMap's or a Secret's data, as upstream's MaxSecretSize


def _data_size(obj: Obj) -> int:
    """Bytes of data as upstream counts them: strings as UTF-8, base64 values decoded."""
    total = 0
    for fld in ("data", "binaryData"):
        values = obj.get(fld)
        if not isinstance(values, dict):
            continue
        encoded = fld == "binaryData" or obj.get("kind") == "Secret"
        for value in values.values():
            if isinstance(value, str):
                total += (len(value) * 3 // 4 - value[-2:].count("=")) if encoded \
                    else len(value.encode())
    return total


def _data_keys(obj: Obj) -> list[Cause]:
    causes = []
    if _data_size(obj) > MAX_DATA_BYTES:
        causes.append(Cause("FieldValueTooLong",
                            f"Too long: must have at most {MAX_DATA_BYTES} bytes", "data"))
    for fld in ("data", "binaryData", "stringData"):
        for key in obj.get(fld) or {}:
            if not _KEY.fullmatch(str(key)) or len(str(key)) > 253:
                causes.append(Cause("FieldValueInvalid", f'Invalid value: "{key}": a valid '
                                    "config key must consist of alphanumeric characters, "
                                    "'-', '_' or '.'", f"{fld}[{key}]"))
    return causes


def validate(kind: str, obj: Obj) -> list[Cause]:
    """What is wrong with a built-in object of ``kind`` (empty when it is acceptable)."""
    spec = obj.get("spec") or {}
    if kind == "Pod":
        return _pod_spec(obj.get("spec"), "spec")
    if kind in ("Deployment", "DaemonSet"):
        return _workload(obj)
    if kind == "PersistentVolumeClaim":
        causes = []
        if not spec.get("accessModes"):
            causes.append(required("spec.accessModes", "at least 1 access mode is required"))
        if not ((spec.get("resources") or {}).get("requests") or {}).get("storage"):
            causes.append(required("spec.resources[storage]"))
        return causes
    if kind == "PersistentVolume":
        causes = []
        if not (spec.get("capacity") or {}).get("storage"):
            causes.append(required("spec.capacity"))
        if not spec.get("accessModes"):
            causes.append(required("spec.accessModes"))
        return causes
    if kind == "Service":
        return [Cause("FieldValueInvalid", f"Invalid value: {p.get('port')}: must be between 1 "
                      "and 65535, inclusive", f"spec.ports[{i}].port")
                for i, p in enumerate(spec.get("ports") or [])
                if not isinstance(p, dict) or not isinstance(p.get("port"), int)
                or not 0 < p["port"] < 65536]
    if kind in ("ConfigMap", "Secret"):
        return _data_keys(obj)
    if kind in bindings.BINDING_KINDS:
        return bindings.validate({**obj, "kind": kind})
    if kind == "StorageClass" and not obj.get("provisioner"):
        return [required("provisioner")]
    return []
