"""VMI readiness/liveness probes: admission (upstream's messages), the compute
container's probes in the launcher pod, the probed ports the launcher forwards, the
control request, and virt-probe (``python -m vm.launcher.probe``) through a real
control socket to the real qemu-ga."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.vm.agent.realagent import real_agent
from vm.domain.probes import guest_tcp_ports
from vm.domain.vmi import parse_vmi
from vm.launcher import guest_probe, probe, protocol
from vm.launcher.agent import SocketAgent
from vm.launcher.console import ConsoleHub, RotatingLog
from vm.launcher.control import ControlServer
from vm.launcher.errors import DriverError
from vm.vmi.pod import LauncherConfig, launcher_pod
from vm.webhooks.vmi_rules import validate_vmi_spec

DOMAIN = {"devices": {}, "resources": {"requests": {"memory": "128Mi"}}}


def _problems(**spec: object) -> list[str]:
    return [str(p) for p in validate_vmi_spec({"domain": DOMAIN, **spec})
            if "Probe" in p.field or "startStrategy" in p.field]


@pytest.mark.parametrize(("spec", "want"), [
    ({"readinessProbe": {"tcpSocket": {"port": 22}}}, []),
    ({"livenessProbe": {"guestAgentPing": {}}}, []),
    ({"readinessProbe": {"exec": {"command": ["true"]}, "tcpSocket": {"port": 22}}},
     ["spec.readinessProbe must have exactly one probe type set"]),
    ({"livenessProbe": {"periodSeconds": 3}},
     ["either spec.livenessProbe.tcpSocket, spec.livenessProbe.exec or "
      "spec.livenessProbe.httpGet must be set if a spec.livenessProbe is specified"]),
    ({"readinessProbe": {"httpGet": {"port": 80}}, "networks": [{"name": "m", "multus": {}}]},
     ["spec.readinessProbe.httpGet is only allowed if the Pod Network is attached"]),
    ({"readinessProbe": {"tcpSocket": {"port": 22}},
      "domain": {**DOMAIN, "devices": {"autoattachPodInterface": False}}},
     ["spec.readinessProbe.tcpSocket is only allowed if the Pod Network is attached"]),
    ({"startStrategy": "Paused", "livenessProbe": {"guestAgentPing": {}}},
     ["either spec.startStrategy or spec.livenessProbe should be provided.Pausing VMI "
      "with LivenessProbe is not supported"]),
    ({"readinessProbe": {"exec": {"command": []}}},
     ["spec.readinessProbe.exec.command: must be a non-empty list of strings"]),
    ({"readinessProbe": {"exec": {"command": ["x"]}, "periodSeconds": 0}},
     ["spec.readinessProbe.periodSeconds: must be at least 1"]),
    ({"readinessProbe": {"exec": {"command": ["x"]}, "failureThreshold": "3"}},
     ["spec.readinessProbe.failureThreshold: must be an integer"]),
    ({"readinessProbe": {"exec": {"command": ["x"]}, "successThreshold": 2}}, []),
    ({"livenessProbe": {"exec": {"command": ["x"]}, "successThreshold": 2}},
     ["spec.livenessProbe.successThreshold: must be 1 for a liveness probe"]),
])
def test_admission(spec: dict, want: list[str]) -> None:
    assert _problems(**spec) == want


def _vmi(**spec: object) -> dict:
    return {"metadata": {"name": "vm1", "namespace": "ns", "uid": "uid-1"},
            "spec": {"domain": DOMAIN, **spec}}


def _compute(vmi: dict, start: int = 1024) -> dict:
    pod = launcher_pod(vmi=vmi, claims=[], views={},
                       config=LauncherConfig(unprivileged_start=start))
    [compute] = [c for c in pod["spec"]["containers"] if c["name"] == "compute"]
    return compute


def test_http_probes_go_to_the_pod_ip_where_the_launcher_takes_the_port() -> None:
    compute = _compute(_vmi(
        readinessProbe={"httpGet": {"port": 22, "path": "/"}, "periodSeconds": 2,
                        "initialDelaySeconds": 5},
        livenessProbe={"httpGet": {"port": 8080, "path": "/h"}, "failureThreshold": 4}))
    assert compute["readinessProbe"] == {"httpGet": {"port": 30022, "path": "/"},
                                         "periodSeconds": 2, "initialDelaySeconds": 15}
    assert compute["livenessProbe"] == {"httpGet": {"port": 8080, "path": "/h"},
                                        "failureThreshold": 4, "initialDelaySeconds": 10}
    # a node whose unprivileged ports start at 0 takes port 22 itself
    assert _compute(_vmi(readinessProbe={"httpGet": {"port": 22}}), 0)[
        "readinessProbe"]["httpGet"] == {"port": 22}


def test_tcp_probes_ask_the_launcher_whether_the_guest_accepts() -> None:
    """QEMU's NAT accepts on the pod side whatever the guest does: a bare tcpSocket probe
    would always pass, so the launcher checks the guest's side (vm.launcher.tcp_probe)."""
    compute = _compute(_vmi(
        readinessProbe={"tcpSocket": {"port": 22}, "periodSeconds": 2, "initialDelaySeconds": 5,
                        "timeoutSeconds": 2}))
    sock = "/var/run/kubevirt/sockets/uid-1.sock"
    assert compute["readinessProbe"] == {
        "exec": {"command": ["python", "-m", "vm.launcher.probe", "--socket", sock,
                             "--timeoutSeconds", "2", "--tcpSocket", "22"]},
        "periodSeconds": 2, "initialDelaySeconds": 15, "timeoutSeconds": 3}


