"""Pods confined like a runtime's containers, run as real pods on a running cluster.

Each escape that worked before confinement is reproduced from inside a pod and must now
fail (remounting the host's /usr read-write, mounting a tmpfs with devices and mknod of
another pod's loop device, reaching another pod's volume through /proc); each
securityContext field is observed from inside the pod (/proc/self/status, stat of
files on its volumes); and the importer runs as the CDI helper will run it: uid 107,
fsGroup 107, no capabilities, RuntimeDefault seccomp.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kubeclient import Client, resources
from localcluster.cluster import Cluster
from localcluster.kubelet.security import ALL_CAPS, DEFAULT_CAPS, cap_mask
from tests.fixtures.httpserver import HttpServer
from tests.fixtures.images import ImageFactory
from tests.fixtures.ports import free_port
from tests.localcluster.clusterkit import (
    claim_volume,
    logs,
    main_status,
    needs_root,
    pod,
    pvc,
    running,
    try_logs,
    wait_for,
    wait_phase,
)

pytestmark = [needs_root, pytest.mark.slow]

NON_ROOT = {"runAsUser": 107, "runAsNonRoot": True}
DROP_ALL = {"capabilities": {"drop": ["ALL"]}}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with running(str(tmp_path_factory.mktemp("confine"))) as c:
        yield c


@pytest.fixture
def kube(cluster: Cluster) -> Client:
    assert cluster.kube is not None
    return cluster.kube


def secured(p: dict[str, Any], *, pod_ctx: dict[str, Any] | None = None,
            ctx: dict[str, Any] | None = None) -> dict[str, Any]:
    if pod_ctx is not None:
        p["spec"]["securityContext"] = pod_ctx
    if ctx is not None:
        p["spec"]["containers"][0]["securityContext"] = ctx
    return p


def run(kube: Client, p: dict[str, Any], *, timeout: float = 60) -> str:
    """Create the pod, wait until it ends, return its output (it must succeed)."""
    name = p["metadata"]["name"]
    kube.create(resources.PODS, p, "default")
    done = wait_phase(kube, resources.PODS, name, ("Succeeded", "Failed"), timeout=timeout)
    out = logs(kube, name)
    assert done["status"]["phase"] == "Succeeded", out
    return out


def results(out: str) -> dict[str, str]:
    """``name: result`` lines of testbox attempts, in order (later ones win)."""
    found = {}
    for line in out.splitlines():
        key, sep, value = line.partition(": ")
        if sep and key in ("mount", "mknod", "open", "write", "unshare", "find"):
            found[key + str(sum(k.startswith(key) for k in found))] = value
    return found


def status_of(out: str) -> dict[str, str]:
    return next(json.loads(line) for line in out.splitlines() if line.startswith('{"Uid"'))


def hexmask(caps: frozenset[str] | set[str]) -> str:
    return f"{cap_mask(frozenset(caps)):016x}"


# -- the escapes ----------------------------------------------------------------------


def test_default_pod_cannot_remount_the_hosts_usr_or_write_host_paths(kube: Client) -> None:
    marker = "/usr/rootdisk-confinement-escape"
    assert not os.path.exists(marker)
    out = run(kube, pod("remount", "status",
                        "try-mount", "none", "/usr", "none", "remount,bind",
                        "try-write", marker, "escaped",
                        "try-mount", "/dev/vda", "/tmp", "ext4", "-",
                        "try-write", "/proc/sys/kernel/domainname", "x",
                        "try-write", "/etc/rootdisk-escape", "x",
                        "try-unshare-user", "try-open", "/etc/shadow",
                        "try-write", "/sys/kernel/uevent_helper", "x",
                        "stat", "/sys/class"))
    st = status_of(out)
    assert st["Uid"].split() == ["0"] * 4
    assert st["CapEff"] == hexmask(DEFAULT_CAPS) and st["CapBnd"] == hexmask(DEFAULT_CAPS)
    assert st["NoNewPrivs"] == "1" and st["Seccomp"] == "2"
    r = results(out)
    assert r["mount0"] == "EPERM"  # remount of /usr read-write
    assert r["write0"] == "EROFS"  # so /usr stays read-only
    assert r["mount1"] == "EPERM"  # mounting a host filesystem
    assert r["write1"] == "EROFS"  # sysctls: /proc/sys is read-only
    assert r["write2"] == "EROFS"  # the host's /etc
    assert r["unshare0"] == "EPERM"  # a new user namespace would give back capabilities
    assert r["open0"] == "EACCES"  # the host's shadow file: a nodev /dev/null over it
    assert r["write3"] == "EROFS"  # /sys is there (libvirt needs it), read-only
    assert '"path": "/sys/class"' in out
    assert not os.path.exists(marker)
    # The same with the tools the report used.
    shell = pod("remount-sh", command=["sh", "-c", "mount -o remount,rw /usr; echo rc=$?; "
                                       "touch /usr/x 2>&1; echo rc=$?"])
    out = run(kube, shell)
    assert "rc=32" in out and "Read-only file system" in out, out


def loop_numbers(kube: Client, claim: str) -> tuple[int, int]:
    name = kube.get(resources.PVCS, claim, "default")["spec"]["volumeName"]
    path = kube.get(resources.PVS, name)["spec"]["local"]["path"]
    rdev = os.stat(os.path.realpath(path)).st_rdev
    return os.major(rdev), os.minor(rdev)


def test_mknod_cannot_reach_another_pods_block_volume(kube: Client) -> None:
    kube.create(resources.PVCS, pvc("victim-blk", sc="local-immediate", mode="Block",
                                 size="16Mi"), "default")
    run(kube, pod("victim", "write", "/dev/xvda", "SECRET-OF-THE-VICTIM-POD",
                  "try-open", "/dev/xvda", volumes=[claim_volume("d", "victim-blk")],
                  devices=[{"name": "d", "devicePath": "/dev/xvda"}]))
    major, minor = loop_numbers(kube, "victim-blk")
    out = run(kube, pod("thief", "try-mount", "none", "/tmp", "tmpfs", "-",
                        "try-mknod", "/tmp/blk", str(major), str(minor),
                        "try-mknod", "/dev/blk", str(major), str(minor),
                        "try-open", f"/dev/loop{minor}"))
    r = results(out)
    assert r["mount0"] == "EPERM"
    assert r["mknod0"] == "EPERM" and r["mknod1"] == "EPERM"
    assert r["open0"] == "ENOENT"
    # Without seccomp (Unconfined) CAP_MKNOD counts only in the pod's user namespace, and
    # a device node needs it in the node's: no node is made (and every writable mount is
    # nodev, /dev read-only, should one exist).
    out = run(kube, secured(pod("thief-unconfined", "status",
                                "try-mknod", "/tmp/blk", str(major), str(minor),
                                "try-open", "/tmp/blk",
                                "try-mknod", "/dev/blk", str(major), str(minor)),
                            pod_ctx={"seccompProfile": {"type": "Unconfined"}}))
    assert status_of(out)["Seccomp"] == "0"
    r = results(out)
    assert r["mknod0"] == "EPERM" and r["open0"] == "ENOENT"
    assert r["mknod1"] in ("EPERM", "EROFS")  # /dev is read-only too


def test_another_pods_volume_is_not_visible_through_proc(kube: Client) -> None:
    holder = pod("holder", "write", "/private/secret.txt", "s3cret", "print", "up",
                 "sleep", "120", volumes=[{"name": "p", "emptyDir": {}}],
                 mounts=[{"name": "p", "mountPath": "/private"}], grace=0)
    kube.create(resources.PODS, holder, "default")
    wait_for(lambda: "up" in try_logs(kube, "holder"), timeout=60, what="holder up")
    try:
        out = run(kube, pod("snoop", "find-in-proc", "private/secret.txt",
                            "find-in-proc", "usr/bin/sh",
                            "try-mount", "proc", "/tmp", "proc", "-"))
    finally:
        kube.delete(resources.PODS, "holder", "default")
    r = results(out)
    assert r["find0"] == "ENOENT"
    assert r["find1"] == "OK found in 1,2"  # only its own sandbox's processes
    assert r["mount0"] == "EPERM"


# -- securityContext, observed from inside -------------------------------------------


def test_non_root_without_capabilities_reports_uid_107_and_cap_eff_0(kube: Client) -> None:
    out = run(kube, secured(pod("nonroot", "status", "env", "HOME",
                                "try-write", "/tmp/ok", "x"),
                            pod_ctx=NON_ROOT, ctx=DROP_ALL))
    st = status_of(out)
    assert st["Uid"].split() == ["107"] * 4 and st["Gid"].split() == ["0"] * 4
    assert st["CapEff"] == st["CapPrm"] == st["CapBnd"] == "0" * 16
    assert st["NoNewPrivs"] == "1" and st["Seccomp"] == "2"
    assert "HOME=/" in out.splitlines()
    assert results(out)["write0"] == "OK"  # /tmp is 1777


def test_non_root_keeps_added_capabilities_only_in_its_bounding_set(kube: Client) -> None:
    out = run(kube, secured(pod("nonroot-caps", "status"), pod_ctx={"runAsUser": 1000},
                            ctx={"capabilities": {"add": ["NET_ADMIN"]}}))
    st = status_of(out)
    assert st["CapEff"] == "0" * 16  # as under containerd: no ambient capabilities
    assert st["CapBnd"] == hexmask(DEFAULT_CAPS | {"NET_ADMIN"})


@pytest.mark.parametrize(("ctx", "want"), [
    ({"capabilities": {"add": ["NET_ADMIN", "CAP_SYS_TIME"], "drop": ["CHOWN"]}},
     (DEFAULT_CAPS | {"NET_ADMIN", "SYS_TIME"}) - {"CHOWN"}),
    ({"capabilities": {"drop": ["ALL"], "add": ["NET_BIND_SERVICE"]}}, {"NET_BIND_SERVICE"}),
    ({"privileged": True}, set(ALL_CAPS)),
])
def test_capabilities_of_a_root_container(kube: Client, ctx: dict[str, Any],
                                          want: set[str]) -> None:
    name = "caps-" + str(abs(hash(json.dumps(ctx, sort_keys=True))) % 10**8)
    out = run(kube, secured(pod(name, "status", "try-open", "/dev/loop-control"), ctx=ctx))
    st = status_of(out)
    with open("/proc/self/status") as fh:  # the node's own bounding set is the ceiling
        node_bnd = int(next(li for li in fh if li.startswith("CapBnd:")).split()[1], 16)
    assert int(st["CapEff"], 16) == cap_mask(frozenset(want)) & node_bnd
    privileged = bool(ctx.get("privileged"))
    assert st["Seccomp"] == ("0" if privileged else "2")
    # Host devices: all of them when privileged, none otherwise.
    assert results(out)["open0"] != "ENOENT" if privileged else \
        results(out)["open0"] == "ENOENT"


def test_identity_groups_and_fs_group_ownership(kube: Client) -> None:
    kube.create(resources.PVCS, pvc("owned", sc="local-immediate", size="16Mi"), "default")
    mounts = [{"name": "d", "mountPath": "/data"}, {"name": "s", "mountPath": "/scratch"}]
    vols = [claim_volume("d", "owned"), {"name": "s", "emptyDir": {}}]
    # A root pod leaves a root-owned 0644 file on the volume ...
    run(kube, pod("owner-root", "write", "/data/old", "from root", "stat", "/data/old",
                  volumes=vols[:1], mounts=mounts[:1]))
    # ... which a pod with fsGroup then gets, as on a real node.
    ctx = {"runAsUser": 1000, "runAsGroup": 3000, "supplementalGroups": [4000],
           "fsGroup": 2000}
    out = run(kube, secured(pod("owner-fsgroup", "status", "stat", "/data", "stat", "/data/old",
                                "append", "/data/old", "by 1000", "write", "/data/new", "n",
                                "stat", "/data/new", "write", "/scratch/f", "s",
                                "stat", "/scratch", "stat", "/scratch/f",
                                volumes=vols, mounts=mounts), pod_ctx=ctx))
    st = status_of(out)
    assert st["Uid"].split() == ["1000"] * 4 and st["Gid"].split() == ["3000"] * 4
    assert sorted(st["Groups"].split()) == ["2000", "4000"]
    stats = {s["path"]: s for s in (json.loads(line) for line in out.splitlines()
                                    if line.startswith('{"path"'))}
    assert stats["/data"]["gid"] == 2000 and int(stats["/data"]["mode"], 8) & 0o2070 == 0o2070
    assert stats["/data/old"]["gid"] == 2000 and stats["/data/old"]["mode"] == "0o664"
    assert stats["/data/new"]["uid"] == 1000 and stats["/data/new"]["gid"] == 2000
    assert stats["/scratch"]["mode"] == "0o2777" and stats["/scratch"]["gid"] == 2000
    assert stats["/scratch/f"]["gid"] == 2000
    assert "lines: 1" in out  # "from root" had no newline: the append made one line


def test_read_only_root_filesystem(kube: Client) -> None:
    out = run(kube, secured(pod("rofs", "try-write", "/x", "y", "try-write", "/tmp/x", "y",
                                "try-write", "/scratch/x", "y",
                                volumes=[{"name": "s", "emptyDir": {}}],
                                mounts=[{"name": "s", "mountPath": "/scratch"}]),
                            ctx={"readOnlyRootFilesystem": True}))
    r = results(out)
    assert r["write0"] == "EROFS" and r["write1"] == "EROFS" and r["write2"] == "OK"


def test_allow_privilege_escalation_false_sets_no_new_privs(kube: Client) -> None:
    out = run(kube, secured(pod("nnp", "status"), ctx={"allowPrivilegeEscalation": False}))
    assert status_of(out)["NoNewPrivs"] == "1"


@pytest.mark.parametrize(("pod_ctx", "message"), [
    ({"runAsNonRoot": True}, "container has runAsNonRoot and image will run as root"),
    ({"runAsNonRoot": True, "runAsUser": 0}, "container's runAsUser breaks non-root policy"),
])
def test_run_as_non_root_refuses_root(kube: Client, pod_ctx: dict[str, Any],
                                      message: str) -> None:
    name = "nonroot-refused-" + str(len(pod_ctx))
    kube.create(resources.PODS, secured(pod(name, "print", "ran"), pod_ctx=pod_ctx), "default")

    def waiting() -> dict[str, Any]:
        return (main_status(kube.get(resources.PODS, name, "default")).get("state") or {}).get(
            "waiting") or {}

    w = wait_for(lambda: waiting().get("reason") == "CreateContainerConfigError" and waiting(),
                 what="CreateContainerConfigError")
    assert w["message"].startswith(message) and "container: main" in w["message"]
    assert try_logs(kube, name) == ""  # it never ran
    kube.delete(resources.PODS, name, "default")


# -- the programs that will run here --------------------------------------------------


IMPORTER_CTX = {"runAsUser": 107, "runAsNonRoot": True, "fsGroup": 107,
                "seccompProfile": {"type": "RuntimeDefault"}}
IMPORTER_CONTAINER_CTX = {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}


@pytest.mark.parametrize("mode", ["Filesystem", "Block"])
def test_importer_runs_non_root_on_filesystem_and_block(
        kube: Client, cluster: Cluster, images: ImageFactory, http_server: HttpServer,
        mode: str) -> None:
    source = images.get("qcow2")
    url = http_server.publish(source.path)
    claim = f"imported-{mode.lower()}"
    kube.create(resources.PVCS, pvc(claim, sc="local-immediate", mode=mode, size="64Mi"),
                "default")
    env = [{"name": "IMPORTER_SOURCE", "value": "http"},
           {"name": "IMPORTER_ENDPOINT", "value": url},
           {"name": "IMPORTER_IMAGE_SIZE", "value": "32Mi"},
           # Pods share the host's network: a port free now, not 8443, which other
           # programs on a shared machine may hold on 0.0.0.0.
           {"name": "IMPORTER_METRICS_PORT", "value": str(free_port())}]
    if mode == "Filesystem":
        where: dict[str, Any] = {"mounts": [{"name": "cdi-data-vol", "mountPath": "/data"}]}
    else:
        where = {"devices": [{"name": "cdi-data-vol", "devicePath": "/dev/cdi-block-volume"}]}
    p = pod(f"importer-{mode.lower()}", image="registry.example.com/rootdisk/importer:test",
            env=env, volumes=[claim_volume("cdi-data-vol", claim)], **where)
    p["spec"]["containers"][0]["args"] = []
    run(kube, secured(p, pod_ctx=IMPORTER_CTX, ctx=IMPORTER_CONTAINER_CTX), timeout=180)
    pv = kube.get(resources.PVS, kube.get(resources.PVCS, claim, "default")["spec"]["volumeName"])
    host = Path(pv["spec"]["local"]["path"])
    reference = images.reference.read_bytes()
    if mode == "Filesystem":
        disk = host / "disk.img"
        assert disk.read_bytes()[: len(reference)] == reference
        st = disk.stat()
        assert (st.st_uid, st.st_gid) == (107, 107)
    else:
        with open(os.path.realpath(host), "rb") as fh:
            assert fh.read(len(reference)) == reference


KVM_OPEN = """
import os
fd = os.open("/dev/kvm", os.O_RDWR)
print("kvm: opened", flush=True)
os.close(fd)
"""


@pytest.mark.skipif(not os.path.exists("/dev/kvm"), reason="this machine has no /dev/kvm")
def test_launcher_gets_dev_kvm_only_when_it_asks(kube: Client) -> None:
    launcher_ctx = {"runAsUser": 107, "runAsNonRoot": True}
    ctx = {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}
    host_before = os.stat("/dev/kvm")
    without = run(kube, secured(pod("launcher-tcg", "try-open", "/dev/kvm"),
                                pod_ctx=launcher_ctx, ctx=ctx))
    assert results(without)["open0"] == "ENOENT"
    p = secured(pod("launcher-kvm", command=["python", "-c", KVM_OPEN]),
                pod_ctx=launcher_ctx, ctx=ctx)
    p["spec"]["containers"][0]["resources"] = {"limits": {"devices.kubevirt.io/kvm": "1"}}
    out = run(kube, p)
    assert "kvm: opened" in out, out  # uid 107 without capabilities opens it
    after = os.stat("/dev/kvm")  # through a node of the pod's own: the host's is untouched
    assert (after.st_uid, after.st_gid, after.st_mode) == (
        host_before.st_uid, host_before.st_gid, host_before.st_mode)
