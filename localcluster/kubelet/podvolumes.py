"""Materialise a pod's volumes on the host, ready to be bound into its containers.

Each pod has a directory ``<kubelet dir>/pods/<uid>/``. emptyDir volumes are plain
directories there; configMap, secret, downwardAPI and projected volumes are directories
of files written from the API objects (mounted read-only); hostPath is the host path;
a PVC is its PV's ``local.path`` — the mounted filesystem of a Filesystem volume, or the
loop device behind a Block volume's symlink. The service-account token is written like a
projected volume and mounted at the well-known path unless the pod opts out.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from localcluster.kubelet.env import ConfigError, Data, field_value, resource_value

SA_PATH = "/var/run/secrets/kubernetes.io/serviceaccount"
SA_VOLUME = "kube-api-access-localcluster"


@dataclass(frozen=True)
class HostVolume:
    host: str
    device: bool = False
    read_only: bool = False


class VolumeNotReady(Exception):
    """A PVC is not bound yet (or its PV has no local path): the pod waits."""


@dataclass
class PodContext:
    """What volume materialisation needs to know besides the pod."""

    pod_dir: str
    pod_ip: str
    host_ip: str
    configmaps: Data
    secrets: Data
    claims: Mapping[str, Mapping[str, Any]]
    """PVCs of the pod's namespace by name."""
    volumes: Mapping[str, Mapping[str, Any]]
    """PVs by name."""
    token: Callable[[], str]
    """Mints a token for the pod's service account."""
    ca_pem: str
    node_cpu_millis: int
    node_memory: int


