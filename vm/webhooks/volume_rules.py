"""Volume and access-credential rules of the VMI admitter (upstream's ``validateVolumes``
and ``validateAccessCredentials``, KubeVirt d923fdb815cd), plus the refusals of what
this runtime cannot run.

Upstream's messages are kept word for word; they already name the field, so those
problems are :class:`~vm.webhooks.vmi_rules.Problem` with ``verbatim=True`` (shown
without a second field prefix). A volume source or a propagation method that upstream
accepts but the launcher here does not implement is refused at admission with the
reason, so a VM never gets accepted only to crash-loop in its launcher.
"""

from __future__ import annotations

import base64
import binascii
import posixpath
from collections.abc import Mapping
from typing import Any

from sizes import parse_bytes
from vm.vmi.claims import volume_name_problem
from vm.webhooks.problem import Problem

CLOUD_INIT_USER_MAX_LEN = 2048
CLOUD_INIT_NETWORK_MAX_LEN = 2048
CLOUD_INIT_SOURCES = ("cloudInitNoCloud", "cloudInitConfigDrive")
SUPPORTED_SOURCES = ("persistentVolumeClaim", "dataVolume", "emptyDisk", "ephemeral",
                     "containerDisk", *CLOUD_INIT_SOURCES)
UNSUPPORTED_SOURCES = ("hostDisk", "configMap", "secret", "serviceAccount",
                       "downwardAPI", "downwardMetrics", "sysprep", "memoryDump",
                       "containerPath")
ACCESS_CRED_SUFFIX = "-access-cred"
MIB = 1024 * 1024


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ""


