"""kubectl exec (-i, -t), attach, cp and port-forward against a running cluster, with
kubectl 1.32 itself (WebSocket: v5.channel.k8s.io; SPDY/3.1 tunnelled for port-forward),
and the channel protocol spoken by hand for the older versions it falls back to."""

from __future__ import annotations

import asyncio
import base64
import http.client
import json
import re
import shutil
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml

import kubeclient
from kubeclient import Client, resources
from localcluster.apiserver.streams import channels
from localcluster.cluster import Cluster
from tests.localcluster.clusterkit import needs_root, pod, running, try_logs, wait_for

KUBECTL = shutil.which("kubectl")
pytestmark = [needs_root, pytest.mark.slow,
              pytest.mark.skipif(KUBECTL is None, reason="kubectl is not installed")]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with running(str(tmp_path_factory.mktemp("exec"))) as c:
        yield c


@pytest.fixture(scope="module")
def kube(cluster: Cluster) -> Client:
    assert cluster.kube is not None
    return cluster.kube


@pytest.fixture(scope="module")
def box(kube: Client) -> str:
    """A running non-root pod with an emptyDir its main container wrote into."""
    p = pod("box", "write", "/scratch/from-main", "hello", "print", "up", "sleep", "600",
            volumes=[{"name": "s", "emptyDir": {}}],
            mounts=[{"name": "s", "mountPath": "/scratch"}], grace=0)
    p["spec"]["securityContext"] = {"runAsUser": 107, "runAsNonRoot": True, "fsGroup": 107}
    p["spec"]["containers"][0]["securityContext"] = {"capabilities": {"drop": ["ALL"]}}
    kube.create(resources.PODS, p, "default")
    wait_for(lambda: "up" in try_logs(kube, "box"), timeout=60, what="box up")
    return "box"


SERVICEACCOUNTS = kubeclient.Resource("", "v1", "serviceaccounts")
ROLES = kubeclient.Resource("rbac.authorization.k8s.io", "v1", "roles")
ROLEBINDINGS = kubeclient.Resource("rbac.authorization.k8s.io", "v1", "rolebindings")


def kubectl(cluster: Cluster, *args: str, stdin: str = "",
            timeout: float = 60) -> subprocess.CompletedProcess[str]:
    env = {"KUBECONFIG": cluster.kubeconfig, "PATH": "/usr/bin:/bin", "HOME": "/tmp",
           "TERM": "xterm"}
    assert KUBECTL is not None
    return subprocess.run([KUBECTL, *args], env=env, input=stdin, capture_output=True,
                          text=True, timeout=timeout)


def test_exec_runs_inside_the_container_with_its_confinement(cluster: Cluster,
                                                             box: str) -> None:
    script = ("id -u; grep -E '^(CapEff|Seccomp):' /proc/self/status; cat /scratch/from-main;"
              " echo; hostname; ls /proc | grep -c '^[0-9]'; echo to-stderr >&2;"
              " unshare -U true || echo unshare-refused; exit 3")
    r = kubectl(cluster, "exec", box, "--", "sh", "-c", script)
    assert r.returncode == 3, r.stderr
    out = r.stdout.splitlines()
    assert out[0] == "107"
    assert out[1].split() == ["CapEff:", "0" * 16] and out[2].split() == ["Seccomp:", "2"]
    assert out[3] == "hello"  # the container's volume, through its mount namespace
    assert out[4] == "box"  # its UTS namespace
    assert int(out[5]) <= 6  # its PID namespace: a handful of processes, not the host's
    assert out[6] == "unshare-refused"  # the container's seccomp filter applies
    assert "to-stderr" in r.stderr and "command terminated with exit code 3" in r.stderr


def test_exec_with_stdin_ends_when_stdin_does(cluster: Cluster, box: str) -> None:
    r = kubectl(cluster, "exec", "-i", box, "--", "sh", "-c", "cat; echo done",
                stdin="line one\nline two\n")
    assert r.returncode == 0, r.stderr
    assert r.stdout == "line one\nline two\ndone\n"


