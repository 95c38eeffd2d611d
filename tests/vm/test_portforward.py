"""The ``portforward`` subresource end to end: a client's WebSocket to the API server,
through the aggregator to virt-api, which dials the VMI's pod IP, where a real launcher
forwards the listed port to a booted Linux guest's TCP echo server; the same through
``rootdisk port-forward`` (listening, and ``--stdio``); and upstream's refusals."""

from __future__ import annotations

import asyncio
import random
import socket
import ssl
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from kubeclient import Client, Resource
from kubeclient.resources import SERVICEACCOUNTS, VMIS, VMS
from tests.fixtures.guests import NET_HELLO, NET_MARKER, GuestBuilder, LinuxGuest
from tests.vm.launcher.harness import Launch

from .test_virtapi import cluster  # noqa: F401  (module fixture: server + virt-api)

BASE = "/apis/subresources.kubevirt.io/v1"
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def guest() -> LinuxGuest:
    return GuestBuilder().linux(mode="net")


def _pod_ip() -> str:
    return f"127.204.{random.randint(0, 255)}.{random.randint(2, 254)}"


def _spec(ports: list[dict[str, Any]]) -> dict[str, Any]:
    return {"domain": {"resources": {"requests": {"memory": "256Mi"}},
                       "devices": {"disks": [{"name": "root", "disk": {"bus": "virtio"}}],
                                   "interfaces": [{"name": "default", "masquerade": {},
                                                   "ports": ports}]}},
            "networks": [{"name": "default", "pod": {}}],
            "volumes": [{"name": "root", "persistentVolumeClaim": {"claimName": "r"}}]}


def _vm_and_vmi(kube: Client, ns: str, name: str, *, created: bool = True) -> dict[str, Any]:
    """A VM (status.created as given) and its VMI; no controllers run here: the test
    writes the statuses a running VM would have."""
    vm = kube.create(VMS, {"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachine",
                           "metadata": {"name": name},
                           "spec": {"runStrategy": "Manual",
                                    "template": {"spec": _spec([{"port": 8080}])}}}, ns)
    kube.patch(VMS, name, {"status": {"created": created}}, ns, subresource="status")
    vmi: dict[str, Any] = kube.create(VMIS, {
        "apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance",
        "metadata": {"name": name, "ownerReferences": [{
            "apiVersion": "kubevirt.io/v1", "kind": "VirtualMachine", "name": name,
            "uid": vm["metadata"]["uid"], "controller": True}]},
        "spec": _spec([{"port": 8080}])}, ns)
    return vmi


@pytest.fixture
def running(cluster: tuple[Any, Client, int]) -> Iterator[tuple[str, str, str, Launch]]:  # noqa: F811
    """A VM whose VMI runs the net guest in a real launcher on its own pod IP."""
    kube = cluster[1]
    ns, name, pod_ip = "default", f"pf-{uuid.uuid4().hex[:6]}", _pod_ip()
    vmi = _vm_and_vmi(kube, ns, name)
    run = Launch({"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance",
                  "metadata": {k: vmi["metadata"][k] for k in ("name", "namespace", "uid")},
                  "spec": vmi["spec"]}, env={"POD_IP": pod_ip})
    try:
        run.add_disk("root", GuestBuilder().linux(mode="net").raw)
        run.start()
        run.wait_for_console(NET_MARKER, timeout=180)
        kube.patch(VMIS, name, {"status": {"phase": "Running", "interfaces": [
            {"name": "default", "ipAddress": pod_ip, "ipAddresses": [pod_ip]}]}}, ns,
            subresource="status")
        yield ns, name, pod_ip, run
    finally:
        run.cleanup()


