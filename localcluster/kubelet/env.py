"""A container's environment and downward-API values, as the kubelet computes them (pure).

Sources, in Kubernetes' order: ``envFrom`` (ConfigMaps and Secrets, with prefix), then
``env`` (values with ``$(VAR)`` expansion against what came before, or ``valueFrom``
fieldRef / resourceFieldRef / configMapKeyRef / secretKeyRef). A missing required
ConfigMap, Secret or key is a :class:`ConfigError`: the container waits with
``CreateContainerConfigError`` and that message, as on a real node.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any

import sizes
from localcluster.kubelet.images import expand

Obj = Mapping[str, Any]
Data = Mapping[str, Mapping[str, str]]
"""ConfigMaps or Secrets of the pod's namespace: name → decoded data."""

_ENV_NAME = re.compile(r"^[-._a-zA-Z][-._a-zA-Z0-9]*$")


class ConfigError(Exception):
    """The container's configuration refers to something missing."""


def field_value(*, pod: Obj, path: str, pod_ip: str, host_ip: str) -> str:
    """A downward-API ``fieldRef.fieldPath``."""
    meta = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    simple = {
        "metadata.name": meta.get("name"),
        "metadata.namespace": meta.get("namespace"),
        "metadata.uid": meta.get("uid"),
        "spec.nodeName": spec.get("nodeName"),
        "spec.serviceAccountName": spec.get("serviceAccountName"),
        "status.podIP": pod_ip,
        "status.podIPs": pod_ip,
        "status.hostIP": host_ip,
        "status.hostIPs": host_ip,
    }
    if path in simple:
        return str(simple[path] or "")
    m = re.fullmatch(r"metadata\.(labels|annotations)\['([^']+)'\]", path)
    if m:
        return str((meta.get(m.group(1)) or {}).get(m.group(2), ""))
    if path in ("metadata.labels", "metadata.annotations"):
        items = meta.get(path.split(".")[1]) or {}
        return "\n".join(f'{k}="{v}"' for k, v in sorted(items.items()))
    raise ConfigError(f"unsupported fieldRef.fieldPath {path!r}")


def resource_value(
    *, pod: Obj, container_name: str, resource: str, divisor: str | None,
    node_cpu_millis: int, node_memory: int,
) -> str:
    """A ``resourceFieldRef``: the container's limit/request, the node's size if unset."""
    containers = list((pod.get("spec") or {}).get("containers") or [])
    c = next((c for c in containers if c.get("name") == container_name), None)
    if c is None:
        raise ConfigError(f"resourceFieldRef: no container named {container_name!r}")
    kind, _, name = resource.partition(".")
    if kind not in ("limits", "requests") or name not in ("cpu", "memory", "ephemeral-storage"):
        raise ConfigError(f"unsupported resourceFieldRef.resource {resource!r}")
    raw = ((c.get("resources") or {}).get(kind) or {}).get(name)
    if name == "cpu":
        value = sizes.parse_quantity(raw if raw is not None else f"{node_cpu_millis}m")
        div = sizes.parse_quantity(divisor or "1")
    else:
        value = sizes.parse_quantity(raw if raw is not None else node_memory)
        div = sizes.parse_quantity(divisor or "1")
    return str(math.ceil(value / div))


def _lookup(store: Data, kind: str, name: str, key: str | None, optional: bool) -> str | None:
    data = store.get(name)
    if data is None:
        if optional:
            return None
        raise ConfigError(f'{kind} "{name}" not found')
    if key is None:
        return None
    if key not in data:
        if optional:
            return None
        raise ConfigError(f"couldn't find key {key} in {kind} {name}")
    return data[key]


def container_env(
    *, pod: Obj, container: Obj, pod_ip: str, host_ip: str, configmaps: Data, secrets: Data,
    node_cpu_millis: int, node_memory: int, extra: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """The environment of one container (``extra`` first: service variables and such)."""
    env: dict[str, str] = dict(extra or {})
    for source in container.get("envFrom") or []:
        prefix = source.get("prefix") or ""
        for kind, field, store in (("configmap", "configMapRef", configmaps),
                                   ("secret", "secretRef", secrets)):
            ref = source.get(field)
            if not ref:
                continue
            name = ref.get("name", "")
            if name not in store:
                if ref.get("optional"):
                    continue
                raise ConfigError(f'{kind} "{name}" not found')
            for k, v in store[name].items():
                if _ENV_NAME.match(prefix + k):
                    env[prefix + k] = v
    for item in container.get("env") or []:
        name = item.get("name", "")
        if "valueFrom" not in item:
            env[name] = expand(str(item.get("value") or ""), env)
            continue
        vf = item["valueFrom"] or {}
        value: str | None
        if "fieldRef" in vf:
            value = field_value(pod=pod, path=vf["fieldRef"].get("fieldPath", ""),
                                pod_ip=pod_ip, host_ip=host_ip)
        elif "resourceFieldRef" in vf:
            ref = vf["resourceFieldRef"]
            value = resource_value(
                pod=pod, container_name=ref.get("containerName") or container.get("name", ""),
                resource=ref.get("resource", ""), divisor=ref.get("divisor"),
                node_cpu_millis=node_cpu_millis, node_memory=node_memory)
        elif "configMapKeyRef" in vf:
            ref = vf["configMapKeyRef"]
            value = _lookup(configmaps, "configmap", ref.get("name", ""), ref.get("key", ""),
                            bool(ref.get("optional")))
        elif "secretKeyRef" in vf:
            ref = vf["secretKeyRef"]
            value = _lookup(secrets, "secret", ref.get("name", ""), ref.get("key", ""),
                            bool(ref.get("optional")))
        else:
            raise ConfigError(f"env {name}: unsupported valueFrom {sorted(vf)}")
        if value is not None:
            env[name] = value
    return env


def referenced_names(pod: Obj) -> tuple[set[str], set[str]]:
    """ConfigMaps and Secrets a pod's containers and volumes refer to."""
    cms: set[str] = set()
    secrets: set[str] = set()
    spec = pod.get("spec") or {}
    for c in list(spec.get("containers") or []) + list(spec.get("initContainers") or []):
        for src in c.get("envFrom") or []:
            if src.get("configMapRef"):
                cms.add(src["configMapRef"].get("name", ""))
            if src.get("secretRef"):
                secrets.add(src["secretRef"].get("name", ""))
        for item in c.get("env") or []:
            vf = item.get("valueFrom") or {}
            if "configMapKeyRef" in vf:
                cms.add(vf["configMapKeyRef"].get("name", ""))
            if "secretKeyRef" in vf:
                secrets.add(vf["secretKeyRef"].get("name", ""))
    for vol in spec.get("volumes") or []:
        if vol.get("configMap"):
            cms.add(vol["configMap"].get("name", ""))
        if vol.get("secret"):
            secrets.add(vol["secret"].get("secretName", ""))
        for src in (vol.get("projected") or {}).get("sources") or []:
            if src.get("configMap"):
                cms.add(src["configMap"].get("name", ""))
            if src.get("secret"):
                secrets.add(src["secret"].get("name", ""))
    for ref in spec.get("imagePullSecrets") or []:  # image volumes' registry credentials
        if isinstance(ref, dict) and ref.get("name"):
            secrets.add(str(ref["name"]))
    return cms, secrets