@pytest.mark.skipif(shutil.which("script") is None, reason="needs script (util-linux)")
def test_exec_with_a_terminal(cluster: Cluster, box: str) -> None:
    env = {"KUBECONFIG": cluster.kubeconfig, "PATH": "/usr/bin:/bin", "HOME": "/tmp",
           "TERM": "xterm"}
    cmd = f"{KUBECTL} exec -it {box} -- sh -c 'tty; stty size; id -u'"
    r = subprocess.run(["script", "-qec", cmd, "/dev/null"], env=env, capture_output=True,
                       text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert r.returncode == 0, r.stdout + r.stderr
    # (script's terminal echoes the NUL kubectl sends at the start as "^@")
    lines = [ln.strip("\x00\r").removeprefix("^@") for ln in r.stdout.splitlines()]
    assert any(ln.startswith("/dev/pts/") for ln in lines), lines  # the pod's own devpts
    rows_cols = next(ln for ln in lines if ln and ln[0].isdigit() and " " in ln)
    assert all(int(n) > 0 for n in rows_cols.split())
    assert "107" in lines


def test_cp_into_and_out_of_a_pod(cluster: Cluster, box: str, tmp_path: Path) -> None:
    local = tmp_path / "in.txt"
    local.write_text("copied in\n")
    r = kubectl(cluster, "cp", str(local), f"{box}:/scratch/in.txt")
    assert r.returncode == 0, r.stderr
    back = tmp_path / "back.txt"
    r = kubectl(cluster, "cp", f"{box}:/scratch/in.txt", str(back))
    assert r.returncode == 0, r.stderr
    assert back.read_text() == "copied in\n"
    r = kubectl(cluster, "exec", box, "--", "stat", "-c", "%u:%g", "/scratch/in.txt")
    assert r.stdout.strip() == "107:107"  # written as the container's user, fsGroup dir


def test_attach_follows_live_output(cluster: Cluster, kube: Client) -> None:
    kube.create(resources.PODS, pod("talker", "print", "up", "sleep", "3", "print", "after attach",
                                 "sleep", "1", "exit", "0"), "default")
    wait_for(lambda: "up" in try_logs(kube, "talker"), timeout=60, what="talker up")
    r = kubectl(cluster, "attach", "talker", timeout=60)
    assert "after attach" in r.stdout
    assert "up" not in r.stdout.splitlines()  # only what came after attaching


def test_exec_needs_create_on_pods_exec(cluster: Cluster, kube: Client, box: str) -> None:
    sa = "system:serviceaccount:default:runner"
    kube.create(SERVICEACCOUNTS, {"metadata": {"name": "runner"}}, "default")
    role: dict[str, Any] = {"metadata": {"name": "pod-reader"}, "rules": [
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list"]}]}
    kube.create(ROLES, role, "default")
    kube.create(ROLEBINDINGS, {
        "metadata": {"name": "runner-reads"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                    "name": "pod-reader"},
        "subjects": [{"kind": "ServiceAccount", "name": "runner", "namespace": "default"}]},
        "default")
    touch = ["exec", box, "--as", sa, "--", "touch", "/scratch/by-runner"]
    r = kubectl(cluster, *touch)
    assert r.returncode != 0
    assert 'cannot create resource "pods/exec"' in r.stderr, r.stderr
    assert "by-runner" not in kubectl(cluster, "exec", box, "--", "ls", "/scratch").stdout
    role["rules"].append({"apiGroups": [""], "resources": ["pods/exec"], "verbs": ["create"]})
    kube.replace(ROLES, {**kube.get(ROLES, "pod-reader", "default"), "rules": role["rules"]},
                 "default")
    r = kubectl(cluster, *touch)
    assert r.returncode == 0, r.stderr
    assert "by-runner" in kubectl(cluster, "exec", box, "--", "ls", "/scratch").stdout


def test_exec_into_a_container_that_is_not_running(cluster: Cluster, kube: Client) -> None:
    kube.create(resources.PODS, pod("finished", "exit", "0"), "default")
    wait_for(lambda: (kube.get(resources.PODS, "finished", "default").get("status") or {}).get(
        "phase") == "Succeeded", timeout=60, what="finished")
    r = kubectl(cluster, "exec", "finished", "--", "true")
    assert r.returncode != 0
    assert "cannot exec into a container in a completed pod" in r.stderr or \
        'container "main" in pod "finished" is not running' in r.stderr, r.stderr


# -- the protocol versions kubectl falls back to, spoken by hand -----------------------


def ws_exec(cluster: Cluster, protocol: str, command: list[str],
            stdin: bytes | None = None) -> tuple[str, dict[int, bytes]]:
    """Run ``command`` in the box over a WebSocket speaking ``protocol``; returns the
    protocol the server chose and the bytes received per channel."""
    with open(cluster.kubeconfig) as fh:
        cfg = yaml.safe_load(fh)
    server = cfg["clusters"][0]["cluster"]["server"]
    token = cfg["users"][0]["user"]["token"]
    ca = cfg["clusters"][0]["cluster"].get("certificate-authority")
    ctx = ssl.create_default_context(cafile=ca) if ca else ssl.create_default_context(
        cadata=base64.b64decode(
            cfg["clusters"][0]["cluster"]["certificate-authority-data"]).decode())
    query = [("command", c) for c in command] + [("stdout", "true"), ("stderr", "true")]
    if stdin is not None:
        query.append(("stdin", "true"))

    async def go() -> tuple[str, dict[int, bytes]]:
        try:
            return await talk()
        finally:
            await asyncio.sleep(0.25)  # aiohttp: let the TLS transport finish closing

    async def talk() -> tuple[str, dict[int, bytes]]:
        got: dict[int, bytes] = {}
        async with aiohttp.ClientSession() as session, session.ws_connect(
                f"{server}/api/v1/namespaces/default/pods/box/exec", params=query,
                protocols=(protocol,), headers={"Authorization": f"Bearer {token}"},
                ssl=ctx) as ws:
            if stdin is not None:
                await ws.send_bytes(channels.frame(channels.STDIN, stdin))
                await ws.send_bytes(bytes([channels.CLOSE, channels.STDIN]))
            async for msg in ws:
                if msg.type == aiohttp.WSMsgType.BINARY and msg.data:
                    got[msg.data[0]] = got.get(msg.data[0], b"") + msg.data[1:]
            return ws.protocol or "", got

    return asyncio.run(asyncio.wait_for(go(), 60))


@pytest.mark.parametrize("protocol", [channels.V4, channels.V3, channels.V2, channels.V1])
def test_older_channel_protocols(cluster: Cluster, box: str, protocol: str) -> None:
    chosen, got = ws_exec(cluster, protocol, ["sh", "-c", "echo out; echo err >&2; exit 4"])
    assert chosen == protocol
    assert got[channels.STDOUT] == b"out\n" and got[channels.STDERR] == b"err\n"
    if protocol == channels.V4:
        status = json.loads(got[channels.ERROR])
        assert status["reason"] == "NonZeroExitCode"
        assert status["details"]["causes"] == [{"reason": "ExitCode", "message": "4"}]
    else:
        assert b"exit code 4" in got[channels.ERROR]


def test_v5_close_ends_stdin(cluster: Cluster, box: str) -> None:
    chosen, got = ws_exec(cluster, channels.V5, ["sh", "-c", "wc -c"], stdin=b"12345")
    assert chosen == channels.V5
    assert got[channels.STDOUT].strip() == b"5"
    assert json.loads(got[channels.ERROR])["status"] == "Success"



def test_exec_readiness_probe_runs_inside_the_container(kube: Client) -> None:
    p = pod("probed", "print", "up", "sleep", "5", "write", "/tmp/ready", "yes",
            "sleep", "600", grace=0)
    p["spec"]["securityContext"] = {"runAsUser": 107}
    p["spec"]["containers"][0]["readinessProbe"] = {
        "exec": {"command": ["cat", "/tmp/ready"]},  # /tmp: the container's private tmpfs
        "periodSeconds": 1, "timeoutSeconds": 5}
    kube.create(resources.PODS, p, "default")

    def ready() -> bool:
        statuses = (kube.get(resources.PODS, "probed", "default").get("status") or {}).get(
            "containerStatuses") or [{}]
        return bool(statuses[0].get("ready"))

    wait_for(lambda: "up" in try_logs(kube, "probed"), timeout=60, what="probed up")
    assert not ready()  # the file is not there yet: the probe fails
    wait_for(ready, timeout=60, what="ready once the file exists in the container")
    kube.delete(resources.PODS, "probed", "default")


def test_exec_counts_against_the_containers_limits(cluster: Cluster, kube: Client) -> None:
    p = pod("limited", "print", "up", "sleep", "600", grace=0)
    p["spec"]["containers"][0]["resources"] = {"limits": {"memory": "256Mi"}}
    kube.create(resources.PODS, p, "default")
    wait_for(lambda: "up" in try_logs(kube, "limited"), timeout=60, what="limited up")
    uid = kube.get(resources.PODS, "limited", "default")["metadata"]["uid"]
    r = kubectl(cluster, "exec", "limited", "--", "cat", "/proc/self/cgroup")
    assert r.returncode == 0, r.stderr
    memory = [ln for ln in r.stdout.splitlines() if ":memory:" in ln or ln.startswith("0::")]
    mine = re.compile(rf"/localcluster-[0-9a-f]{{12}}/{uid}-main-")
    assert any(mine.search(ln) for ln in memory), r.stdout
    kube.delete(resources.PODS, "limited", "default")


# -- port-forward ---------------------------------------------------------------------


def forwarded_ports(proc: subprocess.Popen[str], count: int) -> dict[int, int]:
    """Read kubectl's "Forwarding from 127.0.0.1:LOCAL -> REMOTE" lines (bounded)."""
    found: dict[int, int] = {}
    deadline = time.monotonic() + 60
    assert proc.stdout is not None
    while len(found) < count:
        assert time.monotonic() < deadline, "kubectl port-forward never said it listens"
        line = proc.stdout.readline()
        assert line, "kubectl port-forward ended early"
        m = re.search(r"Forwarding from 127\.0\.0\.1:(\d+) -> (\d+)", line)
        if m:
            found[int(m.group(2))] = int(m.group(1))
    return found


def test_port_forward_reaches_the_pods_server(cluster: Cluster, kube: Client) -> None:
    kube.create(resources.PODS, pod("web", "serve", "8080", grace=0), "default")
    wait_for(lambda: "serving" in try_logs(kube, "web"), timeout=60, what="web serving")
    env = {"KUBECONFIG": cluster.kubeconfig, "PATH": "/usr/bin:/bin", "HOME": "/tmp"}
    assert KUBECTL is not None
    proc = subprocess.Popen([KUBECTL, "port-forward", "pod/web", ":8080", ":8099"], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        ports = forwarded_ports(proc, 2)
        for _ in range(3):  # one SPDY stream pair per connection, over one WebSocket
            with urllib.request.urlopen(f"http://127.0.0.1:{ports[8080]}/", timeout=30) as r:
                assert r.read() == b"hello from web"
        with pytest.raises((urllib.error.URLError, ConnectionError, http.client.HTTPException)):
            urllib.request.urlopen(f"http://127.0.0.1:{ports[8099]}/", timeout=30)
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=30)
    assert "error forwarding port 8099 to pod default/web" in err  # the error stream's text
    kube.delete(resources.PODS, "web", "default")


def test_port_forward_needs_create_on_pods_portforward(cluster: Cluster, kube: Client,
                                                       box: str) -> None:
    kube.create(SERVICEACCOUNTS, {"metadata": {"name": "forwarder"}}, "default")
    kube.create(ROLES, {"metadata": {"name": "pod-getter"}, "rules": [
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list"]}]}, "default")
    kube.create(ROLEBINDINGS, {
        "metadata": {"name": "forwarder-gets"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                    "name": "pod-getter"},
        "subjects": [{"kind": "ServiceAccount", "name": "forwarder",
                      "namespace": "default"}]}, "default")
    r = kubectl(cluster, "port-forward", f"pod/{box}", ":8080", "--as",
                "system:serviceaccount:default:forwarder", timeout=60)
    assert r.returncode != 0
    assert 'cannot create resource "pods/portforward"' in r.stderr, r.stderr


def test_exec_into_a_sys_admin_pod_cannot_remount_host_mounts(cluster: Cluster,
                                                              kube: Client) -> None:
    """kubectl exec joins the container's user namespace too (issue 24): a command run
    with the container's SYS_ADMIN holds no power over its mounts either."""
    p = pod("admin-box", "print", "up", "sleep", "600", grace=0)
    p["spec"]["containers"][0]["securityContext"] = {"capabilities": {"add": ["SYS_ADMIN"]}}
    kube.create(resources.PODS, p, "default")
    wait_for(lambda: "up" in try_logs(kube, "admin-box"), timeout=60, what="admin-box up")
    script = ("mount -o remount,rw /usr; echo usr=$?; mount -o remount,rw /etc; echo etc=$?;"
              " mount -o remount,rw /sys; echo sys=$?; umount /etc/shadow; echo shadow=$?;"
              " grep CapEff /proc/self/status")
    try:
        r = kubectl(cluster, "exec", "admin-box", "--", "sh", "-c", script)
    finally:
        kube.delete(resources.PODS, "admin-box", "default")
    assert r.returncode == 0, r.stderr
    out = r.stdout.splitlines()
    assert out[:4] == ["usr=32", "etc=32", "sys=32", "shadow=32"], r.stdout + r.stderr
    assert int(out[4].split()[1], 16) & (1 << 21)  # it does hold CAP_SYS_ADMIN
