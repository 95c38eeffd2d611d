"""Table tests of the confinement decisions: securityContext → identity, capabilities,
seccomp, devices; the setpriv argv; the seccomp deny list; the bwrap argv's mounts."""

from __future__ import annotations

from typing import Any

import pytest

from localcluster.kubelet import seccomp
from localcluster.kubelet.sandbox import Mount, SandboxSpec, bwrap_argv
from localcluster.kubelet.security import (
    ALL_CAPS,
    DEFAULT_CAPS,
    DEFAULT_DEVICES,
    Confinement,
    SecurityError,
    cap_mask,
    capabilities,
    resolve,
    setpriv_argv,
)


def pod(pod_ctx: dict[str, Any] | None = None, ctx: dict[str, Any] | None = None,
        **container: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    c: dict[str, Any] = {"name": "main", **container}
    if ctx is not None:
        c["securityContext"] = ctx
    p: dict[str, Any] = {"metadata": {"name": "p", "namespace": "ns", "uid": "u-1"},
                         "spec": {"containers": [c]}}
    if pod_ctx is not None:
        p["spec"]["securityContext"] = pod_ctx
    return p, c


def confine(pod_ctx: dict[str, Any] | None = None, ctx: dict[str, Any] | None = None,
            **container: Any) -> Confinement:
    p, c = pod(pod_ctx, ctx, **container)
    return resolve(pod=p, container=c)


def test_default_is_root_with_containerds_capabilities_and_seccomp() -> None:
    c = confine()
    assert (c.uid, c.gid, c.groups) == (0, 0, ())
    assert c.caps == DEFAULT_CAPS and "SYS_ADMIN" not in c.caps
    assert c.seccomp and not c.privileged and not c.read_only_root
    assert c.devices == DEFAULT_DEVICES and c.home == "/root"
    # containerd's default set, bit for bit (as CapEff shows it).
    assert f"{cap_mask(DEFAULT_CAPS):016x}" == "00000000a80425fb"


@pytest.mark.parametrize(("pod_ctx", "ctx", "want"), [
    ({"runAsUser": 107}, None, (107, 0, ())),
    ({"runAsUser": 107, "runAsGroup": 107}, None, (107, 107, ())),
    ({"runAsUser": 107}, {"runAsUser": 1000, "runAsGroup": 5}, (1000, 5, ())),
    ({"supplementalGroups": [4, 5, 4], "fsGroup": 6}, None, (0, 0, (4, 5, 6))),
    ({"fsGroup": 4, "supplementalGroups": [4]}, None, (0, 0, (4,))),
])
def test_identity(pod_ctx: dict[str, Any], ctx: dict[str, Any] | None,
                  want: tuple[int, int, tuple[int, ...]]) -> None:
    c = confine(pod_ctx, ctx)
    assert (c.uid, c.gid, c.groups) == want
    assert c.home == ("/root" if want[0] == 0 else "/")


@pytest.mark.parametrize(("pod_ctx", "ctx", "message"), [
    ({"runAsNonRoot": True}, None,
     'container has runAsNonRoot and image will run as root (pod: "p_ns(u-1)", '
     "container: main)"),
    (None, {"runAsNonRoot": True, "runAsUser": 0},
     "container's runAsUser breaks non-root policy (pod: \"p_ns(u-1)\", container: main)"),
    ({"runAsNonRoot": True, "runAsUser": 107}, {"runAsUser": 0},
     "container's runAsUser breaks non-root policy"),
    ({"runAsUser": -1}, None, "spec.securityContext.runAsUser: must be an integer"),
    (None, {"runAsUser": "107"}, "containers[main].securityContext.runAsUser: must be an"),
    ({"supplementalGroups": [True]}, None, "supplementalGroups[0]: must be an integer"),
    (None, {"capabilities": {"add": ["NET_FOO"]}},
     "containers[main].securityContext.capabilities.add: unknown capability 'NET_FOO'"),
    (None, {"capabilities": {"drop": [7]}}, "capabilities.drop: capability names are"),
    ({"seccompProfile": {"type": "Localhost", "localhostProfile": "x.json"}}, None,
     "spec.securityContext.seccompProfile.type: 'Localhost' is not supported"),
])
def test_refused(pod_ctx: dict[str, Any] | None, ctx: dict[str, Any] | None,
                 message: str) -> None:
    with pytest.raises(SecurityError) as err:
        confine(pod_ctx, ctx)
    assert message in str(err.value)


def test_run_as_non_root_with_a_uid_is_accepted() -> None:
    assert confine({"runAsNonRoot": True}, {"runAsUser": 107}).uid == 107


@pytest.mark.parametrize(("add", "drop", "want"), [
    ([], [], DEFAULT_CAPS),
    (["NET_ADMIN"], ["CHOWN", "cap_kill"], (DEFAULT_CAPS | {"NET_ADMIN"}) - {"CHOWN", "KILL"}),
    ([], ["ALL"], frozenset()),
    (["NET_BIND_SERVICE"], ["ALL"], {"NET_BIND_SERVICE"}),
    (["ALL"], [], frozenset(ALL_CAPS)),
    (["ALL"], ["SYS_ADMIN"], frozenset(ALL_CAPS) - {"SYS_ADMIN"}),
    (["CAP_SYS_ADMIN"], [], DEFAULT_CAPS | {"SYS_ADMIN"}),
])
def test_capabilities_like_containerd(add: list[str], drop: list[str],
                                      want: frozenset[str]) -> None:
    assert capabilities(add=add, drop=drop) == want


def test_privileged_gets_everything_and_no_seccomp() -> None:
    c = confine(None, {"privileged": True, "capabilities": {"drop": ["ALL"]}})
    assert c.privileged and c.caps == frozenset(ALL_CAPS) and not c.seccomp


@pytest.mark.parametrize(("pod_ctx", "ctx", "want"), [
    (None, None, True),
    ({"seccompProfile": {"type": "Unconfined"}}, None, False),
    ({"seccompProfile": {"type": "Unconfined"}}, {"seccompProfile": {"type": "RuntimeDefault"}},
     True),
    (None, {"seccompProfile": {"type": "Unconfined"}}, False),
])
def test_seccomp_profile(pod_ctx: dict[str, Any] | None, ctx: dict[str, Any] | None,
                         want: bool) -> None:
    assert confine(pod_ctx, ctx).seccomp is want


@pytest.mark.parametrize("where", ["limits", "requests"])
def test_kvm_only_when_asked_for(where: str) -> None:
    assert "/dev/kvm" not in confine().devices
    c = confine(resources={where: {"devices.kubevirt.io/kvm": "1"}})
    assert c.devices == (*DEFAULT_DEVICES, "/dev/kvm")


def test_setpriv_argv() -> None:
    c = Confinement(uid=107, gid=107, groups=(107, 5), caps=frozenset({"CHOWN", "KILL"}))
    assert setpriv_argv(c, setpriv="/usr/bin/setpriv") == [
        "/usr/bin/setpriv", "--reuid=107", "--regid=107", "--groups=107,5",
        "--bounding-set=-all,+chown,+kill", "--inh-caps=-all", "--no-new-privs", "--"]
    none = setpriv_argv(Confinement(caps=frozenset()))
    assert "--clear-groups" in none and "--bounding-set=-all" in none
    privileged = setpriv_argv(Confinement(privileged=True, caps=frozenset(ALL_CAPS)))
    assert not any(a.startswith("--bounding-set") for a in privileged)


def test_seccomp_deny_list_follows_capabilities() -> None:
    default = seccomp.denied_syscalls(DEFAULT_CAPS)
    for call in ("mount", "umount2", "pivot_root", "kexec_load", "init_module",
                 "finit_module", "bpf", "keyctl", "unshare", "setns", "open_by_handle_at",
                 "perf_event_open", "fsopen", "move_mount", "userfaultfd"):
        assert call in default
    assert "chroot" not in default and "ptrace" not in default  # as Docker's profile
    admin = seccomp.denied_syscalls(DEFAULT_CAPS | {"SYS_ADMIN"})
    assert "mount" not in admin and "bpf" not in admin and "unshare" not in admin
    assert "keyctl" in admin and "init_module" in admin  # never / other capability
    assert "init_module" not in seccomp.denied_syscalls({"SYS_MODULE"})
    assert seccomp.restricts_namespaces(DEFAULT_CAPS)
    assert not seccomp.restricts_namespaces({"SYS_ADMIN"})


def test_seccomp_filter_compiles_per_capability_set() -> None:
    pytest.importorskip("pyseccomp")
    a = seccomp.compile_filter(DEFAULT_CAPS)
    b = seccomp.compile_filter(DEFAULT_CAPS | {"SYS_ADMIN"})
    assert a and len(a) % 8 == 0 and a != b  # BPF: 8-byte instructions


# -- the sandbox's mounts -------------------------------------------------------------


def argv_for(conf: Confinement, mounts: list[Mount] | None = None) -> list[str]:
    return bwrap_argv(SandboxSpec(argv=["prog"], env={}, log_path="/x/log",
                                  mounts=mounts or [], confinement=conf), seccomp_fd=9)


def remount_index(argv: list[str], path: str) -> int:
    """Where ``--remount-ro PATH`` is (-1 if nowhere)."""
    found = [i for i, a in enumerate(argv[:-1]) if a == "--remount-ro" and argv[i + 1] == path]
    return found[0] if found else -1


def pairs(argv: list[str], flag: str) -> list[tuple[str, str]]:
    return [(argv[i + 1], argv[i + 2]) for i, a in enumerate(argv) if a == flag]


def test_default_sandbox_dev_is_read_only_after_the_pods_devices() -> None:
    argv = argv_for(Confinement(), [Mount("/pod/devices/d", "/dev/cdi-block-volume",
                                          device=True)])
    assert ("/pod/devices/d", "/dev/cdi-block-volume") in pairs(argv, "--dev-bind")
    assert ("/dev", "/dev") not in pairs(argv, "--dev-bind")
    ro = remount_index(argv, "/dev")
    assert argv.index("/dev/cdi-block-volume") < ro  # bound before /dev turns read-only
    assert argv[argv.index("--seccomp") + 1] == "9"
    assert ("/proc/sys", "/proc/sys") in pairs(argv, "--ro-bind")
    tmp = argv.index("/tmp")
    assert argv[tmp - 1] == "--tmpfs" and argv[tmp - 3:tmp - 1] == ["--perms", "1777"]
    command = argv[argv.index("--") + 1:]
    assert command[0] == "/usr/bin/setpriv" and command[-1] == "prog"


def test_privileged_sandbox_binds_the_hosts_dev() -> None:
    argv = argv_for(Confinement(privileged=True, caps=frozenset(ALL_CAPS), seccomp=False))
    assert ("/dev", "/dev") in pairs(argv, "--dev-bind")
    assert remount_index(argv, "/dev") == -1
    assert "--seccomp" in argv  # an fd was given: whether to give one is the caller's call
    assert ("/proc/sys", "/proc/sys") not in pairs(argv, "--ro-bind")


def test_kvm_is_bound_only_when_given() -> None:
    assert "/dev/kvm" not in argv_for(Confinement())
    argv = argv_for(Confinement(devices=(*DEFAULT_DEVICES, "/dev/kvm")))
    assert ("/dev/kvm", "/dev/kvm") in pairs(argv, "--dev-bind")
    # The worker's own node for it wins over the host's.
    argv = argv_for(Confinement(devices=(*DEFAULT_DEVICES, "/dev/kvm")),
                    [Mount("/pod/devices/kvm", "/dev/kvm", device=True)])
    assert pairs(argv, "--dev-bind") == [("/pod/devices/kvm", "/dev/kvm")]


def test_mount_point_parents_are_made_0755_and_root_can_be_read_only() -> None:
    argv = argv_for(Confinement(read_only_root=True),
                    [Mount("/h", "/var/run/secrets/kubernetes.io/serviceaccount")])
    dirs = [argv[i + 1] for i, a in enumerate(argv) if a == "--dir"]
    for parent in ("/var", "/var/run", "/var/run/secrets", "/var/run/secrets/kubernetes.io"):
        i = argv.index(parent)
        assert argv[i - 1] == "--dir" and argv[i - 3:i - 1] == ["--perms", "0755"]
    assert "/tmp" in dirs  # read-only root: /tmp exists but is not a tmpfs
    assert remount_index(argv, "/") > remount_index(argv, "/dev") > 0
    assert remount_index(argv_for(Confinement()), "/") == -1


def test_exec_argv_joins_the_container_with_its_confinement() -> None:
    from localcluster.kubelet.execs import HELPER, exec_argv

    conf = Confinement(uid=107, gid=107, caps=frozenset())
    argv = exec_argv(target_pid=42, confinement=conf, command=["sh", "-c", "id"], tty=True,
                     python="/py", seccomp_fd=7)
    assert argv[:10] == ["/usr/bin/nsenter", "--target=42", "--mount", "--pid", "--ipc",
                         "--uts", "--user", "--root", "--wd", "--"]
    assert argv[10:12] == ["/usr/bin/setsid", "--ctty"]
    rest = argv[12:]
    assert rest[:rest.index("--") + 1] == setpriv_argv(conf, setpriv="/usr/bin/setpriv")
    assert rest[rest.index("--") + 1:] == ["/py", "-I", "-S", HELPER, "7", "--",
                                           "sh", "-c", "id"]
    plain = exec_argv(target_pid=42, confinement=conf, command=["ls"], tty=False,
                      python="/py", seccomp_fd=None)
    assert "/usr/bin/setsid" not in plain and HELPER not in plain and plain[-1] == "ls"
    # a privileged container has no user namespace of its own to enter
    privileged = exec_argv(target_pid=42, confinement=Confinement(privileged=True),
                           command=["ls"], tty=False, python="/py", seccomp_fd=None)
    assert "--user" not in privileged
