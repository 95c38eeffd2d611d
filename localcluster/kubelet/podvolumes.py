"""Materialise a pod's volumes on the host, ready to be bound into its containers.

Each pod has a directory ``<kubelet dir>/pods/<uid>/``. emptyDir volumes are plain
directories there; configMap, secret, downwardAPI and projected volumes are directories
of files written from the API objects (mounted read-only); hostPath is the host path;
a PVC is its PV's ``local.path`` — the mounted filesystem of a Filesystem volume, or the
loop device behind a Block volume's symlink. The service-account token is written like a
projected volume and mounted at the well-known path unless the pod opts out.

Service-account tokens expire: each one written is remembered (``PodContext.tokens``) and
:func:`rotate_tokens`, called on every tick of the pod's worker, replaces a token file in
place once 80% of its lifetime (at most 24 hours) has passed, as the kubelet does. The file
is replaced atomically inside the bound directory, so containers see the new token.

File modes are the API's (``defaultMode``, an item's ``mode``; 0644 when unset) and an
emptyDir is 0777, as on a real node, so a pod running as any uid reads its own Secrets
and writes its scratch space; the pod directory itself sits in the kubelet's data
directory (0700), out of other local users' reach. With ``fsGroup`` every volume but
hostPath is then handed to that group (ownership.py), and a Block volume becomes a
device node of the pod's own.
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from localcluster.kubelet import ownership
from localcluster.kubelet.env import ConfigError, Data, field_value, resource_value
from localcluster.kubelet.imagevolumes import ImageStore, PullError, parse_pull_secrets

SA_PATH = "/var/run/secrets/kubernetes.io/serviceaccount"
SA_VOLUME = "kube-api-access-localcluster"
# What upstream's ServiceAccount admission puts in the kube-api-access projected volume.
SA_TOKEN_SECONDS = 3607
DEFAULT_TOKEN_SECONDS = 3600
_MAX_TOKEN_AGE = 24 * 3600


@dataclass
class ProjectedToken:
    """A service-account token file written into a volume, and when to replace it."""

    directory: str
    path: str
    audience: str
    expiration_seconds: int
    refresh_at: float


def refresh_time(*, issued: float, expiration_seconds: int) -> float:
    """When the kubelet replaces a token: at 80% of its lifetime, at most after 24h."""
    return issued + min(0.8 * expiration_seconds, _MAX_TOKEN_AGE)


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
    """The PVCs the pod names (of its namespace), by name."""
    volumes: Mapping[str, Mapping[str, Any]]
    """Their PVs, by name."""
    token: Callable[..., str]
    """Mints a token for the pod's service account, bound to the pod: keyword arguments
    ``audience`` (str or None) and ``expiration_seconds``; raises LookupError when the
    service account does not exist."""
    ca_pem: str
    node_cpu_millis: int
    node_memory: int
    images: ImageStore | None = None
    """The node's image store, for ``image`` volumes (None: such volumes are refused)."""
    tokens: list[ProjectedToken] = field(default_factory=list)
    """Filled by :func:`prepare`: the token files to rotate."""


def _mint(ctx: PodContext, directory: str, path: str, audience: str,
          expiration_seconds: int) -> str:
    try:
        token = ctx.token(audience=audience or None, expiration_seconds=expiration_seconds)
    except LookupError as err:
        raise ConfigError(str(err)) from None
    now = time.time()
    ctx.tokens.append(ProjectedToken(directory, path, audience, expiration_seconds,
                                     refresh_time(issued=now,
                                                  expiration_seconds=expiration_seconds)))
    return token