async def _ws(server: Any, path: str, *, token: str | None = None,
              send: bytes = b"", until: bytes = b"") -> tuple[int, bytes]:
    """(101, what came back until ``until``) or (the refusal's code, its body)."""
    ctx = ssl.create_default_context(cafile=str(server.ca_path))
    headers = {"Authorization": f"Bearer {token or server.admin_token}"}
    try:
        async with aiohttp.ClientSession() as s:
            try:
                ws = await s.ws_connect(server.url + path, ssl=ctx, headers=headers,
                                        protocols=("plain.kubevirt.io",))
            except aiohttp.WSServerHandshakeError as err:
                async with s.get(server.url + path, ssl=ctx, headers=headers) as resp:
                    body = await resp.json()
                    assert resp.status == err.status == body["code"], body
                    return err.status, str(body["message"]).encode()
            assert ws.protocol == "plain.kubevirt.io"
            seen = b""
            async with asyncio.timeout(60):
                if send:
                    await ws.send_bytes(send)
                while until not in seen:
                    msg = await ws.receive()
                    assert msg.type == aiohttp.WSMsgType.BINARY, msg
                    seen += msg.data
            await ws.close()
            return 101, seen
    finally:
        await asyncio.sleep(0.25)  # let aiohttp close its TLS connection (see console test)


@pytest.mark.parametrize("resource", ["virtualmachineinstances", "virtualmachines"])
def test_websocket_carries_bytes_both_ways(cluster: tuple[Any, Client, int],  # noqa: F811
                                           running: tuple[str, str, str, Launch],
                                           resource: str) -> None:
    server = cluster[0]
    ns, name, _, _ = running
    path = f"{BASE}/namespaces/{ns}/{resource}/{name}/portforward/8080"
    code, got = asyncio.run(_ws(server, path, send=b"through the api server\n",
                                until=b"GUEST-ECHO:through the api server\n"))
    assert code == 101
    assert got.startswith(f"{NET_HELLO} port=8080\n".encode())
    code, got = asyncio.run(_ws(server, path + "/tcp", until=b"\n"))
    assert (code, got) == (101, f"{NET_HELLO} port=8080\n".encode())


def test_refusals_have_upstreams_codes_and_words(cluster: tuple[Any, Client, int],  # noqa: F811
                                                 running: tuple[str, str, str, Launch]) -> None:
    server, kube, _ = cluster
    ns, name, pod_ip, _ = running
    vmi_path = f"{BASE}/namespaces/{ns}/virtualmachineinstances/{name}/portforward"
    # the guest serves 8081, but the VMI does not list it: nothing listens on the pod IP
    code, body = asyncio.run(_ws(server, vmi_path + "/8081"))
    assert code == 500, body
    assert (f"Internal error occurred: dialing VM: dial tcp {pod_ip}:8081: connect: "
            "connection refused").encode() in body
    code, body = asyncio.run(_ws(server, vmi_path + "/8080/sctp"))
    assert code == 400 and b"protocol must be tcp or udp" in body
    code, body = asyncio.run(_ws(server, vmi_path + "/70000"))
    assert code == 400 and b"port must be a number from 1 to 65535" in body
    kube.patch(VMIS, name, {"status": {"conditions": [
        {"type": "Paused", "status": "True", "reason": "PausedByUser"}]}}, ns, subresource="status")
    code, body = asyncio.run(_ws(server, vmi_path + "/8080"))
    assert code == 409, body
    assert (f'Operation cannot be fulfilled on virtualmachineinstance.kubevirt.io "{name}": '
            "VMI is paused").encode() in body
    kube.patch_status(VMIS, name, {"status": {"conditions": [], "interfaces": []}}, ns)
    code, body = asyncio.run(_ws(server, vmi_path + "/8080"))
    assert (code, b"no network interfaces are present" in body) == (400, True), body
    code, body = asyncio.run(_ws(server, f"{BASE}/namespaces/{ns}/virtualmachineinstances/"
                                         "nope/portforward/8080"))
    assert code == 404 and b'virtualmachineinstance.kubevirt.io "nope" not found' in body


