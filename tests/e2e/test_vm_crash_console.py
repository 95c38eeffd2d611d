"""VirtualMachines on `rootdisk up` when things go wrong, and interactively: a launcher
whose QEMU fails at start is retried with a growing back-off (CrashLoopBackOff, no busy
loop), and `rootdisk console VM` on a real terminal (a pty) shows the small Linux guest's
output and passes what is typed to it."""

from __future__ import annotations

import os
import pty
import select
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from kubeclient import Client
from localcluster.cluster import Cluster
from tests.e2e import vmkit
from tests.fixtures.guests import MARKER, GuestBuilder, write_boot_sector_disk
from tests.fixtures.httpserver import HttpServer
from tests.localcluster.clusterkit import needs_root, wait_for

pytestmark = [needs_root, pytest.mark.slow, pytest.mark.e2e]
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module", autouse=True)
def vm_side(kube: Client) -> None:
    vmkit.wait_vm_side_ready(kube)


def _epoch(stamp: str) -> float:
    return datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%SZ").replace(
        tzinfo=UTC).timestamp()


@pytest.mark.timeout(1200)
def test_launcher_failing_at_start_backs_off(kube: Client, ns: str, http_server: HttpServer,
                                             tmp_path: Path) -> None:
    """QEMU refuses the VMI's CPU model, so every launcher fails before the guest runs:
    the VM shows CrashLoopBackOff, startFailure counts the failures and its retry delay
    grows, and no VMI is created while a back-off runs."""
    url = http_server.publish(write_boot_sector_disk(tmp_path / "g.img"), "g.img")
    manifest = vmkit.vm("crashy", url)
    manifest["spec"]["template"]["spec"]["domain"]["cpu"] = {"model": "rootdisk-no-such-cpu"}
    kube.create(vmkit.VMS, manifest, ns)

    uids: dict[str, float] = {}          # VMI uid → when first seen
    failures: dict[int, tuple[float, float]] = {}  # count → (seen at, retry delay seen)
    failed_reasons: set[str] = set()

    def observe() -> dict[str, Any]:
        now = time.time()
        vmi = kube.get_or_none(vmkit.VMIS, "crashy", ns)
        if vmi:
            uids.setdefault(vmi["metadata"]["uid"], now)
            if (vmi.get("status") or {}).get("phase") == "Failed":
                failed_reasons.add(str(vmi["status"].get("reason") or ""))
        status = (kube.get(vmkit.VMS, "crashy", ns).get("status") or {})
        sf = status.get("startFailure")
        if sf and sf["consecutiveFailCount"] not in failures:
            failures[sf["consecutiveFailCount"]] = (now, _epoch(sf["retryAfterTimestamp"]) - now)
        return status

    try:
        wait_for(lambda: observe().get("printableStatus") == "CrashLoopBackOff" and
                 len(failures) >= 1, timeout=500, what="CrashLoopBackOff")
        wait_for(lambda: (observe() and max(failures) >= 2), timeout=400,
                 what="a second start failure")
    except AssertionError as err:
        raise AssertionError(f"{err}\n{vmkit.diagnose(kube, ns)}") from None
    status = observe()
    assert status["printableStatus"] == "CrashLoopBackOff"
    assert status["startFailure"]["lastFailedVMIUID"] in uids
    assert failed_reasons and failed_reasons != {""}
    # the delay grows with the failures (10 s × n², +jitter upstream: 10–15 s, then 40–60 s)
    assert failures[2][1] > failures[1][1], failures
    # no busy loop: during the second back-off (40-60 s) no new VMI appears; 8 s of it
    # are watched, every 0.2 s (a busy loop makes one within a second)
    window_start = time.time()
    known = set(uids)
    while time.time() - window_start < 8 and time.time() < failures[2][0] + failures[2][1] - 2:
        observe()
        time.sleep(0.2)
    assert set(uids) <= known, f"VMIs created during the back-off: {set(uids) - known}"
    assert len(uids) <= max(failures) + 1, (uids, failures)
    kube.delete(vmkit.VMS, "crashy", ns)


