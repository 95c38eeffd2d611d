"""The Pod Security Standards' checks against upstream's own cases
(k8s.io/pod-security-admission v0.32, policy/check_*_test.go), ported as one table: each
row is a check, a pod (JSON), and the reason and detail upstream expects, word for word."""

from __future__ import annotations

from typing import Any

import pytest

from localcluster.apiserver.admission import podsecurity_checks as c


def containers(*items: dict[str, Any], **spec: Any) -> dict[str, Any]:
    return {"containers": list(items), **spec}


def sc(name: str, **ctx: Any) -> dict[str, Any]:
    return {"name": name, "securityContext": ctx}


RESTRICTED_VOLUMES = [
    {"name": f"a{i}", key: {}} for i, key in enumerate(c.ALLOWED_VOLUMES, 1)
] + [{"name": f"b{i}", key: {}} for i, key in enumerate(c.RESTRICTED_VOLUME_TYPES, 1)] + [
    {"name": "c1"}]

CASES: list[tuple[str, c.CheckFn, dict[str, Any], dict[str, Any], str, str]] = [
    ("allowPrivilegeEscalation multiple containers", c.allow_privilege_escalation_1_25, {},
     containers({"name": "a"}, sc("b"), sc("c", allowPrivilegeEscalation=True),
                sc("d", allowPrivilegeEscalation=False)),
     "allowPrivilegeEscalation != false",
     'containers "a", "b", "c" must set securityContext.allowPrivilegeEscalation=false'),
    ("allowPrivilegeEscalation linux pod without context", c.allow_privilege_escalation_1_25,
     {}, containers({"name": "a"}, os={"name": "linux"}),
     "allowPrivilegeEscalation != false",
     'container "a" must set securityContext.allowPrivilegeEscalation=false'),
    ("allowPrivilegeEscalation 1.8", c.allow_privilege_escalation_1_8, {},
     containers({"name": "a"}, sc("b"), sc("c", allowPrivilegeEscalation=True),
                sc("d", allowPrivilegeEscalation=False), os={"name": "windows"}),
     "allowPrivilegeEscalation != false",
     'containers "a", "b", "c" must set securityContext.allowPrivilegeEscalation=false'),
    ("appArmor unconfined pod", c.app_armor_profile_1_0, {},
     {"securityContext": {"appArmorProfile": {"type": "Unconfined"}}},
     "forbidden AppArmor profile", 'pod must not set AppArmor profile type to "Unconfined"'),
    ("appArmor unconfined container", c.app_armor_profile_1_0, {},
     containers(sc("foo", appArmorProfile={"type": "Unconfined"}),
                sc("bar", appArmorProfile={"type": "RuntimeDefault"})),
     "forbidden AppArmor profile",
     'container "foo" must not set AppArmor profile type to "Unconfined"'),
    ("appArmor unconfined init container", c.app_armor_profile_1_0, {},
     {"initContainers": [sc("bar", appArmorProfile={"type": "Unconfined"})],
      "containers": [sc("foo", appArmorProfile={"type": "Localhost",
                                                "localhostProfile": "p"})]},
     "forbidden AppArmor profile",
     'container "bar" must not set AppArmor profile type to "Unconfined"'),
    ("appArmor annotations", c.app_armor_profile_1_0,
     {"annotations": {
         "container.apparmor.security.beta.kubernetes.io/": "bogus",
         "container.apparmor.security.beta.kubernetes.io/a": "",
         "container.apparmor.security.beta.kubernetes.io/b": "runtime/default",
         "container.apparmor.security.beta.kubernetes.io/c": "localhost/",
         "container.apparmor.security.beta.kubernetes.io/d": "localhost/foo",
         "container.apparmor.security.beta.kubernetes.io/e": "unconfined",
         "container.apparmor.security.beta.kubernetes.io/f": "unknown"}}, {},
     "forbidden AppArmor profiles",
     "annotations must not set AppArmor profile type to "
     '"container.apparmor.security.beta.kubernetes.io/="bogus"", '
     '"container.apparmor.security.beta.kubernetes.io/e="unconfined"", '
     '"container.apparmor.security.beta.kubernetes.io/f="unknown""'),
    ("capabilities baseline multiple containers", c.capabilities_baseline_1_0, {},
     containers(sc("a", capabilities={"add": ["FOO", "BAR"]}),
                sc("b", capabilities={"add": ["BAR", "BAZ"]}),
                sc("c", capabilities={"add": ["NET_BIND_SERVICE", "CHOWN"]})),
     "non-default capabilities",
     'containers "a", "b" must not include "BAR", "BAZ", "FOO" in '
     "securityContext.capabilities.add"),
    ("capabilities restricted multiple containers", c.capabilities_restricted_1_25, {},
     containers(sc("a", capabilities={"add": ["FOO", "BAR"]}),
                sc("b", capabilities={"add": ["BAR", "BAZ"]}),
                sc("c", capabilities={"add": ["NET_BIND_SERVICE", "CHOWN"],
                                      "drop": ["ALL", "FOO"]})),
     "unrestricted capabilities",
     'containers "a", "b" must set securityContext.capabilities.drop=["ALL"]; containers '
     '"a", "b", "c" must not include "BAR", "BAZ", "CHOWN", "FOO" in '
     "securityContext.capabilities.add"),
    ("capabilities restricted linux pod without context", c.capabilities_restricted_1_25, {},
     containers({"name": "a"}, os={"name": "linux"}), "unrestricted capabilities",
     'container "a" must set securityContext.capabilities.drop=["ALL"]'),
    ("host namespaces", c.host_namespaces_1_0, {},
     {"hostNetwork": True, "hostPID": True, "hostIPC": True}, "host namespaces",
     "hostNetwork=true, hostPID=true, hostIPC=true"),
    ("hostPath volumes", c.host_path_volumes_1_0, {},
     {"volumes": [{"name": "a", "hostPath": {}}, {"name": "b", "hostPath": {}},
                  {"name": "c", "emptyDir": {}}]}, "hostPath volumes", 'volumes "a", "b"'),
    ("one container, one host port", c.host_ports_1_0, {},
     containers({"name": "a", "ports": [{"hostPort": 0}]},
                {"name": "b", "ports": [{"hostPort": 0}, {"hostPort": 20}]}),
     "hostPort", 'container "b" uses hostPort 20'),
    ("multiple containers, multiple host ports", c.host_ports_1_0, {},
     containers({"name": "a", "ports": [{"hostPort": 0}]},
                {"name": "b", "ports": [{"hostPort": 0}, {"hostPort": 10}, {"hostPort": 20}]},
                {"name": "c", "ports": [{"hostPort": 0}, {"hostPort": 10}, {"hostPort": 30}]}),
     "hostPort", 'containers "b", "c" use hostPorts 10, 20, 30'),
    ("privileged", c.privileged_1_0, {},
     containers({"name": "a"}, sc("b"), sc("c", privileged=False), sc("d", privileged=True),
                sc("e", privileged=True)),
     "privileged", 'containers "d", "e" must not set securityContext.privileged=true'),
    ("procMount", c.proc_mount_1_0, {},
     containers({"name": "a"}, sc("b"), sc("c", procMount="Default"),
                sc("d", procMount="Unmasked"), sc("e", procMount="other"), hostUsers=False),
     "procMount",
     'containers "d", "e" must not set securityContext.procMount to "Unmasked", "other"'),
    ("restricted volumes", c.restricted_volumes_1_0, {}, {"volumes": RESTRICTED_VOLUMES},
     "restricted volume types",
     "volumes " + ", ".join(f'"b{i}"' for i in range(1, 22)) + ', "c1"'
     " use restricted volume types "
     '"awsElasticBlockStore", "azureDisk", "azureFile", "cephfs", "cinder", "fc", '
     '"flexVolume", "flocker", "gcePersistentDisk", "gitRepo", "glusterfs", "hostPath", '
     '"iscsi", "nfs", "photonPersistentDisk", "portworxVolume", "quobyte", "rbd", '
     '"scaleIO", "storageos", "unknown", "vsphereVolume"'),
    ("no explicit runAsNonRoot", c.run_as_non_root_1_0, {}, containers({"name": "a"}),
     "runAsNonRoot != true", 'pod or container "a" must set securityContext.runAsNonRoot=true'),
    ("pod runAsNonRoot=false", c.run_as_non_root_1_0, {},
     containers({"name": "a"}, securityContext={"runAsNonRoot": False}),
     "runAsNonRoot != true", "pod must not set securityContext.runAsNonRoot=false"),
    ("containers runAsNonRoot=false", c.run_as_non_root_1_0, {},
     containers({"name": "a"}, sc("b"), sc("c", runAsNonRoot=False),
                sc("d", runAsNonRoot=False), sc("e", runAsNonRoot=True),
                sc("f", runAsNonRoot=True), securityContext={"runAsNonRoot": True}),
     "runAsNonRoot != true",
     'containers "c", "d" must not set securityContext.runAsNonRoot=false'),
    ("runAsNonRoot pod nil, container fallthrough", c.run_as_non_root_1_0, {},
     containers({"name": "a"}, sc("b"), sc("d", runAsNonRoot=True),
                sc("e", runAsNonRoot=True)),
     "runAsNonRoot != true",
     'pod or containers "a", "b" must set securityContext.runAsNonRoot=true'),
    ("pod runAsUser=0", c.run_as_user_1_23, {},
     containers({"name": "a"}, securityContext={"runAsUser": 0}),
     "runAsUser=0", "pod must not set runAsUser=0"),
    ("containers runAsUser=0", c.run_as_user_1_23, {},
     containers({"name": "a"}, sc("b"), sc("c", runAsUser=0), sc("d", runAsUser=0),
                sc("e", runAsUser=1), sc("f", runAsUser=1),
                securityContext={"runAsUser": 1000}),
     "runAsUser=0", 'containers "c", "d" must not set runAsUser=0'),
    ("seLinux invalid pod and containers", c.selinux_options_1_31, {},
     containers(sc("a", seLinuxOptions={"type": "container_t"}),
                sc("b", seLinuxOptions={"type": "container_init_t"}),
                sc("c", seLinuxOptions={"type": "container_kvm_t"}),
                sc("d", seLinuxOptions={"type": "container_engine_t"}),
                sc("e", seLinuxOptions={"type": "bar"}),
                sc("f", seLinuxOptions={"user": "bar"}),
                sc("g", seLinuxOptions={"role": "baz"}),
                securityContext={"seLinuxOptions": {"type": "foo", "user": "bar",
                                                    "role": "baz"}}),
     "seLinuxOptions",
     'pod and containers "e", "f", "g" set forbidden securityContext.seLinuxOptions: types '
     '"bar", "foo"; user may not be set; role may not be set'),
    ("seLinux invalid containers", c.selinux_options_1_31, {},
     containers(sc("a", seLinuxOptions={"type": "container_t"}),
                sc("e", seLinuxOptions={"type": "bar"}),
                sc("f", seLinuxOptions={"user": "bar"}),
                sc("g", seLinuxOptions={"role": "baz"}),
                securityContext={"seLinuxOptions": {}}),
     "seLinuxOptions",
     'containers "e", "f", "g" set forbidden securityContext.seLinuxOptions: type "bar"; '
     "user may not be set; role may not be set"),
    ("seLinux container_engine_t before 1.31", c.selinux_options_1_0, {},
     {"securityContext": {"seLinuxOptions": {"type": "container_engine_t"}}},
     "seLinuxOptions",
     'pod set forbidden securityContext.seLinuxOptions: type "container_engine_t"'),
    ("seLinux bad user", c.selinux_options_1_31, {},
     {"securityContext": {"seLinuxOptions": {"user": "bad"}}}, "seLinuxOptions",
     "pod set forbidden securityContext.seLinuxOptions: user may not be set"),
    ("seccomp annotations", c.seccomp_profile_baseline_1_0,
     {"annotations": {"seccomp.security.alpha.kubernetes.io/pod": "unconfined",
                      "container.seccomp.security.alpha.kubernetes.io/a": "unconfined",
                      "container.seccomp.security.alpha.kubernetes.io/b": "unknown",
                      "container.seccomp.security.alpha.kubernetes.io/c": "runtime/default"}},
     containers({"name": "a"}, {"name": "b"}, {"name": "c"}), "seccompProfile",
     'forbidden annotations container.seccomp.security.alpha.kubernetes.io/a="unconfined", '
     'container.seccomp.security.alpha.kubernetes.io/b="unknown", '
     'seccomp.security.alpha.kubernetes.io/pod="unconfined"'),
    ("seccomp baseline pod and containers", c.seccomp_profile_baseline_1_19, {},
     containers({"name": "a"}, sc("b"), sc("c", seccompProfile={"type": "Unconfined"}),
                sc("d", seccompProfile={"type": "Unconfined"}),
                sc("e", seccompProfile={"type": "RuntimeDefault"}),
                securityContext={"seccompProfile": {"type": "Unconfined"}}),
     "seccompProfile",
     'pod and containers "c", "d" must not set securityContext.seccompProfile.type to '
     '"Unconfined"'),
    ("seccomp restricted no explicit seccomp", c.seccomp_profile_restricted_1_25, {},
     containers({"name": "a"}), "seccompProfile",
     'pod or container "a" must set securityContext.seccompProfile.type to "RuntimeDefault" '
     'or "Localhost"'),
    ("seccomp restricted containers invalid", c.seccomp_profile_restricted_1_25, {},
     containers({"name": "a"}, sc("b"), sc("c", seccompProfile={"type": "Unconfined"}),
                sc("d", seccompProfile={"type": "Unconfined"}),
                sc("e", seccompProfile={"type": "RuntimeDefault"}),
                securityContext={"seccompProfile": {"type": "Localhost"}}),
     "seccompProfile",
     'containers "c", "d" must not set securityContext.seccompProfile.type to "Unconfined"'),
    ("seccomp restricted pod nil, container fallthrough", c.seccomp_profile_restricted_1_19,
     {}, containers({"name": "a"}, sc("b"), sc("d", seccompProfile={"type": "RuntimeDefault"}),
                    sc("e", seccompProfile={"type": "RuntimeDefault"})),
     "seccompProfile",
     'pod or containers "a", "b" must set securityContext.seccompProfile.type to '
     '"RuntimeDefault" or "Localhost"'),
    ("forbidden sysctls", c.sysctls_1_32, {},
     {"securityContext": {"sysctls": [{"name": "a"}, {"name": "b"}]}},
     "forbidden sysctls", "a, b"),
    ("sysctl new in 1.27 refused at 1.0", c.sysctls_1_0, {},
     {"securityContext": {"sysctls": [{"name": "net.ipv4.ip_local_reserved_ports",
                                       "value": "1024-4999"}]}},
     "forbidden sysctls", "net.ipv4.ip_local_reserved_ports"),
    ("sysctl new in 1.32 refused at 1.29", c.sysctls_1_29, {},
     {"securityContext": {"sysctls": [{"name": "net.ipv4.tcp_rmem", "value": "4096"}]}},
     "forbidden sysctls", "net.ipv4.tcp_rmem"),
    ("windows hostProcess", c.windows_host_process_1_0, {},
     containers(sc("a", windowsOptions={"hostProcess": True}),
                sc("b", windowsOptions={"hostProcess": True}),
                sc("c", windowsOptions={"hostProcess": False}),
                securityContext={"windowsOptions": {"hostProcess": True}}),
     "hostProcess",
     'pod and containers "a", "b" must not set securityContext.windowsOptions.hostProcess=true'),
]