def _obj(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _secret_ref(value: Any) -> bool:
    return isinstance(value, Mapping) and bool(_text(value.get("name")))


def _cloud_init(body: Mapping[str, Any], at: str, kind: str, out: list[Problem]) -> None:
    """Upstream's size and source-count rules for one cloud-init volume ``at``."""
    p = f"{at}.{kind}"

    def count(secret: str, b64: str, raw: str, what: str, limit: int, ref: str) -> int:
        n, size = 0, 0
        if _secret_ref(body.get(secret)):
            n += 1
        encoded = _text(body.get(b64))
        if encoded:
            n += 1
            try:
                size = len(base64.b64decode(encoded, validate=True))
            except (binascii.Error, ValueError):
                out.append(Problem(f"{p}.{b64}", f"{p}.{b64}.{kind}.{b64} is not a valid "
                                   "base64 value.", verbatim=True))
        plain = _text(body.get(raw))
        if plain:
            n += 1
            size = len(plain.encode())
        if n > 1:
            once = "userdatasource" if what == "userdata" else "networkdata source"
            out.append(Problem(p, f"{p} must have only one {once} set.", verbatim=True))
        if size > limit:
            out.append(Problem(p, f"{p} {what} exceeds {limit} byte limit. Should use {ref} "
                               "for larger data.", verbatim=True))
        return n

    users = count("secretRef", "userDataBase64", "userData", "userdata",
                  CLOUD_INIT_USER_MAX_LEN, "UserDataSecretRef")
    networks = count("networkDataSecretRef", "networkDataBase64", "networkData", "networkdata",
                     CLOUD_INIT_NETWORK_MAX_LEN, "NetworkDataSecretRef")
    if users == 0 and networks == 0:
        out.append(Problem(p, f"{p} must have at least one userdatasource or one "
                           "networkdatasource set.", verbatim=True))


def _claim_name(body: Any, field: str, out: list[Problem]) -> None:
    if not isinstance(body, Mapping) or not _text(body.get("claimName")):
        out.append(Problem(f"{field}.claimName", "required"))


def _capacity(body: Any, field: str, name: str, out: list[Problem]) -> None:
    raw = body.get("capacity") if isinstance(body, Mapping) else None
    if raw is None:
        out.append(Problem(f"{field}.capacity", "required"))
        return
    try:
        size = parse_bytes(str(raw))
    except ValueError as err:
        out.append(Problem(f"{field}.capacity", str(err)))
        return
    if size // MIB == 0:  # the launcher rounds down to 1 MiB, as upstream
        out.append(Problem(f"{field}.capacity", f"the size for volume {name} is too low"))


PULL_POLICIES = ("Always", "IfNotPresent", "Never")


def _go_clean_join(path: str) -> str:
    """Go's ``filepath.Join("/", path)``: cleaned, one leading slash."""
    cleaned = posixpath.normpath("/" + path)
    return "/" + cleaned.lstrip("/")


def _container_disk(body: Any, at: str, out: list[Problem]) -> None:
    """Upstream's ``ValidateContainerDisks`` (the path) and the API's required image."""
    if not isinstance(body, Mapping):
        out.append(Problem(at, "must be an object"))
        return
    if not _text(body.get("image")):
        out.append(Problem(f"{at}.image", "required"))
    policy = body.get("imagePullPolicy")
    if policy is not None and policy not in PULL_POLICIES:
        out.append(Problem(f"{at}.imagePullPolicy", f"Unsupported value: {policy!r}:"
                           f" supported values: {', '.join(repr(p) for p in PULL_POLICIES)}"))
    path = body.get("path")
    if path:
        if path == "/":
            out.append(Problem(at, f"{at} must not point to root", verbatim=True))
        elif _go_clean_join(path) != path.rstrip("/"):
            out.append(Problem(at, f"{at} must be an absolute path to a file without"
                               " relative components", verbatim=True))


def volume_source_problems(vol: Mapping[str, Any], at: str) -> list[Problem]:
    """Problems of one volume's source (the count of sources is checked by the caller)."""
    out: list[Problem] = []
    name = _text(vol.get("name"))
    for source in UNSUPPORTED_SOURCES:
        if vol.get(source) is not None:
            out.append(Problem(f"{at}.{source}", "this volume source is not supported by "
                               "rootdisk's VM runtime (supported: "
                               f"{', '.join(SUPPORTED_SOURCES)})"))
    for kind in CLOUD_INIT_SOURCES:
        body = vol.get(kind)
        if body is None:
            continue
        if not isinstance(body, Mapping):
            out.append(Problem(f"{at}.{kind}", "must be an object"))
            continue
        _cloud_init(body, at, kind, out)
        for ref in ("secretRef", "networkDataSecretRef"):
            if body.get(ref) is not None and not _secret_ref(body.get(ref)):
                out.append(Problem(f"{at}.{kind}.{ref}.name", "required"))
    if vol.get("persistentVolumeClaim") is not None:
        _claim_name(vol["persistentVolumeClaim"], f"{at}.persistentVolumeClaim", out)
    if vol.get("ephemeral") is not None:
        eph = vol["ephemeral"]
        claim = eph.get("persistentVolumeClaim") if isinstance(eph, Mapping) else None
        if claim is None:
            out.append(Problem(f"{at}.ephemeral.persistentVolumeClaim", "required"))
        else:
            _claim_name(claim, f"{at}.ephemeral.persistentVolumeClaim", out)
    if vol.get("emptyDisk") is not None:
        _capacity(vol["emptyDisk"], f"{at}.emptyDisk", name, out)
    if vol.get("containerDisk") is not None:
        _container_disk(vol["containerDisk"], f"{at}.containerDisk", out)
    if vol.get("dataVolume") is not None:
        dv = vol["dataVolume"]
        if not isinstance(dv, Mapping) or not _text(dv.get("name")):
            out.append(Problem(f"{at}.name", "DataVolume 'name' must be set", verbatim=True))
    return out


def access_credential_problems(spec: Mapping[str, Any], at: str) -> list[Problem]:
    """Upstream's accessCredentials rules; the qemuGuestAgent method and userPassword
    (both through the guest agent) are refused: this runtime has no guest agent channel."""
    out: list[Problem] = []
    creds = spec.get("accessCredentials")
    if creds is None:
        return out
    if not isinstance(creds, list):
        return [Problem(f"{at}.accessCredentials", "must be a list")]
    volumes = [v for v in spec.get("volumes") or [] if isinstance(v, Mapping)]
    has_nocloud = any(v.get("cloudInitNoCloud") is not None for v in volumes)
    has_configdrive = any(v.get("cloudInitConfigDrive") is not None for v in volumes)
    for i, cred in enumerate(creds):
        f = f"{at}.accessCredentials[{i}]"
        if not isinstance(cred, Mapping):
            out.append(Problem(f, "must be an object"))
            continue
        kinds = 0
        ssh = cred.get("sshPublicKey")
        if isinstance(ssh, Mapping):
            kinds += 1
            source = _obj(ssh.get("source"))
            method = _obj(ssh.get("propagationMethod"))
            methods = 0
            if method.get("noCloud") is not None:
                methods += 1
                if not has_nocloud:
                    out.append(Problem(f"{f}.sshPublicKey.propagationMethod", (
                        f"{f} requires a noCloud volume to exist when the noCloud "
                        "propagationMethod is in use."), verbatim=True))
            if method.get("configDrive") is not None:
                methods += 1
                if not has_configdrive:
                    out.append(Problem(f"{f}.sshPublicKey.propagationMethod", (
                        f"{f} requires a configDrive volume to exist when the configDrive "
                        "propagationMethod is in use."), verbatim=True))
            agent = method.get("qemuGuestAgent")
            if agent is not None:
                methods += 1
                users = agent.get("users") if isinstance(agent, Mapping) else None
                if not users:
                    out.append(Problem(
                        f"{f}.sshPublicKey.propagationMethod.qemuGuestAgent.users",
                        f"{f} requires at least one user to be present in the users list",
                        verbatim=True))
                out.append(Problem(
                    f"{f}.sshPublicKey.propagationMethod.qemuGuestAgent",
                    "not supported by rootdisk's VM runtime (it has no guest agent "
                    "channel): use the noCloud or configDrive propagationMethod"))
            secret = source.get("secret")
            if not isinstance(secret, Mapping):
                out.append(Problem(f"{f}.sshPublicKey.source",
                                   f"{f} must have exactly one source set", verbatim=True))
            else:
                _secret_name(secret.get("secretName"), f"{f}.sshPublicKey.source.secret",
                             out)
            if methods != 1:
                out.append(Problem(f"{f}.sshPublicKey.propagationMethod",
                                   f"{f} must have exactly one propagationMethod set",
                                   verbatim=True))
        if cred.get("userPassword") is not None:
            kinds += 1
            out.append(Problem(f"{f}.userPassword", "not supported by rootdisk's VM runtime "
                               "(it needs the qemuGuestAgent propagationMethod, and the "
                               "runtime has no guest agent channel)"))
        if kinds != 1:
            out.append(Problem(f, f"{f} must have exactly one access credential type set",
                               verbatim=True))
    return out


def _secret_name(value: Any, field: str, out: list[Problem]) -> None:
    """The Secret is mounted as pod volume ``<secret>-access-cred`` (upstream's name), so
    that must be a valid pod volume name."""
    name = _text(value)
    if not name:
        out.append(Problem(f"{field}.secretName", "required"))
        return
    problem = volume_name_problem(name + ACCESS_CRED_SUFFIX)
    if problem is not None:
        out.append(Problem(f"{field}.secretName", f"the launcher pod mounts this Secret as "
                           f"volume {name + ACCESS_CRED_SUFFIX!r}: {problem}"))