@pytest.fixture
def echo_guest_url(http_server: HttpServer) -> str:
    return http_server.publish(GuestBuilder().linux(mode="wait").raw, "echo.img")


def _read_until(fd: int, want: bytes, seen: bytearray, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while want not in seen and time.monotonic() < deadline:
        ready, _, _ = select.select([fd], [], [], 0.5)
        if ready:
            try:
                chunk = os.read(fd, 4096)
            except OSError:  # EIO: the child closed the terminal
                return want in seen
            if not chunk:
                break
            seen += chunk
    return want in seen


@pytest.mark.timeout(1200)
def test_console_on_a_terminal_shows_output_and_passes_input(
        cluster: Cluster, kube: Client, ns: str, echo_guest_url: str) -> None:
    """`rootdisk console VM` with a pty as its terminal: what is typed reaches the guest
    (it answers ECHO:<line>), the guest's output is shown, Ctrl+] detaches with 0."""
    manifest = vmkit.vm("echo", echo_guest_url, size="128Mi")
    manifest["spec"]["template"]["spec"]["domain"]["resources"]["requests"]["memory"] = "256Mi"
    kube.create(vmkit.VMS, manifest, ns)
    try:
        vmkit.wait_printable(kube, ns, "echo", "Running", timeout=600)
        wait_for(lambda: MARKER in vmkit.cli(cluster, "console", "echo", "-n", ns,
                                             "--log").stdout,
                 timeout=400, what="the guest's marker (it reads the console from then on)")
    except AssertionError as err:
        raise AssertionError(f"{err}\n{vmkit.diagnose(kube, ns)}") from None

    master, slave = pty.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-m", "rootdisk", "console", "echo", "-n", ns,
         "--kubeconfig", cluster.kubeconfig],
        stdin=slave, stdout=slave, stderr=slave, cwd=REPO, start_new_session=True,
        env={**os.environ, "KUBECONFIG": "/nonexistent"})
    os.close(slave)
    seen = bytearray()
    try:
        assert _read_until(master, b"escape sequence is ^]", seen, 120), bytes(seen)
        answered = False
        for attempt in range(10):  # the WebSocket may connect a moment after the banner
            os.write(master, f"typed-on-a-pty-{attempt}\r".encode())
            if _read_until(master, f"ECHO:typed-on-a-pty-{attempt}".encode(), seen, 30):
                answered = True
                break
        assert answered, f"no echo through `rootdisk console`: {bytes(seen)!r}"
        os.write(master, b"\x1d")  # Ctrl+]
        assert proc.wait(60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(30)
        os.close(master)


def test_a_crash_looping_pod_is_named_with_its_reason_and_last_lines(
        cluster: Cluster, kube: Client, ns: str) -> None:
    """What `make demo` prints instead of waiting out its timeout: the stuck pod, its
    reason and the last lines its container logged (from its previous run once it waits
    in CrashLoopBackOff)."""
    from kubeclient import Client as ClientKube
    from kubeclient import load_configuration
    from kubeclient.resources import PODS
    from rootdisk import podhealth

    kube.create(PODS, {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "crashy"},
                       "spec": {"restartPolicy": "Always", "containers": [{
                           "name": "main", "image": "rootdisk/testbox:test",
                           "args": ["print", "opening-the-config", "print",
                                    "config-is-missing", "exit", "3"]}]}}, ns)
    client = ClientKube(load_configuration(cluster.kubeconfig))
    try:
        found = wait_for(lambda: podhealth.stuck(client.list(PODS, ns)), timeout=120,
                         what="the pod to be seen crash-looping")
        [item] = found
        assert (item.pod, item.container) == ("crashy", "main")
        assert item.reason in ("CrashLoopBackOff", "Error"), item
        text = podhealth.describe(client, item)
        assert text.startswith(f"pod {ns}/crashy container main: ")
        assert "   | config-is-missing" in text, text
    finally:
        client.close()
