"""A VM's network on `rootdisk up`, every component a pod: the launcher pod gets its pod
IP (downward API) and upstream's labels, the guest its masquerade address by DHCP; a
listed port is reachable on the pod IP, through a Service's Endpoints selecting the VM's
labels, through `rootdisk port-forward` (virt-api's portforward subresource behind the
API server), and through the ProxyCommand `rootdisk ssh` gives ssh."""

from __future__ import annotations

import os
import shlex
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from kubeclient import Client, resources
from localcluster.cluster import Cluster
from tests.e2e import vmkit
from tests.fixtures.guests import NET_HELLO, NET_MARKER, GuestBuilder
from tests.fixtures.httpserver import HttpServer
from tests.localcluster.clusterkit import needs_root, wait_for

pytestmark = [needs_root, pytest.mark.slow, pytest.mark.e2e]
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module", autouse=True)
def vm_side(kube: Client) -> None:
    vmkit.wait_vm_side_ready(kube)


def _net_vm(name: str, url: str) -> dict[str, Any]:
    vm = vmkit.vm(name, url, size="64Mi")
    tmpl = vm["spec"]["template"]
    tmpl["metadata"] = {"labels": {"app": f"{name}-app"}}
    tmpl["spec"]["domain"]["resources"]["requests"]["memory"] = "256Mi"
    tmpl["spec"]["domain"]["devices"]["interfaces"] = [
        {"name": "default", "masquerade": {}, "ports": [{"name": "echo", "port": 8080}]}]
    tmpl["spec"]["networks"] = [{"name": "default", "pod": {}}]
    return vm


def _hello(address: str, port: int, line: bytes) -> bytes:
    with socket.create_connection((address, port), timeout=30) as conn:
        conn.settimeout(30)
        conn.sendall(line)
        got = b""
        while b"GUEST-ECHO:" not in got or not got.endswith(b"\n"):
            chunk = conn.recv(4096)
            if not chunk:
                break
            got += chunk
        return got


