"""The Secret volumes of a launcher pod: cloud-init data and SSH keys, mounted by the
kubelet (upstream's ``rendervolumes.go``: no KubeVirt component reads a Secret).

Where they land (``/var/run/kubevirt-private/secret``, :data:`SECRET_DIR`):

- a cloud-init volume's ``secretRef`` Secret, pod volume ``<volume>-udata``, at
  ``secret/<volume>/`` (the launcher reads ``userdata``, else ``userData``);
- its ``networkDataSecretRef`` Secret, pod volume ``<volume>-ndata``, at the same
  directory when there is no user-data Secret or it is the same Secret, else at
  ``secret/<volume>-ndata/`` (``networkdata``, else ``networkData``);
- an ``accessCredentials`` sshPublicKey Secret, pod volume ``<secret>-access-cred``, at
  ``secret/<secret>-access-cred/`` (as upstream).

Upstream mounts the cloud-init keys one by one with ``subPath``; here each Secret is
mounted whole, read-only, so a mount point is never a directory the runtime has to make
inside another mount (localcluster's runtime makes those root-only). The directory
itself is the pod's ``secret-mounts`` emptyDir for the same reason. Files are 0440 and
the pod's fsGroup (107) owns them: the launcher reads them, no other uid does.
"""

from __future__ import annotations

import posixpath
from collections.abc import Mapping
from typing import Any

SECRET_DIR = "/var/run/kubevirt-private/secret"  # noqa: S105 - a directory
SECRET_MOUNTS_VOLUME = "secret-mounts"  # noqa: S105 - a volume name
SECRET_FILE_MODE = 0o440
CLOUD_INIT_SOURCES = ("cloudInitNoCloud", "cloudInitConfigDrive")


def _name(ref: Any) -> str:
    if isinstance(ref, Mapping) and isinstance(ref.get("name"), str):
        return str(ref["name"])
    return ""


def secret_volumes(spec: Mapping[str, Any]) -> list[tuple[str, str, str]]:
    """``(pod volume, Secret name, mount path)`` for each Secret the launcher reads."""
    out: list[tuple[str, str, str]] = []
    for vol in spec.get("volumes") or []:
        if not isinstance(vol, Mapping):
            continue
        name = str(vol.get("name") or "")
        for kind in CLOUD_INIT_SOURCES:
            body = vol.get(kind)
            if not isinstance(body, Mapping):
                continue
            user, network = _name(body.get("secretRef")), _name(body.get("networkDataSecretRef"))
            if user:
                out.append((f"{name}-udata", user, posixpath.join(SECRET_DIR, name)))
            if network and network != user:
                where = f"{name}-ndata" if user else name
                out.append((f"{name}-ndata", network, posixpath.join(SECRET_DIR, where)))
    seen: set[str] = set()
    for cred in spec.get("accessCredentials") or []:
        ssh = cred.get("sshPublicKey") if isinstance(cred, Mapping) else None
        secret = ((ssh or {}).get("source") or {}).get("secret") or {}
        secret_name = secret.get("secretName") if isinstance(secret, Mapping) else None
        if not isinstance(secret_name, str) or not secret_name or secret_name in seen:
            continue
        seen.add(secret_name)
        volume = f"{secret_name}-access-cred"
        out.append((volume, secret_name, posixpath.join(SECRET_DIR, volume)))
    return out


def render(spec: Mapping[str, Any]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The pod's volumes and the compute container's mounts for the Secrets."""
    found = secret_volumes(spec)
    if not found:
        return [], []
    volumes: list[dict[str, Any]] = [{"name": SECRET_MOUNTS_VOLUME, "emptyDir": {}}]
    mounts: list[dict[str, Any]] = [{"name": SECRET_MOUNTS_VOLUME, "mountPath": SECRET_DIR}]
    for volume, secret, path in found:
        volumes.append({"name": volume, "secret": {"secretName": secret,
                                                   "defaultMode": SECRET_FILE_MODE}})
        mounts.append({"name": volume, "mountPath": path, "readOnly": True})
    return volumes, mounts