def _write_files(target: str, files: Mapping[str, str | bytes], mode: int = 0o644) -> None:
    """Replace the directory's content with ``files`` (relative paths)."""
    tmp = target + ".new"
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)
    for rel, content in files.items():
        rel = os.path.normpath(rel)
        if rel.startswith("..") or os.path.isabs(rel):
            raise ConfigError(f"invalid volume item path {rel!r}")
        path = os.path.join(tmp, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as fh:
            fh.write(content.encode() if isinstance(content, str) else content)
        os.chmod(path, mode)
    shutil.rmtree(target, ignore_errors=True)
    os.replace(tmp, target)


def _keyed(kind: str, name: str, store: Data, items: list[Any] | None,
           optional: bool) -> dict[str, str]:
    data = store.get(name)
    if data is None:
        if optional:
            return {}
        raise ConfigError(f'{kind} "{name}" not found')
    if not items:
        return dict(data)
    out = {}
    for item in items:
        key = item.get("key", "")
        if key not in data:
            if optional:
                continue
            raise ConfigError(f"couldn't find key {key} in {kind} {name}")
        out[item.get("path") or key] = data[key]
    return out


def _downward(pod: Mapping[str, Any], items: list[Any], ctx: PodContext) -> dict[str, str]:
    out = {}
    for item in items:
        if item.get("fieldRef"):
            out[item["path"]] = field_value(pod=pod, path=item["fieldRef"].get("fieldPath", ""),
                                             pod_ip=ctx.pod_ip, host_ip=ctx.host_ip)
        elif item.get("resourceFieldRef"):
            ref = item["resourceFieldRef"]
            out[item["path"]] = resource_value(
                pod=pod, container_name=ref.get("containerName", ""),
                resource=ref.get("resource", ""), divisor=ref.get("divisor"),
                node_cpu_millis=ctx.node_cpu_millis, node_memory=ctx.node_memory)
    return out


def _projected(pod: Mapping[str, Any], sources: list[Any], ctx: PodContext) -> dict[str, str]:
    out: dict[str, str] = {}
    for src in sources:
        if src.get("serviceAccountToken"):
            out[src["serviceAccountToken"].get("path", "token")] = ctx.token()
        elif src.get("configMap"):
            cm = src["configMap"]
            if cm.get("name") == "kube-root-ca.crt" and cm.get("name") not in ctx.configmaps:
                data = {"ca.crt": ctx.ca_pem}
                out.update({i.get("path", i["key"]): data[i["key"]] for i in cm.get("items")
                            or [{"key": "ca.crt"}] if i.get("key") in data})
            else:
                out.update(_keyed("configmap", cm.get("name", ""), ctx.configmaps,
                                  cm.get("items"), bool(cm.get("optional"))))
        elif src.get("secret"):
            s = src["secret"]
            out.update(_keyed("secret", s.get("name", ""), ctx.secrets, s.get("items"),
                              bool(s.get("optional"))))
        elif src.get("downwardAPI"):
            out.update(_downward(pod, src["downwardAPI"].get("items") or [], ctx))
    return out


def wants_service_account(pod: Mapping[str, Any]) -> bool:
    spec = pod.get("spec") or {}
    if spec.get("automountServiceAccountToken") is False:
        return False
    return not any(m.get("mountPath") == SA_PATH
                   for c in spec.get("containers") or [] for m in c.get("volumeMounts") or [])


def prepare(pod: Mapping[str, Any], ctx: PodContext) -> dict[str, HostVolume]:
    """Create every volume of ``pod``; raises VolumeNotReady or ConfigError."""
    result: dict[str, HostVolume] = {}
    base = os.path.join(ctx.pod_dir, "volumes")
    os.makedirs(base, exist_ok=True)
    namespace = (pod.get("metadata") or {}).get("namespace", "")
    for vol in (pod.get("spec") or {}).get("volumes") or []:
        name = vol.get("name", "")
        target = os.path.join(base, name)
        if "emptyDir" in vol:
            os.makedirs(target, exist_ok=True)
            result[name] = HostVolume(target)
        elif vol.get("hostPath"):
            hp = vol["hostPath"]
            path, kind = hp.get("path", ""), hp.get("type") or ""
            if kind == "DirectoryOrCreate":
                os.makedirs(path, exist_ok=True)
            elif kind == "FileOrCreate" and not os.path.exists(path):
                os.makedirs(os.path.dirname(path), exist_ok=True)
                open(path, "a").close()
            elif kind and not os.path.exists(path):
                raise ConfigError(f"hostPath {path} does not exist (type {kind})")
            result[name] = HostVolume(path, device=kind in ("BlockDevice", "CharDevice"))
        elif vol.get("configMap"):
            cm = vol["configMap"]
            _write_files(target, _keyed("configmap", cm.get("name", ""), ctx.configmaps,
                                        cm.get("items"), bool(cm.get("optional"))))
            result[name] = HostVolume(target, read_only=True)
        elif vol.get("secret"):
            s = vol["secret"]
            _write_files(target, _keyed("secret", s.get("secretName", ""), ctx.secrets,
                                        s.get("items"), bool(s.get("optional"))), mode=0o600)
            result[name] = HostVolume(target, read_only=True)
        elif vol.get("downwardAPI"):
            _write_files(target, _downward(pod, vol["downwardAPI"].get("items") or [], ctx))
            result[name] = HostVolume(target, read_only=True)
        elif vol.get("projected"):
            _write_files(target, _projected(pod, vol["projected"].get("sources") or [], ctx),
                         mode=0o600)
            result[name] = HostVolume(target, read_only=True)
        elif vol.get("persistentVolumeClaim"):
            ref = vol["persistentVolumeClaim"]
            result[name] = _claim_volume(namespace, ref.get("claimName", ""), ctx,
                                         read_only=bool(ref.get("readOnly")))
        else:
            raise ConfigError(f"volume {name}: unsupported volume type "
                              f"{sorted(k for k in vol if k != 'name')}")
    if wants_service_account(pod):
        target = os.path.join(base, SA_VOLUME)
        _write_files(target, {"token": ctx.token(), "ca.crt": ctx.ca_pem,
                              "namespace": namespace}, mode=0o644)
        result[SA_VOLUME] = HostVolume(target, read_only=True)
    return result


def _claim_volume(namespace: str, claim_name: str, ctx: PodContext, *,
                  read_only: bool) -> HostVolume:
    claim = ctx.claims.get(claim_name)
    if claim is None:
        raise VolumeNotReady(f'persistentvolumeclaim "{claim_name}" not found')
    phase = (claim.get("status") or {}).get("phase")
    pv_name = (claim.get("spec") or {}).get("volumeName")
    if phase != "Bound" or not pv_name:
        raise VolumeNotReady(f'persistentvolumeclaim "{claim_name}" is not bound')
    pv = ctx.volumes.get(pv_name)
    path = (((pv or {}).get("spec") or {}).get("local") or {}).get("path")
    if not path or not os.path.exists(path):
        raise VolumeNotReady(f"volume {pv_name} of claim {claim_name} is not on this node")
    block = ((pv or {}).get("spec") or {}).get("volumeMode") == "Block"
    return HostVolume(os.path.realpath(path) if block else path, device=block,
                      read_only=read_only)


def claim_names(pod: Mapping[str, Any]) -> list[str]:
    return [v["persistentVolumeClaim"].get("claimName", "")
            for v in (pod.get("spec") or {}).get("volumes") or []
            if v.get("persistentVolumeClaim")]
