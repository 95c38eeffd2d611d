"""Cloud-init data sources (NoCloud, ConfigDrive): what goes on the ISO, decided purely.

Why it exists: the launcher builds the ISO (I/O, :mod:`vm.launcher.cloudinit`); what
the files hold is decided here, as upstream's ``pkg/cloud-init`` (KubeVirt d923fdb815cd):

- NoCloud: ``noCloud.iso``, volume label ``cidata``, files ``meta-data``, ``user-data``
  (always, even empty) and ``network-config`` (only with network data);
- ConfigDrive: ``configdrive.iso``, label ``config-2``, files
  ``openstack/latest/{meta_data.json,user_data,network_data.json}``;
- meta-data is JSON: NoCloud ``{"instance-type"?, "instance-id", "local-hostname"?,
  "public-keys"?}``, ConfigDrive ``{"instance_type"?, "instance_id": "<vmi>.<ns>",
  "hostname"?, "uuid", "public_keys"?}``; instance-id (NoCloud) and uuid (ConfigDrive)
  are the firmware UUID; public keys are ``{"0": key, "1": key…}``.

Inline data is decoded here (``userDataBase64``); Secret data (``secretRef``,
``networkDataSecretRef``) is read by the launcher from the Secret volumes the kubelet
mounted (``vm.vmi.secret_volumes``) and merged with :func:`resolve`.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any, Literal

from vm.domain.errors import DomainError, UnsupportedError
from vocab import kubevirt

DataSource = Literal["noCloud", "configDrive"]
SOURCE_KEYS: Mapping[str, DataSource] = {
    "cloudInitNoCloud": "noCloud", "cloudInitConfigDrive": "configDrive"}
USER_DATA_FILES = ("userdata", "userData")
NETWORK_DATA_FILES = ("networkdata", "networkData")
ACCESS_CRED_SUFFIX = "-access-cred"
ANN_CLUSTER_INSTANCETYPE = kubevirt.ANN_CLUSTER_INSTANCETYPE
ANN_INSTANCETYPE = kubevirt.ANN_INSTANCETYPE
ISO_NAMES: Mapping[DataSource, str] = {"noCloud": "noCloud.iso",
                                       "configDrive": "configdrive.iso"}
LABELS: Mapping[DataSource, str] = {"noCloud": "cidata", "configDrive": "config-2"}
_SECRET_NAME = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")


@dataclass(frozen=True)
class CloudInitSpec:
    """One cloud-init volume. ``user_data``/``network_data`` are the inline values
    (base64 decoded; bytes, as cloud-init also takes gzipped data); a Secret reference
    leaves them None until :func:`resolve`."""

    volume: str
    source: DataSource
    user_data: bytes | None
    network_data: bytes | None
    user_data_secret: bool
    network_data_secret: bool

    def __repr__(self) -> str:  # the data may be secret: never in a log line
        return (f"CloudInitSpec(volume={self.volume!r}, source={self.source!r}, "
                f"user_data_secret={self.user_data_secret}, "
                f"network_data_secret={self.network_data_secret})")


@dataclass(frozen=True)
class SshKeySource:
    secret: str
    method: DataSource

    @property
    def directory(self) -> str:
        """The Secret's mount point under the secret directory (upstream's name)."""
        return self.secret + ACCESS_CRED_SUFFIX


def _text(body: Mapping[str, Any], key: str, field: str) -> str:
    value = body.get(key)
    if value is None:
        return ""
    if not isinstance(value, str):
        raise DomainError(f"{field}.{key}", "must be a string")
    return value


def _decoded(body: Mapping[str, Any], key: str, field: str) -> bytes:
    text = _text(body, key, field)
    if not text:
        return b""
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError) as err:
        raise DomainError(f"{field}.{key}", "is not a valid base64 value") from err


def parse_source(volume: str, kind: str, body: Any, field: str) -> CloudInitSpec:
    """:raise DomainError: naming the field."""
    if not isinstance(body, Mapping):
        raise DomainError(field, "must be an object")
    source = SOURCE_KEYS[kind]
    user = (_text(body, "userData", field).encode()
            or _decoded(body, "userDataBase64", field))
    network = (_text(body, "networkData", field).encode()
               or _decoded(body, "networkDataBase64", field))
    user_secret = isinstance(body.get("secretRef"), Mapping) and bool(
        body["secretRef"].get("name"))
    net_secret = isinstance(body.get("networkDataSecretRef"), Mapping) and bool(
        body["networkDataSecretRef"].get("name"))
    if not (user or network or user_secret or net_secret):
        raise DomainError(field, "userDataBase64, userData, networkDataBase64 or networkData "
                          "is required for a cloud-init data source")
    return CloudInitSpec(volume=volume, source=source, user_data=user or None,
                         network_data=network or None, user_data_secret=user_secret,
                         network_data_secret=net_secret)


def parse_ssh_keys(raw: Any) -> tuple[SshKeySource, ...]:
    """The accessCredentials that propagate SSH keys through cloud-init."""
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise DomainError("spec.accessCredentials", "must be a list")
    out = []
    for i, cred in enumerate(raw):
        field = f"spec.accessCredentials[{i}]"
        if not isinstance(cred, Mapping):
            raise DomainError(field, "must be an object")
        ssh = cred.get("sshPublicKey")
        if not isinstance(ssh, Mapping):
            raise UnsupportedError(field, "only sshPublicKey credentials are supported")
        method = ssh.get("propagationMethod") or {}
        secret = ((ssh.get("source") or {}).get("secret") or {}).get("secretName")
        if not isinstance(secret, str) or not secret:
            raise DomainError(f"{field}.sshPublicKey.source.secret.secretName", "required")
        if not _SECRET_NAME.fullmatch(secret) or len(secret) > 253:
            # it becomes a directory name under the secret directory
            raise DomainError(f"{field}.sshPublicKey.source.secret.secretName",
                              f"{secret[:80]!r} is not a DNS-1123 subdomain")
        if method.get("noCloud") is not None:
            out.append(SshKeySource(secret, "noCloud"))
        elif method.get("configDrive") is not None:
            out.append(SshKeySource(secret, "configDrive"))
        else:
            raise UnsupportedError(f"{field}.sshPublicKey.propagationMethod",
                                   "only noCloud and configDrive are supported")
    return tuple(out)


def resolve(spec: CloudInitSpec, *, user_data: bytes | None,
            network_data: bytes | None) -> CloudInitSpec:
    """The spec with the data read from its Secrets (None: that Secret gave nothing)."""
    return replace(spec,
                   user_data=user_data if spec.user_data_secret and user_data else spec.user_data,
                   network_data=(network_data if spec.network_data_secret and network_data
                                 else spec.network_data))


def hostname(name: str, spec_hostname: str | None) -> str:
    """upstream's ``dns.SanitizeHostname``: ``spec.hostname``, else the VMI name up to its
    first dot, at most 63 characters."""
    if spec_hostname:
        return spec_hostname
    return name.split(".", 1)[0][:63]


def instance_type(annotations: Mapping[str, Any]) -> str:
    return str(annotations.get(ANN_CLUSTER_INSTANCETYPE) or
               annotations.get(ANN_INSTANCETYPE) or "")


def meta_data(*, source: DataSource, name: str, namespace: str, uuid: str, host: str,
              itype: str, keys: list[str]) -> bytes:
    """meta-data (NoCloud) or meta_data.json (ConfigDrive), as upstream's JSON (Go's
    encoding/json: fields in declaration order, omitempty left out)."""
    # Go marshals a map with its keys sorted as strings ("0", "1", "10", "2")
    public = dict(sorted((str(i), k) for i, k in enumerate(keys)))
    doc: dict[str, Any]
    if source == "noCloud":
        doc = {}
        if itype:
            doc["instance-type"] = itype
        doc["instance-id"] = uuid
        if host:
            doc["local-hostname"] = host
        if public:
            doc["public-keys"] = public
    else:
        doc = {}
        if itype:
            doc["instance_type"] = itype
        doc["instance_id"] = f"{name}.{namespace}"
        if host:
            doc["hostname"] = host
        if uuid:
            doc["uuid"] = uuid
        if public:
            doc["public_keys"] = public
    return json.dumps(doc, separators=(",", ":"), ensure_ascii=False).encode()


def files(spec: CloudInitSpec, meta: bytes) -> dict[str, bytes]:
    """The ISO's files, by path inside it."""
    user = spec.user_data or b""
    network = spec.network_data or b""
    if not user and not network:
        raise DomainError(f"volume {spec.volume}", "UserData or NetworkData is required for "
                          "cloud-init data source")
    if spec.source == "noCloud":
        out = {"meta-data": meta, "user-data": user}
        if network:
            out["network-config"] = network
        return out
    base = "openstack/latest/"
    out = {base + "meta_data.json": meta, base + "user_data": user}
    if network:
        out[base + "network_data.json"] = network
    return out