@pytest.mark.timeout(900)
def test_listed_port_by_pod_ip_service_port_forward_and_ssh_proxy(
        cluster: Cluster, kube: Client, ns: str, http_server: HttpServer, tmp_path: Path) -> None:
    guest = GuestBuilder().linux(mode="net")
    url = http_server.publish(guest.raw, "net.img")
    kube.create(vmkit.VMS, _net_vm("web", url), ns)
    try:
        vmkit.wait_printable(kube, ns, "web", "Running", timeout=400)
        wait_for(lambda: NET_MARKER in vmkit.cli(cluster, "console", "web", "-n", ns,
                                                 "--log").stdout,
                 timeout=180, what="the guest's network up")
    except AssertionError:
        raise AssertionError(vmkit.diagnose(kube, ns)) from None
    log = vmkit.cli(cluster, "console", "web", "-n", ns, "--log").stdout
    assert f"{NET_MARKER} addr=10.0.2.2/24 gw=10.0.2.1" in log
    vmi = kube.get(vmkit.VMIS, "web", ns)
    [pod] = [p for p in kube.list(resources.PODS, ns)
             if p["metadata"]["labels"].get("kubevirt.io/created-by") == vmi["metadata"]["uid"]]
    labels = pod["metadata"]["labels"]
    assert {k: labels.get(k) for k in ("app", "kubevirt.io", "vm.kubevirt.io/name",
                                       "vmi.kubevirt.io/id")} == {
        "app": "web-app", "kubevirt.io": "virt-launcher", "vm.kubevirt.io/name": "web",
        "vmi.kubevirt.io/id": "web"}
    pod_ip = pod["status"]["podIP"]
    assert vmi["status"]["interfaces"][0]["ipAddress"] == pod_ip

    # inbound TCP on the pod IP: the listed port reaches the guest, the unlisted does not
    assert _hello(pod_ip, 8080, b"direct\n").startswith(f"{NET_HELLO} port=8080".encode())
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection((pod_ip, 8081), timeout=10).close()

    # a Service on the VM's labels: its Endpoints are the launcher pod's IP and the port
    kube.create(resources.SERVICES, {"apiVersion": "v1", "kind": "Service",
                                  "metadata": {"name": "web"},
                                  "spec": {"selector": {"app": "web-app"},
                                           "ports": [{"port": 80, "targetPort": 8080}]}}, ns)

    def endpoint() -> tuple[str, int] | None:
        ep = kube.get_or_none(resources.ENDPOINTS, "web", ns) or {}
        for subset in ep.get("subsets") or []:
            for addr in subset.get("addresses") or []:
                return str(addr["ip"]), int(subset["ports"][0]["port"])
        return None
    ip, port = wait_for(endpoint, timeout=60, what="the Service's endpoint")
    assert (ip, port) == (pod_ip, 8080)
    assert b"GUEST-ECHO:via service\n" in _hello(ip, port, b"via service\n")

    # rootdisk port-forward, through the API server and virt-api's pod
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        local = probe.getsockname()[1]
    proc = subprocess.Popen([sys.executable, "-m", "rootdisk", "port-forward", "--kubeconfig",
                             cluster.kubeconfig, f"vm/web/{ns}", f"{local}:8080"],
                            stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, cwd=ROOT)
    try:
        assert proc.stderr is not None
        assert proc.stderr.readline().decode() == f"Forwarding from 127.0.0.1:{local} -> 8080\n"
        assert b"GUEST-ECHO:forwarded\n" in _hello("127.0.0.1", local, b"forwarded\n")
    finally:
        proc.terminate()
        proc.wait(30)
        if proc.stderr is not None:
            proc.stderr.close()

    # rootdisk ssh's ProxyCommand, run as ssh would run it (sh -c, %% -> %)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    record = tmp_path / "proxy"
    (bin_dir / "ssh").write_text(
        "#!/bin/sh\n"
        "while [ \"$1\" != -o ]; do shift; done\n"
        f"printf '%s' \"$2\" > {shlex.quote(str(record))}\n")
    (bin_dir / "ssh").chmod(0o755)
    out = subprocess.run([sys.executable, "-m", "rootdisk", "ssh", f"vm/web/{ns}", "-p", "8080",
                          "--kubeconfig", cluster.kubeconfig], capture_output=True, text=True,
                         timeout=60, cwd=ROOT,
                         env={**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"})
    assert out.returncode == 0, out.stderr
    proxy = record.read_text().removeprefix("ProxyCommand=").replace("%%", "%")
    via = subprocess.Popen(["sh", "-c", proxy], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                           cwd=ROOT)
    try:
        assert via.stdin is not None and via.stdout is not None
        assert via.stdout.readline() == f"{NET_HELLO} port=8080\n".encode()
        via.stdin.write(b"as ssh would\n")
        via.stdin.flush()
        assert via.stdout.readline() == b"GUEST-ECHO:as ssh would\n"
        via.stdin.close()
        assert via.wait(30) == 0
    finally:
        if via.poll() is None:
            via.kill()
            via.wait()
        for f in (via.stdin, via.stdout):
            if f is not None:
                f.close()


@pytest.mark.timeout(900)
def test_no_ports_listed_a_service_and_port_forward_reach_any_port(
        cluster: Cluster, kube: Client, ns: str, http_server: HttpServer) -> None:
    """A VM that lists no ports: upstream forwards every port; here the port a Service
    targets (the node handler reads its Endpoints) and any port `rootdisk port-forward`
    asks for (virt-api → the node handler) are opened by the launcher's ``hostfwd_add``."""
    guest = GuestBuilder().linux(mode="net")
    vm = _net_vm("open", http_server.publish(guest.raw, "open.img"))
    vm["spec"]["template"]["spec"]["domain"]["devices"]["interfaces"][0].pop("ports")
    kube.create(vmkit.VMS, vm, ns)
    try:
        vmkit.wait_printable(kube, ns, "open", "Running", timeout=400)
        wait_for(lambda: NET_MARKER in vmkit.cli(cluster, "console", "open", "-n", ns,
                                                 "--log").stdout,
                 timeout=180, what="the guest's network up")
    except AssertionError:
        raise AssertionError(vmkit.diagnose(kube, ns)) from None
    pod_ip = kube.get(vmkit.VMIS, "open", ns)["status"]["interfaces"][0]["ipAddress"]
    with pytest.raises(ConnectionRefusedError):  # nothing is forwarded before it is asked
        socket.create_connection((pod_ip, 8081), timeout=10).close()

    # a Service on the VM's labels: the node handler has its target port forwarded
    kube.create(resources.SERVICES, {"apiVersion": "v1", "kind": "Service",
                                  "metadata": {"name": "open"},
                                  "spec": {"selector": {"app": "open-app"},
                                           "ports": [{"port": 80, "targetPort": 8080}]}}, ns)

    def through_service() -> bytes | None:
        try:
            return _hello(pod_ip, 8080, b"via service\n")
        except ConnectionRefusedError:
            return None
    got = wait_for(through_service, timeout=60, what="the Service's target port forwarded")
    assert b"GUEST-ECHO:via service\n" in got
    with pytest.raises(ConnectionRefusedError):  # no Service, no port-forward: still closed
        socket.create_connection((pod_ip, 8081), timeout=10).close()
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        local = probe.getsockname()[1]
    proc = subprocess.Popen([sys.executable, "-m", "rootdisk", "port-forward", "--kubeconfig",
                             cluster.kubeconfig, f"vm/open/{ns}", f"{local}:8081"],
                            stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, cwd=ROOT)
    try:
        assert proc.stderr is not None
        assert proc.stderr.readline().decode() == f"Forwarding from 127.0.0.1:{local} -> 8081\n"
        got = _hello("127.0.0.1", local, b"any port\n")
        assert got.startswith(f"{NET_HELLO} port=8081".encode()), got
        assert b"GUEST-ECHO:any port\n" in got
    finally:
        proc.terminate()
        proc.wait(30)
        if proc.stderr is not None:
            proc.stderr.close()
