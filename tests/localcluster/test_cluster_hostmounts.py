"""What a pod may do to the node, whatever it asks for (issue 24), on a running cluster.

- The host mounts a pod gets stay read-only and masked whatever capabilities it is given
  short of ``privileged: true``: a pod with ``capabilities.add: [SYS_ADMIN]`` tries to
  remount the host's /usr, /etc and /sys read-write and to unmount the mask over
  /etc/shadow, directly and from a mount namespace of its own. Each attempt succeeded
  before pods ran in a user namespace of their own (localcluster/kubelet/userns.py).
- A fork bomb is bounded by the pod's pids limit (the kubelet's podPidsLimit).
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from kubeclient import Client, resources
from localcluster.cluster import Cluster
from tests.localcluster.clusterkit import (
    logs,
    needs_root,
    pod,
    running,
    wait_for,
    wait_phase,
)

pytestmark = [needs_root, pytest.mark.slow]

MARKER = "/usr/rootdisk-pod-escape"
PIDS = 48
"""This cluster's podPidsLimit."""


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with running(str(tmp_path_factory.mktemp("hostmounts")), pod_pids_limit=PIDS) as c:
        yield c


@pytest.fixture
def kube(cluster: Cluster) -> Client:
    assert cluster.kube is not None
    return cluster.kube


@pytest.fixture
def no_marker() -> Iterator[None]:
    assert not os.path.exists(MARKER)
    yield
    if os.path.exists(MARKER):  # broken code let the pod write the host's /usr
        os.remove(MARKER)
        pytest.fail(f"a pod wrote {MARKER} on the host")


def attempts(out: str) -> list[str]:
    return [line for line in out.splitlines()
            if line.split(":")[0] in ("mount", "umount", "unshare", "write")]


def run(kube: Client, p: dict[str, object]) -> str:
    name = str(p["metadata"]["name"])  # type: ignore[index]
    kube.create(resources.PODS, p, "default")
    done = wait_phase(kube, resources.PODS, name, ("Succeeded", "Failed"), timeout=60)
    out = logs(kube, name)
    assert done["status"]["phase"] == "Succeeded", out
    return out


@pytest.mark.usefixtures("no_marker")
@pytest.mark.parametrize("seccomp", ["RuntimeDefault", "Unconfined"])
def test_sys_admin_pod_cannot_remount_host_mounts_or_unmount_a_mask(
        kube: Client, seccomp: str) -> None:
    p = pod(f"sysadmin-{seccomp.lower()}",
            "try-mount", "none", "/usr", "none", "remount,bind",
            "try-mount", "none", "/etc", "none", "remount,bind",
            "try-mount", "none", "/sys", "none", "remount,bind",
            "try-umount", "/etc/shadow",
            "try-unshare-mount",
            "try-mount", "none", "/usr", "none", "remount,bind",
            "try-mount", "none", "/etc", "none", "remount,bind",
            "try-mount", "none", "/sys", "none", "remount,bind",
            "try-umount", "/etc/shadow",
            "try-write", MARKER, "x", "try-open", "/etc/shadow")
    p["spec"]["containers"][0]["securityContext"] = {
        "capabilities": {"add": ["SYS_ADMIN"]}, "seccompProfile": {"type": seccomp}}
    out = run(kube, p)
    assert attempts(out) == (
        ["mount: EPERM"] * 3 + ["umount: EPERM"]  # no power over the sandbox's mounts
        + ["unshare: OK"]  # its own mount namespace: every mount in it locked
        + ["mount: EPERM"] * 3 + ["umount: EINVAL", "write: EROFS"]), out
    assert "open: EACCES" in out  # the mask over /etc/shadow is still there


FORKER = """
import os, sys
made = []
while len(made) < 10000:
    try:
        pid = os.fork()
    except OSError as err:
        print("refused after", len(made), err.strerror, flush=True)
        break
    if pid == 0:
        __import__("time").sleep(3600)
        os._exit(0)
    made.append(pid)
else:
    print("never refused", flush=True)
for pid in made:
    os.kill(pid, 9)
for pid in made:
    os.waitpid(pid, 0)
print("reaped", len(made), flush=True)
"""


def test_fork_bomb_is_bounded_by_the_pods_pids_limit(cluster: Cluster, kube: Client) -> None:
    """A root container forks until the kernel refuses (RLIMIT_NPROC does not bind uid
    0, so only the pod's pids.max can): refused below the limit, then it cleans up."""
    out = run(kube, pod("forker", command=["python", "-c", FORKER]))
    refused = [line for line in out.splitlines() if line.startswith("refused after")]
    assert refused, out
    made = int(refused[0].split()[2])
    # bwrap, its init and the forker itself count too
    assert PIDS - 8 <= made < PIDS and "Resource temporarily unavailable" in refused[0]
    assert f"reaped {made}" in out


def test_a_shell_fork_bomb_stops_at_the_limit_and_goes_with_the_pod(
        cluster: Cluster, kube: Client) -> None:
    """A shell forking long-lived processes without end (the classic recursive bomb's
    short-lived branches may die out before the limit: no reliable test), bounded in time:
    the pod's pids cgroup refuses the fork past the limit, which ends the shell (dash
    gives up when it cannot fork), and the pod leaves no process and no cgroup behind."""
    assert cluster.node is not None
    # at most 400 forks, so that broken code fails the test without flooding the node
    bomb = pod("bomb", command=["sh", "-c", "i=0; while [ $i -lt 400 ]; do sleep 600 & "
                                "i=$((i+1)); done; echo never refused"], grace=0)
    created = kube.create(resources.PODS, bomb, "default")
    cgroup = cluster.node.cgroups.pod_path(created["metadata"]["uid"])
    try:
        done = wait_phase(kube, resources.PODS, "bomb", ("Succeeded", "Failed"), timeout=60)
        out = logs(kube, "bomb")
        assert done["status"]["phase"] == "Failed" and "fork" in out.lower(), out
        assert "never refused" not in out
        # every process of the pod went with it: an rmdir succeeds only on an empty cgroup
        wait_for(lambda: not os.path.exists(cgroup), timeout=30, what="the pod cgroup gone")
    finally:
        kube.delete(resources.PODS, "bomb", "default")
