"""The host mounts a pod gets stay read-only and masked whatever capabilities it is given
short of ``privileged: true`` (issue 24): a pod with ``capabilities.add: [SYS_ADMIN]``
tries to remount the host's /usr, /etc and /sys read-write and to unmount the mask over
/etc/shadow, directly and from a mount namespace of its own. Each attempt succeeded
before pods ran in a user namespace of their own (localcluster/kubelet/userns.py)."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from localcluster.cluster import Cluster
from localcluster.kube import client
from localcluster.kube.client import Kube
from tests.localcluster.clusterkit import logs, needs_root, pod, running, wait_phase

pytestmark = [needs_root, pytest.mark.slow]

MARKER = "/usr/rootdisk-pod-escape"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with running(str(tmp_path_factory.mktemp("hostmounts"))) as c:
        yield c


@pytest.fixture
def kube(cluster: Cluster) -> Kube:
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


def run(kube: Kube, p: dict[str, object]) -> str:
    name = str(p["metadata"]["name"])  # type: ignore[index]
    kube.create(client.PODS, p, "default")
    done = wait_phase(kube, client.PODS, name, ("Succeeded", "Failed"), timeout=60)
    out = logs(kube, name)
    assert done["status"]["phase"] == "Succeeded", out
    return out


@pytest.mark.usefixtures("no_marker")
@pytest.mark.parametrize("seccomp", ["RuntimeDefault", "Unconfined"])
def test_sys_admin_pod_cannot_remount_host_mounts_or_unmount_a_mask(
        kube: Kube, seccomp: str) -> None:
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