@pytest.mark.parametrize(("check", "meta", "spec", "reason", "detail"),
                         [case[1:] for case in CASES], ids=[case[0] for case in CASES])
def test_upstream_case(check: c.CheckFn, meta: dict[str, Any], spec: dict[str, Any],
                       reason: str, detail: str) -> None:
    assert check(meta, spec) == (reason, detail)


ALLOWED: list[tuple[str, c.CheckFn, dict[str, Any], dict[str, Any]]] = [
    ("windows pod skips allowPrivilegeEscalation", c.allow_privilege_escalation_1_25, {},
     containers({"name": "a"}, os={"name": "windows"})),
    ("windows pod skips capabilities", c.capabilities_restricted_1_25, {},
     containers({"name": "a"}, os={"name": "windows"})),
    ("windows pod skips seccomp", c.seccomp_profile_restricted_1_25, {},
     containers({"name": "a"}, os={"name": "windows"})),
    ("AppArmor runtime default + extra annotations", c.app_armor_profile_1_0,
     {"annotations": {"container.apparmor.security.beta.kubernetes.io/a": "runtime/default",
                      "other": "x"}},
     {"securityContext": {"appArmorProfile": {"type": "RuntimeDefault"}}}),
    ("runAsUser non-zero", c.run_as_user_1_23, {},
     containers({"name": "a"}, securityContext={"runAsUser": 1000})),
    ("sysctl new in 1.32 allowed at 1.32", c.sysctls_1_32, {},
     {"securityContext": {"sysctls": [{"name": "net.ipv4.tcp_wmem"}]}}),
    ("restricted pod", c.capabilities_restricted_1_22, {},
     containers(sc("a", capabilities={"drop": ["ALL"], "add": ["NET_BIND_SERVICE"]}))),
]