def rotate_tokens(tokens: list[ProjectedToken], mint: Callable[..., str], *,
                  now: float) -> int:
    """Replace the token files that are due; returns how many were replaced. A failed
    mint (the account is gone) leaves the old token and retries on the next tick."""
    replaced = 0
    for tok in tokens:
        if now < tok.refresh_at or not os.path.isdir(tok.directory):
            continue
        try:
            value = mint(audience=tok.audience or None, expiration_seconds=tok.expiration_seconds)
        except LookupError:
            continue
        target = os.path.join(tok.directory, tok.path)
        tmp = target + ".rotating"
        with open(tmp, "w") as fh:
            fh.write(value)
        os.chmod(tmp, os.stat(target).st_mode & 0o777 if os.path.exists(target) else 0o600)
        os.replace(tmp, target)
        tok.refresh_at = refresh_time(issued=now, expiration_seconds=tok.expiration_seconds)
        replaced += 1
    return replaced


DEFAULT_MODE = 0o644
EMPTY_DIR_MODE = 0o777


def _mode(value: object, where: str) -> int:
    if value is None:
        return DEFAULT_MODE
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= 0o777:
        raise ConfigError(f"{where}: must be a file mode between 0 and 0777, got {value!r}")
    return value


def _item_modes(items: list[Any] | None, where: str) -> dict[str, int]:
    """Per-file modes asked for by ``items[].mode``, by the file's path."""
    return {i.get("path") or i.get("key", ""): _mode(i["mode"], f"{where}.items.mode")
            for i in items or [] if i.get("mode") is not None}