def test_exec_and_ping_probes_are_wrapped_in_virt_probe() -> None:
    compute = _compute(_vmi(
        readinessProbe={"exec": {"command": ["cat", "/tmp/ready"]}, "timeoutSeconds": 3},
        livenessProbe={"guestAgentPing": {}}))
    sock = "/var/run/kubevirt/sockets/uid-1.sock"
    assert compute["readinessProbe"] == {
        "exec": {"command": ["python", "-m", "vm.launcher.probe", "--socket", sock,
                             "--timeoutSeconds", "3", "--command", "cat", "--", "/tmp/ready"]},
        "timeoutSeconds": 4, "initialDelaySeconds": 10}
    assert compute["livenessProbe"] == {
        "exec": {"command": ["python", "-m", "vm.launcher.probe", "--socket", sock,
                             "--timeoutSeconds", "1", "--guestAgentPing"]},
        "timeoutSeconds": 2, "initialDelaySeconds": 10}
    assert "readinessProbe" not in _compute(_vmi())


def test_the_launcher_forwards_probed_ports_listed_or_not() -> None:
    spec = {"readinessProbe": {"tcpSocket": {"port": 22}},
            "livenessProbe": {"httpGet": {"port": "8080"}}}
    assert guest_tcp_ports(spec) == (22, 8080)
    default = parse_vmi(_vmi(**spec))
    assert [(p.protocol, p.port) for p in default.interfaces[0].ports] == [
        ("tcp", 22), ("tcp", 8080)]
    listed = parse_vmi(_vmi(**spec, networks=[{"name": "default", "pod": {}}], domain={
        **DOMAIN, "devices": {"interfaces": [{"name": "default", "masquerade": {},
                                              "ports": [{"port": 22}, {"port": 53,
                                                                       "protocol": "UDP"}]}]}}))
    assert [(p.protocol, p.port) for p in listed.interfaces[0].ports] == [
        ("tcp", 22), ("udp", 53), ("tcp", 8080)]
    assert parse_vmi(_vmi()).interfaces[0].ports == ()


@pytest.mark.parametrize(("body", "error"), [
    (b'{"cmd":"probe","timeoutSeconds":0,"command":["x"]}',
     "timeoutSeconds: must be between 1 and 3600"),
    (b'{"cmd":"probe","timeoutSeconds":true,"command":["x"]}',
     "timeoutSeconds: must be an integer"),
    (b'{"cmd":"probe","timeoutSeconds":1,"command":[]}',
     "command: must be a non-empty list of strings"),
    (b'{"cmd":"probe","timeoutSeconds":1,"command":["x", 1]}',
     "command: must be a non-empty list of strings"),
    (b'{"cmd":"probe","timeoutSeconds":1,"guestAgentPing":true,"command":["x"]}',
     "command: not with guestAgentPing"),
    (b'{"cmd":"probe","timeoutSeconds":1,"guestAgentPing":"yes"}',
     "guestAgentPing: must be a boolean"),
])
def test_bad_probe_requests_are_refused(body: bytes, error: str) -> None:
    got = protocol.parse_request(line=body)
    assert isinstance(got, protocol.BadRequest) and got.error == error


class AgentControls:
    """The launcher's probe path (``Supervisor.probe``) over a real qemu-ga on the
    host; the other controls are not used by virt-probe."""

    def __init__(self, agent_path: str) -> None:
        self.agent_path = agent_path

    async def probe(self, request: protocol.ProbeRequest) -> None:
        agent = SocketAgent(self.agent_path)
        try:
            await guest_probe.run(agent, command=request.command,
                                  guest_agent_ping=request.guest_agent_ping,
                                  timeout=request.timeout_seconds)
        except guest_probe.ProbeFailed as err:
            raise DriverError(str(err)) from err
        finally:
            await agent.close()


@pytest.fixture
def control_socket(tmp_path: Path) -> Iterator[str]:
    with real_agent(("guest-exec", "guest-exec-status")) as agent_path:
        sock_dir = Path("/tmp") / f"rdp-{tmp_path.name[-20:]}"
        sock_dir.mkdir()
        path = str(sock_dir / "c.sock")
        loop = asyncio.new_event_loop()
        server = ControlServer(path=path, controls=AgentControls(str(agent_path)),  # type: ignore[arg-type]
                               console=ConsoleHub(RotatingLog(str(tmp_path / "console.log"))))
        loop.run_until_complete(server.start())
        thread = threading.Thread(target=loop.run_forever, daemon=True)
        thread.start()
        try:
            yield path
        finally:
            asyncio.run_coroutine_threadsafe(server.close(), loop).result(10)
            loop.call_soon_threadsafe(loop.stop)
            thread.join(10)
            loop.close()
            sock_dir.rmdir()


def test_virt_probe_through_the_launcher_to_the_agent(
        control_socket: str, capsys: pytest.CaptureFixture[str]) -> None:
    run = ["--socket", control_socket, "--timeoutSeconds", "5"]
    assert probe.main([*run, "--command", "/bin/true"]) == 0
    assert probe.main([*run, "--command", "/bin/sh", "--", "-c", "exit 4"]) == 1
    assert "command failed with exit code 4" in capsys.readouterr().err
    assert probe.main([*run, "--guestAgentPing"]) == 0
    assert probe.main(["--socket", control_socket + ".none", "--guestAgentPing"]) == 1
    assert "virt-probe: " in capsys.readouterr().err


def test_virt_probe_refuses_bad_arguments() -> None:
    with pytest.raises(SystemExit):
        probe.main(["--socket", "s", "--guestAgentPing", "--command", "x"])
    with pytest.raises(SystemExit):
        probe.main(["--socket", "s"])