@pytest.mark.parametrize(("check", "meta", "spec"), [case[1:] for case in ALLOWED],
                         ids=[case[0] for case in ALLOWED])
def test_upstream_allowed_case(check: c.CheckFn, meta: dict[str, Any],
                               spec: dict[str, Any]) -> None:
    assert check(meta, spec) is None


def test_levels_pick_upstreams_checks_in_its_order() -> None:
    names = [fn.__name__ for fn in c.checks_for(c.RESTRICTED, None)]
    assert names == [  # baseline first (overridden ones left out), then restricted, by id
        "app_armor_profile_1_0", "host_namespaces_1_0", "host_ports_1_0", "privileged_1_0",
        "proc_mount_1_0", "selinux_options_1_31", "sysctls_1_32",
        "windows_host_process_1_0", "allow_privilege_escalation_1_25",
        "capabilities_restricted_1_25", "restricted_volumes_1_0", "run_as_non_root_1_0",
        "run_as_user_1_23", "seccomp_profile_restricted_1_25"]
    baseline = [fn.__name__ for fn in c.checks_for(c.BASELINE, (1, 18))]
    assert "seccomp_profile_baseline_1_0" in baseline and "sysctls_1_0" in baseline
    old = [fn.__name__ for fn in c.checks_for(c.RESTRICTED, (1, 21))]
    assert "capabilities_baseline_1_0" in old  # capabilities_restricted starts at 1.22
    assert "run_as_user_1_23" not in old
    assert c.checks_for(c.PRIVILEGED, None) == []
    assert c.checks_for(c.BASELINE, (1, 99)) == c.checks_for(c.BASELINE, None)
