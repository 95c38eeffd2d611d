"""How one container is confined: identity, capabilities, seccomp, devices (pure).

The decisions a container runtime takes from a pod's ``securityContext`` (merged from
pod and container level, the container's fields winning) are made here, apart from the
sandbox that applies them, so they can be checked field by field:

- identity: ``runAsUser``/``runAsGroup`` (the images here have no ``USER``, so the
  default is 0:0 as for an image without one), supplementary groups
  ``supplementalGroups`` plus ``fsGroup``; ``runAsNonRoot`` with a uid of 0 refuses the
  container with the kubelet's own messages (``CreateContainerConfigError``).
- capabilities: containerd's default set, changed by ``capabilities.add/drop`` as
  containerd does (``drop: [ALL]`` starts from nothing, ``add: [ALL]`` gives all); a
  non-root process keeps them only in its bounding set (no ambient capabilities), so
  its effective set is empty, as under containerd. ``privileged`` gives every capability
  and every host device, and no seccomp filter.
- seccomp: ``RuntimeDefault`` unless ``Unconfined`` is asked for; an unset profile is
  ``RuntimeDefault`` too (the kubelet's ``--seccomp-default``). Localhost profiles are
  refused: there is no profile directory on this node.
- devices: the defaults every container gets (/dev/null…), /dev/kvm when the container
  asks for the ``devices.kubevirt.io/kvm`` resource; its volumeDevices are added by the
  worker.

:func:`setpriv_argv` turns a :class:`Confinement` into the argv prefix that switches
identity and capabilities inside the sandbox (util-linux ``setpriv``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from vocab import kubevirt

Obj = Mapping[str, Any]

ALL_CAPS: tuple[str, ...] = (
    "CHOWN", "DAC_OVERRIDE", "DAC_READ_SEARCH", "FOWNER", "FSETID", "KILL", "SETGID",
    "SETUID", "SETPCAP", "LINUX_IMMUTABLE", "NET_BIND_SERVICE", "NET_BROADCAST",
    "NET_ADMIN", "NET_RAW", "IPC_LOCK", "IPC_OWNER", "SYS_MODULE", "SYS_RAWIO",
    "SYS_CHROOT", "SYS_PTRACE", "SYS_PACCT", "SYS_ADMIN", "SYS_BOOT", "SYS_NICE",
    "SYS_RESOURCE", "SYS_TIME", "SYS_TTY_CONFIG", "MKNOD", "LEASE", "AUDIT_WRITE",
    "AUDIT_CONTROL", "SETFCAP", "MAC_OVERRIDE", "MAC_ADMIN", "SYSLOG", "WAKE_ALARM",
    "BLOCK_SUSPEND", "AUDIT_READ", "PERFMON", "BPF", "CHECKPOINT_RESTORE",
)
"""Linux capabilities in bit order (bit i is ``ALL_CAPS[i]``)."""

DEFAULT_CAPS: frozenset[str] = frozenset({
    "CHOWN", "DAC_OVERRIDE", "FSETID", "FOWNER", "MKNOD", "NET_RAW", "SETGID", "SETUID",
    "SETFCAP", "SETPCAP", "NET_BIND_SERVICE", "SYS_CHROOT", "KILL", "AUDIT_WRITE",
})
"""containerd's default capability set for a non-privileged container."""

DEFAULT_DEVICES: tuple[str, ...] = (
    "/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom", "/dev/tty")
"""What every container gets (bubblewrap's ``--dev`` binds exactly these, plus a
private devpts)."""

KVM_RESOURCE = kubevirt.KVM_RESOURCE
KVM_DEVICE = "/dev/kvm"

RUNTIME_DEFAULT = "RuntimeDefault"
UNCONFINED = "Unconfined"


class SecurityError(Exception):
    """The securityContext cannot be honoured: the container is not started
    (``CreateContainerConfigError`` with this message)."""


@dataclass(frozen=True)
class Confinement:
    uid: int = 0
    gid: int = 0
    groups: tuple[int, ...] = ()
    caps: frozenset[str] = DEFAULT_CAPS
    """The bounding set; also the effective set when ``uid`` is 0."""
    privileged: bool = False
    seccomp: bool = True
    """Whether the runtime's default seccomp filter applies."""
    read_only_root: bool = False
    devices: tuple[str, ...] = DEFAULT_DEVICES
    """Host character devices bound at the same path (volumeDevices come on top)."""
    fs_group: int | None = None

    @property
    def home(self) -> str:
        """HOME as a runtime sets it for a user without a passwd entry (root: /root)."""
        return "/root" if self.uid == 0 else "/"


