"""The Pod Security Standards' checks, as k8s.io/pod-security-admission v0.32 (Kubernetes
1.32) makes them (pure).

Each check reads a pod's metadata and spec (as JSON objects) and answers None (allowed)
or ``(reason, detail)`` with upstream's words; :func:`evaluate` runs the checks of a
level at a version in upstream's order (baseline checks first, then restricted ones,
each group by check id; a restricted check replaces the baseline check it overrides).
A version newer than the newest check (and ``latest``) is evaluated as v1.32.

Not followed: the ``UserNamespacesPodSecurityStandards`` feature gate (alpha, off by
default), which relaxes runAsNonRoot/runAsUser/procMount for ``hostUsers: false`` pods.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..errors import go_quote

Obj = Mapping[str, Any]
Result = tuple[str, str] | None
CheckFn = Callable[[Obj, Obj], Result]
Version = tuple[int, int]

BASELINE = "baseline"
RESTRICTED = "restricted"
PRIVILEGED = "privileged"
NEWEST: Version = (1, 32)
"""The newest version a check changed at (``latest`` evaluates as this one)."""


def _plural(singular: str, plural: str, count: int) -> str:
    return singular if count == 1 else plural


def _join_quote(items: Sequence[str]) -> str:
    return '"' + '", "'.join(items) + '"' if items else ""


def _containers(spec: Obj) -> Iterator[Obj]:
    """Init containers, containers, then ephemeral containers (upstream's visitor)."""
    for key in ("initContainers", "containers", "ephemeralContainers"):
        for c in spec.get(key) or []:
            if isinstance(c, Mapping):
                yield c


def _ctx(c: Obj) -> Obj:
    ctx = c.get("securityContext")
    return ctx if isinstance(ctx, Mapping) else {}


def _pod_ctx(spec: Obj) -> Obj:
    ctx = spec.get("securityContext")
    return ctx if isinstance(ctx, Mapping) else {}


def _name(c: Obj) -> str:
    return str(c.get("name") or "")


def _windows(spec: Obj) -> bool:
    return ((spec.get("os") or {}).get("name")) == "windows"


def _containers_phrase(names: Sequence[str]) -> str:
    return f"{_plural('container', 'containers', len(names))} {_join_quote(names)}"


# -- baseline ----------------------------------------------------------------------------

APPARMOR_ANNOTATION_PREFIX = "container.apparmor.security.beta.kubernetes.io/"


def _apparmor_type_ok(profile: Obj) -> bool:
    return profile.get("type") in ("RuntimeDefault", "Localhost")


def app_armor_profile_1_0(meta: Obj, spec: Obj) -> Result:
    bad_setters: list[str] = []
    bad_values: set[str] = set()
    pod_profile = _pod_ctx(spec).get("appArmorProfile")
    if isinstance(pod_profile, Mapping) and not _apparmor_type_ok(pod_profile):
        bad_setters.append("pod")
        bad_values.add(str(pod_profile.get("type") or ""))
    bad_containers = []
    for c in _containers(spec):
        profile = _ctx(c).get("appArmorProfile")
        if isinstance(profile, Mapping) and not _apparmor_type_ok(profile):
            bad_containers.append(_name(c))
            bad_values.add(str(profile.get("type") or ""))
    if bad_containers:
        bad_setters.append(_containers_phrase(bad_containers))
    forbidden = sorted(
        f"{k}={go_quote(str(v))}" for k, v in (meta.get("annotations") or {}).items()
        if k.startswith(APPARMOR_ANNOTATION_PREFIX)
        and not (not v or v == "runtime/default" or str(v).startswith("localhost/")))
    values = sorted(bad_values)
    if forbidden:
        values += forbidden
        bad_setters.append(_plural("annotation", "annotations", len(forbidden)))
    if not bad_setters:
        return None
    return (_plural("forbidden AppArmor profile", "forbidden AppArmor profiles", len(values)),
            f"{' and '.join(bad_setters)} must not set AppArmor profile type to "
            f"{_join_quote(values)}")


BASELINE_CAPABILITIES = frozenset({
    "AUDIT_WRITE", "CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "MKNOD",
    "NET_BIND_SERVICE", "SETFCAP", "SETGID", "SETPCAP", "SETUID", "SYS_CHROOT"})


def _caps(c: Obj, key: str) -> list[str]:
    caps = _ctx(c).get("capabilities")
    return [str(x) for x in (caps.get(key) or [])] if isinstance(caps, Mapping) else []


def capabilities_baseline_1_0(meta: Obj, spec: Obj) -> Result:
    bad_containers = []
    added: set[str] = set()
    for c in _containers(spec):
        extra = [cap for cap in _caps(c, "add") if cap not in BASELINE_CAPABILITIES]
        if extra:
            bad_containers.append(_name(c))
            added.update(extra)
    if not bad_containers:
        return None
    return ("non-default capabilities",
            f"{_containers_phrase(bad_containers)} must not include "
            f"{_join_quote(sorted(added))} in securityContext.capabilities.add")


def host_namespaces_1_0(meta: Obj, spec: Obj) -> Result:
    found = [f"{key}=true" for key in ("hostNetwork", "hostPID", "hostIPC") if spec.get(key)]
    return ("host namespaces", ", ".join(found)) if found else None


def _volumes(spec: Obj) -> list[Obj]:
    return [v for v in spec.get("volumes") or [] if isinstance(v, Mapping)]


def host_path_volumes_1_0(meta: Obj, spec: Obj) -> Result:
    names = [str(v.get("name") or "") for v in _volumes(spec) if v.get("hostPath") is not None]
    if not names:
        return None
    return "hostPath volumes", f"{_plural('volume', 'volumes', len(names))} {_join_quote(names)}"


def host_ports_1_0(meta: Obj, spec: Obj) -> Result:
    bad_containers = []
    ports: set[str] = set()
    for c in _containers(spec):
        used = [str(p.get("hostPort")) for p in c.get("ports") or []
                if isinstance(p, Mapping) and p.get("hostPort")]
        if used:
            bad_containers.append(_name(c))
            ports.update(used)
    if not bad_containers:
        return None
    n = len(bad_containers)
    return ("hostPort",
            f"{_containers_phrase(bad_containers)} {_plural('uses', 'use', n)} "
            f"{_plural('hostPort', 'hostPorts', len(ports))} {', '.join(sorted(ports))}")


def privileged_1_0(meta: Obj, spec: Obj) -> Result:
    bad = [_name(c) for c in _containers(spec) if _ctx(c).get("privileged") is True]
    if not bad:
        return None
    return "privileged", f"{_containers_phrase(bad)} must not set securityContext.privileged=true"


def proc_mount_1_0(meta: Obj, spec: Obj) -> Result:
    bad = []
    kinds: set[str] = set()
    for c in _containers(spec):
        value = _ctx(c).get("procMount")
        if value is not None and value != "Default":
            bad.append(_name(c))
            kinds.add(str(value))
    if not bad:
        return None
    return ("procMount", f"{_containers_phrase(bad)} must not set securityContext.procMount "
                         f"to {_join_quote(sorted(kinds))}")


SELINUX_TYPES_1_0 = frozenset({"", "container_t", "container_init_t", "container_kvm_t"})
SELINUX_TYPES_1_31 = SELINUX_TYPES_1_0 | {"container_engine_t"}


def _selinux(meta: Obj, spec: Obj, allowed: frozenset[str]) -> Result:
    bad_types: set[str] = set()
    flags = {"user": False, "role": False}

    def valid(opts: Obj) -> bool:
        ok = True
        kind = str(opts.get("type") or "")
        if kind not in allowed:
            ok = False
            bad_types.add(kind)
        for key in ("user", "role"):
            if opts.get(key):
                ok = False
                flags[key] = True
        return ok

    bad_setters = []
    pod_opts = _pod_ctx(spec).get("seLinuxOptions")
    if isinstance(pod_opts, Mapping) and not valid(pod_opts):
        bad_setters.append("pod")
    bad = []
    for c in _containers(spec):
        opts = _ctx(c).get("seLinuxOptions")
        if isinstance(opts, Mapping) and not valid(opts):
            bad.append(_name(c))
    if bad:
        bad_setters.append(_containers_phrase(bad))
    if not bad_setters:
        return None
    data = []
    if bad_types:
        data.append(f"{_plural('type', 'types', len(bad_types))} "
                    f"{_join_quote(sorted(bad_types))}")
    data += [f"{key} may not be set" for key in ("user", "role") if flags[key]]
    return ("seLinuxOptions", f"{' and '.join(bad_setters)} set forbidden "
                              f"securityContext.seLinuxOptions: {'; '.join(data)}")


def selinux_options_1_0(meta: Obj, spec: Obj) -> Result:
    return _selinux(meta, spec, SELINUX_TYPES_1_0)


def selinux_options_1_31(meta: Obj, spec: Obj) -> Result:
    return _selinux(meta, spec, SELINUX_TYPES_1_31)


SECCOMP_POD_ANNOTATION = "seccomp.security.alpha.kubernetes.io/pod"
SECCOMP_CONTAINER_ANNOTATION = "container.seccomp.security.alpha.kubernetes.io/"


def _seccomp_type_ok(profile: Obj) -> bool:
    return profile.get("type") in ("Localhost", "RuntimeDefault")


def seccomp_profile_baseline_1_0(meta: Obj, spec: Obj) -> Result:
    annotations = meta.get("annotations") or {}

    def ok(v: str) -> bool:
        return v in ("runtime/default", "docker/default") or v.startswith("localhost/")

    forbidden = set()
    keys = [SECCOMP_POD_ANNOTATION] + [SECCOMP_CONTAINER_ANNOTATION + _name(c)
                                       for c in _containers(spec)]
    for key in keys:
        if key in annotations and not ok(str(annotations[key])):
            forbidden.add(f"{key}={go_quote(str(annotations[key]))}")
    if not forbidden:
        return None
    return ("seccompProfile", f"forbidden {_plural('annotation', 'annotations', len(forbidden))} "
                              f"{', '.join(sorted(forbidden))}")


def _seccomp_fields(spec: Obj, *, required: bool) -> Result:
    bad_setters = []
    bad_values: set[str] = set()
    pod_set = False
    pod_profile = _pod_ctx(spec).get("seccompProfile")
    if isinstance(pod_profile, Mapping):
        if not _seccomp_type_ok(pod_profile):
            bad_setters.append("pod")
            bad_values.add(str(pod_profile.get("type") or ""))
        else:
            pod_set = True
    explicit, implicit = [], []
    for c in _containers(spec):
        profile = _ctx(c).get("seccompProfile")
        if isinstance(profile, Mapping):
            if not _seccomp_type_ok(profile):
                explicit.append(_name(c))
                bad_values.add(str(profile.get("type") or ""))
        elif not pod_set:
            implicit.append(_name(c))
    if explicit:
        bad_setters.append(_containers_phrase(explicit))
    if bad_setters:
        return ("seccompProfile", f"{' and '.join(bad_setters)} must not set "
                                  f"securityContext.seccompProfile.type to "
                                  f"{_join_quote(sorted(bad_values))}")
    if required and implicit:
        return ("seccompProfile", f"pod or {_containers_phrase(implicit)} must set "
                                  'securityContext.seccompProfile.type to "RuntimeDefault" '
                                  'or "Localhost"')
    return None


def seccomp_profile_baseline_1_19(meta: Obj, spec: Obj) -> Result:
    return _seccomp_fields(spec, required=False)


SYSCTLS_1_0 = frozenset({"kernel.shm_rmid_forced", "net.ipv4.ip_local_port_range",
                         "net.ipv4.tcp_syncookies", "net.ipv4.ping_group_range",
                         "net.ipv4.ip_unprivileged_port_start"})
SYSCTLS_1_27 = SYSCTLS_1_0 | {"net.ipv4.ip_local_reserved_ports"}
SYSCTLS_1_29 = SYSCTLS_1_27 | {"net.ipv4.tcp_keepalive_time", "net.ipv4.tcp_fin_timeout",
                               "net.ipv4.tcp_keepalive_intvl", "net.ipv4.tcp_keepalive_probes"}
SYSCTLS_1_32 = SYSCTLS_1_29 | {"net.ipv4.tcp_rmem", "net.ipv4.tcp_wmem"}


def _sysctls(spec: Obj, allowed: frozenset[str]) -> Result:
    bad = [str(s.get("name") or "") for s in _pod_ctx(spec).get("sysctls") or []
           if isinstance(s, Mapping) and s.get("name") not in allowed]
    return ("forbidden sysctls", ", ".join(bad)) if bad else None


def sysctls_1_0(meta: Obj, spec: Obj) -> Result:
    return _sysctls(spec, SYSCTLS_1_0)


def sysctls_1_27(meta: Obj, spec: Obj) -> Result:
    return _sysctls(spec, SYSCTLS_1_27)


def sysctls_1_29(meta: Obj, spec: Obj) -> Result:
    return _sysctls(spec, SYSCTLS_1_29)


def sysctls_1_32(meta: Obj, spec: Obj) -> Result:
    return _sysctls(spec, SYSCTLS_1_32)


def _host_process(ctx: Obj) -> bool:
    opts = ctx.get("windowsOptions")
    return isinstance(opts, Mapping) and opts.get("hostProcess") is True


def windows_host_process_1_0(meta: Obj, spec: Obj) -> Result:
    setters = ["pod"] if _host_process(_pod_ctx(spec)) else []
    bad = [_name(c) for c in _containers(spec) if _host_process(_ctx(c))]
    if bad:
        setters.append(_containers_phrase(bad))
    if not setters:
        return None
    return ("hostProcess", f"{' and '.join(setters)} must not set "
                           "securityContext.windowsOptions.hostProcess=true")


# -- restricted --------------------------------------------------------------------------


def allow_privilege_escalation_1_8(meta: Obj, spec: Obj) -> Result:
    bad = [_name(c) for c in _containers(spec)
           if _ctx(c).get("allowPrivilegeEscalation") is not False]
    if not bad:
        return None
    return ("allowPrivilegeEscalation != false",
            f"{_containers_phrase(bad)} must set securityContext.allowPrivilegeEscalation=false")


def allow_privilege_escalation_1_25(meta: Obj, spec: Obj) -> Result:
    return None if _windows(spec) else allow_privilege_escalation_1_8(meta, spec)


def capabilities_restricted_1_22(meta: Obj, spec: Obj) -> Result:
    missing_drop, adding = [], []
    forbidden: set[str] = set()
    for c in _containers(spec):
        if not isinstance(_ctx(c).get("capabilities"), Mapping):
            missing_drop.append(_name(c))
            continue
        if "ALL" not in _caps(c, "drop"):
            missing_drop.append(_name(c))
        extra = [cap for cap in _caps(c, "add") if cap != "NET_BIND_SERVICE"]
        if extra:
            adding.append(_name(c))
            forbidden.update(extra)
    details = []
    if missing_drop:
        details.append(f'{_containers_phrase(missing_drop)} must set '
                       'securityContext.capabilities.drop=["ALL"]')
    if adding:
        details.append(f"{_containers_phrase(adding)} must not include "
                       f"{_join_quote(sorted(forbidden))} in securityContext.capabilities.add")
    return ("unrestricted capabilities", "; ".join(details)) if details else None


def capabilities_restricted_1_25(meta: Obj, spec: Obj) -> Result:
    return None if _windows(spec) else capabilities_restricted_1_22(meta, spec)


ALLOWED_VOLUMES = ("configMap", "csi", "downwardAPI", "emptyDir", "ephemeral", "image",
                   "persistentVolumeClaim", "projected", "secret")
RESTRICTED_VOLUME_TYPES = (
    "hostPath", "gcePersistentDisk", "awsElasticBlockStore", "gitRepo", "nfs", "iscsi",
    "glusterfs", "rbd", "flexVolume", "cinder", "cephfs", "flocker", "fc", "azureFile",
    "vsphereVolume", "quobyte", "azureDisk", "photonPersistentDisk", "portworxVolume",
    "scaleIO", "storageos")
"""In upstream's order of precedence; any other source is ``unknown``."""


def restricted_volumes_1_0(meta: Obj, spec: Obj) -> Result:
    bad = []
    kinds: set[str] = set()
    for v in _volumes(spec):
        if any(v.get(k) is not None for k in ALLOWED_VOLUMES):
            continue
        bad.append(str(v.get("name") or ""))
        kinds.add(next((k for k in RESTRICTED_VOLUME_TYPES if v.get(k) is not None),
                       "unknown"))
    if not bad:
        return None
    n = len(bad)
    return ("restricted volume types",
            f"{_plural('volume', 'volumes', n)} {_join_quote(bad)} {_plural('uses', 'use', n)} "
            f"{_plural('restricted volume type', 'restricted volume types', len(kinds))} "
            f"{_join_quote(sorted(kinds))}")


def run_as_non_root_1_0(meta: Obj, spec: Obj) -> Result:
    bad_setters = []
    pod_value = _pod_ctx(spec).get("runAsNonRoot")
    if pod_value is False:
        bad_setters.append("pod")
    pod_non_root = pod_value is True
    explicit, implicit = [], []
    for c in _containers(spec):
        value = _ctx(c).get("runAsNonRoot")
        if value is not None:
            if value is False:
                explicit.append(_name(c))
        elif not pod_non_root:
            implicit.append(_name(c))
    if explicit:
        bad_setters.append(_containers_phrase(explicit))
    if bad_setters:
        return ("runAsNonRoot != true",
                f"{' and '.join(bad_setters)} must not set securityContext.runAsNonRoot=false")
    if implicit:
        return ("runAsNonRoot != true",
                f"pod or {_containers_phrase(implicit)} must set "
                "securityContext.runAsNonRoot=true")
    return None


def _is_zero(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value == 0


def run_as_user_1_23(meta: Obj, spec: Obj) -> Result:
    bad_setters = ["pod"] if _is_zero(_pod_ctx(spec).get("runAsUser")) else []
    bad = [_name(c) for c in _containers(spec) if _is_zero(_ctx(c).get("runAsUser"))]
    if bad:
        bad_setters.append(_containers_phrase(bad))
    if not bad_setters:
        return None
    return "runAsUser=0", f"{' and '.join(bad_setters)} must not set runAsUser=0"


def seccomp_profile_restricted_1_19(meta: Obj, spec: Obj) -> Result:
    return _seccomp_fields(spec, required=True)


def seccomp_profile_restricted_1_25(meta: Obj, spec: Obj) -> Result:
    return None if _windows(spec) else seccomp_profile_restricted_1_19(meta, spec)


# -- the registry ------------------------------------------------------------------------


@dataclass(frozen=True)
class Check:
    id: str
    level: str
    versions: tuple[tuple[Version, CheckFn], ...]
    """(minimum version, check) in increasing order."""
    overrides: str | None = None
    """The baseline check this restricted one replaces."""

    def at(self, version: Version) -> CheckFn | None:
        chosen = None
        for minimum, fn in self.versions:
            if minimum <= version:
                chosen = fn
        return chosen


CHECKS: tuple[Check, ...] = (
    Check("allowPrivilegeEscalation", RESTRICTED, (((1, 8), allow_privilege_escalation_1_8),
                                                   ((1, 25), allow_privilege_escalation_1_25))),
    Check("appArmorProfile", BASELINE, (((1, 0), app_armor_profile_1_0),)),
    Check("capabilities_baseline", BASELINE, (((1, 0), capabilities_baseline_1_0),)),
    Check("capabilities_restricted", RESTRICTED, (((1, 22), capabilities_restricted_1_22),
                                                  ((1, 25), capabilities_restricted_1_25)),
          overrides="capabilities_baseline"),
    Check("hostNamespaces", BASELINE, (((1, 0), host_namespaces_1_0),)),
    Check("hostPathVolumes", BASELINE, (((1, 0), host_path_volumes_1_0),)),
    Check("hostPorts", BASELINE, (((1, 0), host_ports_1_0),)),
    Check("privileged", BASELINE, (((1, 0), privileged_1_0),)),
    Check("procMount", BASELINE, (((1, 0), proc_mount_1_0),)),
    Check("restrictedVolumes", RESTRICTED, (((1, 0), restricted_volumes_1_0),),
          overrides="hostPathVolumes"),
    Check("runAsNonRoot", RESTRICTED, (((1, 0), run_as_non_root_1_0),)),
    Check("runAsUser", RESTRICTED, (((1, 23), run_as_user_1_23),)),
    Check("seLinuxOptions", BASELINE, (((1, 0), selinux_options_1_0),
                                       ((1, 31), selinux_options_1_31))),
    Check("seccompProfile_baseline", BASELINE, (((1, 0), seccomp_profile_baseline_1_0),
                                                ((1, 19), seccomp_profile_baseline_1_19))),
    Check("seccompProfile_restricted", RESTRICTED,
          (((1, 19), seccomp_profile_restricted_1_19),
           ((1, 25), seccomp_profile_restricted_1_25)),
          overrides="seccompProfile_baseline"),
    Check("sysctls", BASELINE, (((1, 0), sysctls_1_0), ((1, 27), sysctls_1_27),
                                ((1, 29), sysctls_1_29), ((1, 32), sysctls_1_32))),
    Check("windowsHostProcess", BASELINE, (((1, 0), windows_host_process_1_0),)),
)


def checks_for(level: str, version: Version | None) -> list[CheckFn]:
    """The checks of ``level`` at ``version`` (None: latest), in upstream's order."""
    if level == PRIVILEGED:
        return []
    v = NEWEST if version is None or version > NEWEST else version
    ordered = sorted(CHECKS, key=lambda c: (c.level != BASELINE, c.id))  # byte order, as Go
    active = {c.id: c.at(v) for c in ordered}
    if level == BASELINE:
        return [fn for c in ordered if c.level == BASELINE and (fn := active[c.id])]
    overridden = {c.overrides for c in ordered
                  if c.level == RESTRICTED and c.overrides and active[c.id]}
    return [fn for c in ordered if c.id not in overridden and (fn := active[c.id])]


def evaluate(level: str, version: Version | None, meta: Obj, spec: Obj) -> list[tuple[str, str]]:
    """The (reason, detail) of every check the pod fails, in order."""
    out = []
    for fn in checks_for(level, version):
        result = fn(meta, spec)
        if result is not None:
            out.append(result)
    return out


def forbidden_detail(results: Sequence[tuple[str, str]]) -> str:
    """``reason (detail), reason (detail)``: upstream's aggregate message."""
    return ", ".join(f"{reason} ({detail})" if detail else reason for reason, detail in results)


def forbidden_reason(results: Sequence[tuple[str, str]]) -> str:
    return ", ".join(reason for reason, _ in results)