def _write_files(target: str, files: Mapping[str, str | bytes], mode: int = DEFAULT_MODE,
                 modes: Mapping[str, int] | None = None) -> None:
    """Replace the directory's content with ``files`` (relative paths)."""
    tmp = target + ".new"
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)
    os.chmod(tmp, 0o755)  # noqa: S103 - the pod reads it as whatever uid it runs as
    for rel, content in files.items():
        file_mode = (modes or {}).get(rel, mode)
        rel = os.path.normpath(rel)
        if rel.startswith("..") or os.path.isabs(rel):
            raise ConfigError(f"invalid volume item path {rel!r}")
        path = os.path.join(tmp, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as fh:
            fh.write(content.encode() if isinstance(content, str) else content)
        os.chmod(path, file_mode)
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


def _projected(pod: Mapping[str, Any], sources: list[Any], ctx: PodContext,
               target: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for src in sources:
        if src.get("serviceAccountToken"):
            sat = src["serviceAccountToken"]
            path = sat.get("path", "token")
            out[path] = _mint(ctx, target, path, str(sat.get("audience") or ""),
                              int(sat.get("expirationSeconds") or DEFAULT_TOKEN_SECONDS))
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


def _check_volume_names(pod: Mapping[str, Any], volumes: list[Any]) -> None:
    """Every volume name becomes one path component under the pod's directory
    (``volumes/<name>``, ``devices/<name>``), made, emptied or replaced by a root kubelet:
    a name that is not exactly one plain component (``..``, ``/etc/x``, ``a/../../b``)
    is refused before anything is created. The API server only lets DNS-1123 labels
    through; this holds for a pod that got in another way (stored before that check)."""
    seen: set[str] = set()
    for i, vol in enumerate(volumes):
        name = vol.get("name") if isinstance(vol, Mapping) else None
        if (not isinstance(name, str) or not name or name in (".", "..") or "/" in name
                or "\0" in name or len(name.encode()) > 255):
            raise ConfigError(f"spec.volumes[{i}].name: {str(name)[:80]!r} is not a valid "
                              "volume name (it must be a single path component)")
        if name in seen:
            raise ConfigError(f"spec.volumes[{i}].name: duplicate volume name {name!r}")
        seen.add(name)
    if SA_VOLUME in seen and wants_service_account(pod):
        raise ConfigError(f"volume {SA_VOLUME!r}: the name of the kubelet's own "
                          "service-account volume")


def prepare(pod: Mapping[str, Any], ctx: PodContext) -> dict[str, HostVolume]:
    """Create every volume of ``pod``; raises VolumeNotReady or ConfigError."""
    volumes = (pod.get("spec") or {}).get("volumes") or []
    _check_volume_names(pod, volumes)
    result: dict[str, HostVolume] = {}
    base = os.path.join(ctx.pod_dir, "volumes")
    os.makedirs(base, exist_ok=True)
    namespace = (pod.get("metadata") or {}).get("namespace", "")
    pod_ctx = (pod.get("spec") or {}).get("securityContext") or {}
    fs_group = pod_ctx.get("fsGroup")
    policy = pod_ctx.get("fsGroupChangePolicy") or ownership.ALWAYS
    if fs_group is not None and (isinstance(fs_group, bool) or not isinstance(fs_group, int)
                                 or not 0 <= fs_group < 2**32):
        raise ConfigError(f"spec.securityContext.fsGroup: must be an integer in [0, 2^32), "
                          f"got {fs_group!r}")
    if policy not in ownership.POLICIES:
        raise ConfigError(f"spec.securityContext.fsGroupChangePolicy: must be one of "
                          f"{', '.join(ownership.POLICIES)}, got {policy!r}")
    managed: list[str] = []
    """Volumes whose ownership fsGroup manages (all but hostPath)."""
    for vol in volumes:
        name = vol["name"]
        target = os.path.join(base, name)
        where = f"volumes[{name}]"
        if "emptyDir" in vol:
            os.makedirs(target, exist_ok=True)
            os.chmod(target, EMPTY_DIR_MODE)
            result[name] = HostVolume(target)
            managed.append(name)
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
                                        cm.get("items"), bool(cm.get("optional"))),
                         mode=_mode(cm.get("defaultMode"), f"{where}.configMap.defaultMode"),
                         modes=_item_modes(cm.get("items"), f"{where}.configMap"))
            result[name] = HostVolume(target, read_only=True)
            managed.append(name)
        elif vol.get("secret"):
            s = vol["secret"]
            _write_files(target, _keyed("secret", s.get("secretName", ""), ctx.secrets,
                                        s.get("items"), bool(s.get("optional"))),
                         mode=_mode(s.get("defaultMode"), f"{where}.secret.defaultMode"),
                         modes=_item_modes(s.get("items"), f"{where}.secret"))
            result[name] = HostVolume(target, read_only=True)
            managed.append(name)
        elif vol.get("downwardAPI"):
            d = vol["downwardAPI"]
            _write_files(target, _downward(pod, d.get("items") or [], ctx),
                         mode=_mode(d.get("defaultMode"), f"{where}.downwardAPI.defaultMode"),
                         modes=_item_modes(d.get("items"), f"{where}.downwardAPI"))
            result[name] = HostVolume(target, read_only=True)
            managed.append(name)
        elif vol.get("projected"):
            p = vol["projected"]
            _write_files(target, _projected(pod, p.get("sources") or [], ctx, target),
                         mode=_mode(p.get("defaultMode"), f"{where}.projected.defaultMode"))
            result[name] = HostVolume(target, read_only=True)
            managed.append(name)
        elif vol.get("persistentVolumeClaim"):
            ref = vol["persistentVolumeClaim"]
            hv = _claim_volume(namespace, ref.get("claimName", ""), ctx,
                               read_only=bool(ref.get("readOnly")))
            if hv.device:
                node = os.path.join(ctx.pod_dir, "devices", name)
                try:
                    hv = HostVolume(ownership.device_node(node, hv.host, gid=fs_group),
                                    device=True, read_only=hv.read_only)
                except OSError as err:
                    raise VolumeNotReady(f"volume {name}: cannot make its device node: "
                                         f"{err}") from err
            else:
                managed.append(name)
            result[name] = hv
        elif vol.get("image"):
            result[name] = HostVolume(_image_volume(pod, vol["image"], ctx, name),
                                      read_only=True)
        else:
            raise ConfigError(f"volume {name}: unsupported volume type "
                              f"{sorted(k for k in vol if k != 'name')}")
    if wants_service_account(pod):
        target = os.path.join(base, SA_VOLUME)
        token = _mint(ctx, target, "token", "", SA_TOKEN_SECONDS)
        _write_files(target, {"token": token, "ca.crt": ctx.ca_pem,
                              "namespace": namespace}, mode=DEFAULT_MODE)
        result[SA_VOLUME] = HostVolume(target, read_only=True)
        managed.append(SA_VOLUME)
    if fs_group is not None:
        for name in managed:
            hv = result[name]
            ownership.apply_fs_group(hv.host, gid=fs_group, read_only=hv.read_only,
                                     policy=policy)
    return result


