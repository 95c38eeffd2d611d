"""The pod network as a launcher pod sees it (uid 107, no capabilities, the node's
network): the guest gets upstream's masquerade addresses by DHCP, and inbound TCP on the
pod IP reaches it for the interface's listed ports only, with either driver."""

from __future__ import annotations

import random
import socket
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.fixtures.guests import NET_HELLO, NET_MARKER, LinuxGuest
from tests.vm.launcher import sandbox
from tests.vm.launcher.harness import Launch, make_vmi

Factory = Callable[..., Launch]

pytestmark = pytest.mark.skipif(not sandbox.available(), reason="needs root, bwrap and setpriv")


def _pod_ip() -> str:
    # a loopback address of its own, as localcluster gives each pod
    return f"127.203.{random.randint(0, 255)}.{random.randint(2, 254)}"


def _vmi(ports: list[dict[str, object]]) -> dict[str, object]:
    return make_vmi(
        memory="256Mi",
        networks=[{"name": "default", "pod": {}}],
        domain={"resources": {"requests": {"memory": "256Mi"}}, "devices": {
            "disks": [{"name": "root", "disk": {"bus": "virtio"}}],
            "interfaces": [{"name": "default", "masquerade": {}, "ports": ports}]}},
    )


def _talk(address: str, port: int) -> bytes:
    with socket.create_connection((address, port), timeout=20) as conn:
        conn.settimeout(20)
        conn.sendall(b"ping from the host\n")
        data = b""
        while b"GUEST-ECHO:" not in data or not data.endswith(b"\n"):
            chunk = conn.recv(4096)
            if not chunk:
                break
            data += chunk
        return data


@pytest.mark.parametrize("driver", ["qemu", "libvirt"])
def test_listed_port_reaches_the_guest_on_the_pod_ip_and_unlisted_does_not(
    launch: Factory, linux_guest_net: LinuxGuest, driver: str
) -> None:
    pod_ip = _pod_ip()
    vmi = _vmi([{"name": "echo", "port": 8080}])
    spec = vmi["spec"]
    assert isinstance(spec, dict)
    spec["readinessProbe"] = {"tcpSocket": {"port": 9}}  # forwarded, not served
    run = launch(vmi, driver=driver, sandbox=True, env={"POD_IP": pod_ip})
    run.add_disk("root", linux_guest_net.raw)
    run.start()
    run.wait_for_state("running")
    # QEMU's NAT accepts at once, but the guest has no network yet: a tcpSocket probe
    # (vm.launcher.tcp_probe) fails where a bare connect would pass
    early = run.request({"cmd": "probe", "timeoutSeconds": 1, "tcpSocket": 8080})
    assert early["ok"] is False and "did not accept TCP port 8080" in early["error"], early
    run.wait_for_console(NET_MARKER, timeout=180)
    # upstream's masquerade addresses, given by DHCP
    assert f"{NET_MARKER} addr=10.0.2.2/24 gw=10.0.2.1" in run.console_text()
    got = _talk(pod_ip, 8080)
    assert got.startswith(f"{NET_HELLO} port=8080\n".encode()), got
    assert b"GUEST-ECHO:ping from the host\n" in got
    assert run.request({"cmd": "probe", "timeoutSeconds": 5, "tcpSocket": 8080}) == {"ok": True}
    refused = run.request({"cmd": "probe", "timeoutSeconds": 5, "tcpSocket": 9})
    assert refused["ok"] is False and "refused TCP port 9" in refused["error"], refused
    unknown = run.request({"cmd": "probe", "timeoutSeconds": 1, "tcpSocket": 7})
    assert unknown == {"ok": False, "error": "guest TCP port 7 is not forwarded to the pod"}
    # ports are listed: only those reach the guest, port-forward included (as upstream)
    unlisted = run.request({"cmd": "forward", "port": 8081})
    assert unlisted["ok"] is False and "TCP port 8081 is not listed" in unlisted["error"]
    # the guest serves 8081 too, but it is not listed: nothing listens for it
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection((pod_ip, 8081), timeout=10).close()
    # and the listed port is bound on the pod IP only, not on the node's other addresses
    other = next(ip for ip in iter(_pod_ip, None) if ip != pod_ip)
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection((other, 8080), timeout=10).close()
    assert run.request({"cmd": "kill"}) == {"ok": True}
    run.wait()


@pytest.mark.parametrize("driver", ["qemu", "libvirt"])
def test_no_ports_listed_any_port_is_forwarded_on_request(
    launch: Factory, linux_guest_net: LinuxGuest, driver: str
) -> None:
    """Upstream forwards every port of a VMI that lists none; QEMU's user network has no
    wildcard, so the launcher opens the forward virt-api's port-forward asks for
    (``hostfwd_add``), at the pod IP, once."""
    pod_ip = _pod_ip()
    run = launch(_vmi([]), driver=driver, sandbox=True, env={"POD_IP": pod_ip})
    run.add_disk("root", linux_guest_net.raw)
    run.start()
    run.wait_for_console(NET_MARKER, timeout=180)
    with pytest.raises(ConnectionRefusedError):  # nothing before it is asked for
        socket.create_connection((pod_ip, 8081), timeout=10).close()
    answer = run.request({"cmd": "forward", "port": 8081})
    assert answer == {"ok": True, "address": pod_ip, "port": 8081}
    assert run.request({"cmd": "forward", "port": 8081}) == answer  # once
    got = _talk(pod_ip, 8081)
    assert got.startswith(f"{NET_HELLO} port=8081\n".encode()), got
    assert run.request({"cmd": "forward", "port": 0})["error"].startswith("port: must be")
    assert run.request({"cmd": "kill"}) == {"ok": True}
    run.wait()


def test_a_privileged_port_reaches_the_guest_above_the_base(
    launch: Factory, linux_guest_net: LinuxGuest
) -> None:
    """The launcher (uid 107, no capabilities) cannot listen on the node's port 22: the
    guest's port 22 is taken at the pod IP's 30022 (podnet.node_port), where virt-api's
    port-forward dials it."""
    start = int(Path("/proc/sys/net/ipv4/ip_unprivileged_port_start").read_text())
    if start <= 22:
        pytest.skip("this node lets anyone listen on port 22")
    pod_ip = _pod_ip()
    run = launch(_vmi([{"name": "ssh", "port": 22}]), sandbox=True, env={"POD_IP": pod_ip})
    run.add_disk("root", linux_guest_net.raw)
    run.start()
    run.wait_for_console(NET_MARKER, timeout=180)
    got = _talk(pod_ip, 30022)
    assert got.startswith(f"{NET_HELLO} port=22\n".encode()), got
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection((pod_ip, 22), timeout=10).close()
    assert run.request({"cmd": "kill"}) == {"ok": True}
    run.wait()