def test_vm_not_started_and_rbac(cluster: tuple[Any, Client, int]) -> None:  # noqa: F811
    server, kube, _ = cluster
    ns = f"pf-{uuid.uuid4().hex[:6]}"
    kube.create(Resource("", "v1", "namespaces", namespaced=False),
                {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
    _vm_and_vmi(kube, ns, "halted", created=False)
    path = f"{BASE}/namespaces/{ns}/virtualmachines/halted/portforward/22"
    code, body = asyncio.run(_ws(server, path))
    assert code == 409, body
    assert (b'Operation cannot be fulfilled on virtualmachine.kubevirt.io "halted": '
            b"VMI is not started") in body
    # a user without `get` on virtualmachines/portforward is refused before anything
    kube.create(SERVICEACCOUNTS, {"apiVersion": "v1", "kind": "ServiceAccount",
                                                  "metadata": {"name": "robot"}}, ns)
    token = server.token_for_service_account(ns, "robot")
    code, body = asyncio.run(_ws(server, path, token=token))
    assert code == 403, body
    assert b'cannot get resource "virtualmachines/portforward"' in body
    rbac = "rbac.authorization.k8s.io"
    kube.create(Resource(rbac, "v1", "rolebindings"), {
        "apiVersion": f"{rbac}/v1", "kind": "RoleBinding", "metadata": {"name": "edit"},
        "roleRef": {"apiGroup": rbac, "kind": "ClusterRole", "name": "kubevirt.io:edit"},
        "subjects": [{"kind": "ServiceAccount", "name": "robot", "namespace": ns}]}, ns)
    _apply_edit_role(kube)
    deadline = time.monotonic() + 10
    while (code := asyncio.run(_ws(server, path, token=token))[0]) == 403 \
            and time.monotonic() < deadline:
        time.sleep(0.2)
    assert code == 409  # past RBAC (kubevirt.io:edit grants it), to upstream's refusal


def _apply_edit_role(kube: Client) -> None:
    import yaml
    roles = Resource("rbac.authorization.k8s.io", "v1", "clusterroles", namespaced=False)
    for doc in yaml.safe_load_all((ROOT / "manifests/rbac/kubevirt.yaml").read_text()):
        if (doc and doc["kind"] == "ClusterRole" and doc["metadata"]["name"] == "kubevirt.io:edit"
                and kube.get_or_none(roles, "kubevirt.io:edit") is None):
            kube.create(roles, doc)


def test_rootdisk_port_forward_listening_and_stdio(cluster: tuple[Any, Client, int],  # noqa: F811
                                                   running: tuple[str, str, str, Launch]) -> None:
    server = cluster[0]
    ns, name, _, _ = running
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        local = probe.getsockname()[1]
    cli = [sys.executable, "-m", "rootdisk", "port-forward", "--kubeconfig",
           str(server.kubeconfig_path)]
    proc = subprocess.Popen([*cli, f"vm/{name}/{ns}", f"{local}:8080"],
                            stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, cwd=ROOT)
    try:
        assert proc.stderr is not None
        line = proc.stderr.readline().decode()  # printed once it listens
        assert line == f"Forwarding from 127.0.0.1:{local} -> 8080\n", line
        for round_ in range(2):  # one WebSocket per connection
            with socket.create_connection(("127.0.0.1", local), timeout=30) as conn:
                conn.sendall(f"round {round_}\n".encode())
                got = b""
                while f"GUEST-ECHO:round {round_}\n".encode() not in got:
                    chunk = conn.recv(4096)
                    assert chunk, got
                    got += chunk
                assert got.startswith(NET_HELLO.encode())
    finally:
        proc.terminate()
        proc.wait(30)
        if proc.stderr is not None:
            proc.stderr.close()
    proc = subprocess.Popen([*cli, "--stdio", f"vmi/{name}/{ns}", "8080"],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, cwd=ROOT)
    try:
        assert proc.stdin is not None and proc.stdout is not None
        assert proc.stdout.readline() == f"{NET_HELLO} port=8080\n".encode()
        proc.stdin.write(b"over stdio\n")
        proc.stdin.flush()
        assert proc.stdout.readline() == b"GUEST-ECHO:over stdio\n"
        proc.stdin.close()  # the end of stdin is the end of the stream
        assert proc.wait(30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for f in (proc.stdin, proc.stdout):
            if f is not None:
                f.close()
    refused = subprocess.run([*cli, "--stdio", f"vmi/{name}/{ns}", "8081"],
                             stdin=subprocess.DEVNULL, capture_output=True, timeout=60, cwd=ROOT)
    assert refused.returncode == 1
    assert b"rootdisk port-forward: 500 Internal error occurred: dialing VM:" in refused.stderr


class UdpEcho:
    """A UDP server on its own loopback address (a pod IP, as far as virt-api can tell)
    that answers each datagram with ``UDP-ECHO:`` and the datagram."""

    def __init__(self) -> None:
        import threading
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind((f"127.205.{random.randint(0, 255)}.{random.randint(2, 254)}", 0))
        self.sock.settimeout(0.2)
        self.address, self.port = self.sock.getsockname()
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while not self.stopped.is_set():
            try:
                data, peer = self.sock.recvfrom(65535)
            except TimeoutError:
                continue
            self.sock.sendto(b"UDP-ECHO:" + data, peer)

    def close(self) -> None:
        self.stopped.set()
        self.thread.join(5)
        self.sock.close()


def test_udp_through_the_subresource_and_rootdisk_port_forward(
        cluster: tuple[Any, Client, int]) -> None:  # noqa: F811
    server, kube, _ = cluster
    ns, name = "default", f"udp-{uuid.uuid4().hex[:6]}"
    _vm_and_vmi(kube, ns, name)
    echo = UdpEcho()
    try:
        kube.patch(VMIS, name, {"status": {"phase": "Running", "interfaces": [
            {"name": "default", "ipAddress": echo.address}]}}, ns, subresource="status")
        path = f"{BASE}/namespaces/{ns}/virtualmachineinstances/{name}/portforward/{echo.port}/udp"
        code, got = asyncio.run(_ws(server, path, send=b"one datagram", until=b"datagram"))
        assert (code, got) == (101, b"UDP-ECHO:one datagram")
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            local = probe.getsockname()[1]
        proc = subprocess.Popen([sys.executable, "-m", "rootdisk", "port-forward",
                                 "--kubeconfig", str(server.kubeconfig_path),
                                 f"vm/{name}/{ns}", f"udp/{local}:{echo.port}"],
                                stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, cwd=ROOT)
        try:
            assert proc.stderr is not None
            assert proc.stderr.readline().decode() == (
                f"Forwarding from 127.0.0.1:{local} -> {echo.port}/udp\n")
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as client:
                client.settimeout(1)
                got_back = b""
                deadline = time.monotonic() + 30
                while not got_back and time.monotonic() < deadline:
                    client.sendto(b"via the cli", ("127.0.0.1", local))  # UDP: may be lost
                    try:
                        got_back = client.recv(65535)
                    except TimeoutError:
                        continue
                assert got_back == b"UDP-ECHO:via the cli"
        finally:
            proc.terminate()
            proc.wait(30)
            if proc.stderr is not None:
                proc.stderr.close()
    finally:
        echo.close()


def test_a_privileged_port_is_dialled_where_the_launcher_took_it() -> None:
    """localcluster's launcher takes the guest's port 22 at its pod IP's 30022 (it cannot
    listen on the node's 22): virt-api dials there for `portforward/22`."""
    from vm.api.portforward import target_of
    vmi = {"status": {"interfaces": [{"ipAddress": "127.1.0.9"}]}}
    assert (target_of("a", vmi, "22", None, unprivileged_start=1024).port,
            target_of("a", vmi, "22", None, unprivileged_start=0).port,
            target_of("a", vmi, "8080", "udp", unprivileged_start=1024).port) == (30022, 22, 8080)