def _uint(value: object, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < 2**32:
        raise SecurityError(f"{where}: must be an integer in [0, 2^32), got {value!r}")
    return value


def _int_field(ctx: Obj, name: str, where: str) -> int | None:
    value = ctx.get(name)
    return None if value is None else _uint(value, f"{where}.{name}")


def _cap_name(raw: object, where: str) -> str:
    if not isinstance(raw, str):
        raise SecurityError(f"{where}: capability names are strings, got {raw!r}")
    name = raw.upper().removeprefix("CAP_")
    if name != "ALL" and name not in ALL_CAPS:
        raise SecurityError(f"{where}: unknown capability {raw!r}")
    return name


def capabilities(*, add: Sequence[object], drop: Sequence[object],
                 where: str = "securityContext.capabilities") -> frozenset[str]:
    """containerd's rule: ``add: [ALL]`` is every capability but the dropped ones;
    otherwise the default set (empty with ``drop: [ALL]``) minus drops, plus adds."""
    adds = {_cap_name(c, f"{where}.add") for c in add}
    drops = {_cap_name(c, f"{where}.drop") for c in drop}
    if "ALL" in adds:
        return frozenset(ALL_CAPS) - (drops - {"ALL"})
    base = frozenset() if "ALL" in drops else DEFAULT_CAPS
    return frozenset((base - drops) | adds)


def _pod_id(pod: Obj) -> str:
    meta = pod.get("metadata") or {}
    return f"{meta.get('name', '')}_{meta.get('namespace', '')}({meta.get('uid', '')})"


def _wants_kvm(container: Obj) -> bool:
    res = container.get("resources") or {}
    return any(KVM_RESOURCE in (res.get(k) or {}) for k in ("limits", "requests"))


def resolve(*, pod: Obj, container: Obj) -> Confinement:
    """The confinement of ``container`` in ``pod``; raises SecurityError."""
    pod_ctx: Obj = (pod.get("spec") or {}).get("securityContext") or {}
    ctx: Obj = container.get("securityContext") or {}
    cname = container.get("name", "")
    where_c = f"containers[{cname}].securityContext"

    def merged(name: str) -> Any:
        return ctx[name] if ctx.get(name) is not None else pod_ctx.get(name)

    uid = _int_field(ctx, "runAsUser", where_c)
    if uid is None:
        uid = _int_field(pod_ctx, "runAsUser", "spec.securityContext")
    gid = _int_field(ctx, "runAsGroup", where_c)
    if gid is None:
        gid = _int_field(pod_ctx, "runAsGroup", "spec.securityContext")
    if merged("runAsNonRoot") and (uid or 0) == 0:
        if uid is None:
            raise SecurityError("container has runAsNonRoot and image will run as root "
                                f"(pod: \"{_pod_id(pod)}\", container: {cname})")
        raise SecurityError("container's runAsUser breaks non-root policy "
                            f"(pod: \"{_pod_id(pod)}\", container: {cname})")
    fs_group = _int_field(pod_ctx, "fsGroup", "spec.securityContext")
    groups: list[int] = []
    for i, g in enumerate(pod_ctx.get("supplementalGroups") or []):
        value = _uint(g, f"spec.securityContext.supplementalGroups[{i}]")
        if value not in groups:
            groups.append(value)
    if fs_group is not None and fs_group not in groups:
        groups.append(fs_group)

    privileged = bool(ctx.get("privileged"))
    caps_spec: Obj = ctx.get("capabilities") or {}
    caps = frozenset(ALL_CAPS) if privileged else capabilities(
        add=caps_spec.get("add") or [], drop=caps_spec.get("drop") or [],
        where=f"{where_c}.capabilities")

    profile: Obj = merged("seccompProfile") or {}
    ptype = profile.get("type") or RUNTIME_DEFAULT
    if ptype not in (RUNTIME_DEFAULT, UNCONFINED):
        where = where_c if ctx.get("seccompProfile") else "spec.securityContext"
        raise SecurityError(f"{where}.seccompProfile.type: {ptype!r} is not supported "
                            f"on this node (RuntimeDefault or Unconfined)")
    devices = DEFAULT_DEVICES + ((KVM_DEVICE,) if _wants_kvm(container) else ())
    return Confinement(
        uid=uid or 0, gid=gid or 0, groups=tuple(groups), caps=caps,
        privileged=privileged, seccomp=not privileged and ptype == RUNTIME_DEFAULT,
        read_only_root=bool(ctx.get("readOnlyRootFilesystem")), devices=devices,
        fs_group=fs_group)


def cap_mask(caps: frozenset[str]) -> int:
    """The bit mask of ``caps`` as /proc/PID/status shows it (CapEff...)."""
    return sum(1 << i for i, name in enumerate(ALL_CAPS) if name in caps)


def setpriv_argv(c: Confinement, *, setpriv: str = "setpriv") -> list[str]:
    """The argv prefix that becomes ``c``'s identity and capabilities, then execs the
    command (which follows). ``no_new_privs`` is set in every case."""
    argv = [setpriv, f"--reuid={c.uid}", f"--regid={c.gid}"]
    argv.append("--groups=" + ",".join(map(str, c.groups)) if c.groups else "--clear-groups")
    if not c.privileged:
        keep = "".join(f",+{name.lower()}" for name in ALL_CAPS if name in c.caps)
        argv.append(f"--bounding-set=-all{keep}")
    argv += ["--inh-caps=-all", "--no-new-privs", "--"]
    return argv