def _image_volume(pod: Mapping[str, Any], source: Mapping[str, Any], ctx: PodContext,
                  name: str) -> str:
    """An ``image`` volume: the image's files from the node's store (pulled as its
    ``pullPolicy`` says, with the pod's imagePullSecrets); the pod waits while it cannot
    be pulled, the reason in its status."""
    reference = source.get("reference")
    if not isinstance(reference, str) or not reference:
        raise ConfigError(f"volume {name}: image.reference is required")
    if ctx.images is None:
        raise ConfigError(f"volume {name}: this node has no image store")
    names = [str((s or {}).get("name") or "")
             for s in (pod.get("spec") or {}).get("imagePullSecrets") or []]
    try:
        return ctx.images.mount(reference, policy=source.get("pullPolicy"),
                                pull_secrets=parse_pull_secrets(ctx.secrets, names))
    except PullError as err:
        raise VolumeNotReady(f"volume {name}: {err}") from err


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
    # As upstream's volume manager: the volume must be bound to this very claim. The
    # claim's volumeName is the claim's own (its creator writes it) and its status can
    # be written too, so only the volume's claimRef says whose the volume is.
    ref = ((pv or {}).get("spec") or {}).get("claimRef")
    uid = (claim.get("metadata") or {}).get("uid")
    if pv is not None and not isinstance(ref, dict):
        raise VolumeNotReady(f'found PV object "{pv_name}" but it has a nil'
                             " pv.Spec.ClaimRef indicating it is not yet bound to the claim")
    if isinstance(ref, dict) and (
            ref.get("uid") != uid if ref.get("uid") else
            (ref.get("namespace"), ref.get("name")) != (namespace, claim_name)):
        raise VolumeNotReady(f'found PV object "{pv_name}" but its pv.Spec.ClaimRef.UID'
                             f' ("{ref.get("uid") or ""}") does not point to claim.UID'
                             f' ("{uid or ""}")')
    path = (((pv or {}).get("spec") or {}).get("local") or {}).get("path")
    if not path or not os.path.exists(path):
        raise VolumeNotReady(f"volume {pv_name} of claim {claim_name} is not on this node")
    block = ((pv or {}).get("spec") or {}).get("volumeMode") == "Block"
    return HostVolume(os.path.realpath(path) if block else path, device=block,
                      read_only=read_only)


def sub_path(volume: str, sub: str) -> str:
    """The host directory for ``subPath`` ``sub`` of the volume at ``volume``, created if
    missing. Refused (ConfigError) when it is absolute, climbs out with ``..``, or goes
    through a symlink out of the volume: a pod writes its volume, so a symlink there
    must not make the kubelet bind a host path into a container."""
    parts = sub.split("/")
    if sub.startswith("/") or ".." in parts:
        raise ConfigError(f"subPath {sub!r}: must be a relative path without '..'")
    root = os.path.realpath(volume)
    path = os.path.join(root, *[p for p in parts if p and p != "."])

    def inside() -> str:
        real = os.path.realpath(path)
        if real != root and not real.startswith(root + os.sep):
            raise ConfigError(f"subPath {sub!r}: leads out of the volume (through a symlink)")
        return real

    inside()  # before creating anything: makedirs would follow the symlink
    os.makedirs(path, exist_ok=True)
    return inside()


def claim_names(pod: Mapping[str, Any]) -> list[str]:
    return [v["persistentVolumeClaim"].get("claimName", "")
            for v in (pod.get("spec") or {}).get("volumes") or []
            if v.get("persistentVolumeClaim")]
