"""`make demo` is itself tested: its whole flow on its own `rootdisk up`, then STOP=1.

Its VM is the suite's Debian cloud guest booted with its root and its cloud-init seed on
virtio disks (virtio-blk); tests/e2e/test_vm_cloudguest.py boots it from SATA."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from localcluster.cluster import is_running, read_pid
from rootdisk import codeprint
from tests.localcluster.clusterkit import needs_root

pytestmark = [needs_root, pytest.mark.slow, pytest.mark.e2e, pytest.mark.cloud_guest]
ROOT = Path(__file__).resolve().parents[2]


def demo(data_dir: Path, *extra: str, env: dict[str, str] | None = None,
         timeout: float = 1200, record: Callable[[str, object], None] | None = None,
         label: str = "demo") -> subprocess.CompletedProcess[str]:
    """`python -m rootdisk.demo` (its stderr merged into its stdout), each line stamped
    with the seconds since the start as it arrives; the stamped lines go to the test's
    report (``record``: the junit XML keeps them for a test that passed too, so a run
    that took long shows which phase did)."""
    argv = [sys.executable, "-m", "rootdisk.demo", "--data-dir", str(data_dir),
            "--timeout", "500", *extra]
    start = time.monotonic()
    stamped: list[tuple[float, str]] = []
    # unbuffered: each line as it is printed, not all at the end
    child_env = {**(os.environ if env is None else env), "PYTHONUNBUFFERED": "1"}
    with subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          cwd=ROOT, env=child_env, stdin=subprocess.DEVNULL) as proc:
        assert proc.stdout is not None
        out = proc.stdout

        def read() -> None:
            for line in out:
                stamped.append((time.monotonic() - start, line))

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        try:
            code = proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            raise
        finally:
            reader.join(10)
    timeline = "".join(f"{t:7.1f} s  {line}" for t, line in stamped)
    print(f"--- {label} ({time.monotonic() - start:.0f} s)\n{timeline}")
    if record is not None:
        record(label, timeline)
    return subprocess.CompletedProcess(argv, code, "".join(line for _, line in stamped), "")


@pytest.mark.timeout(2400)
def test_make_demo_flow_and_stop_then_again(tmp_path: Path,
                                            record_property: Callable[[str, object], None],
                                            ) -> None:
    """The whole flow: a Debian cloud guest imported, booted with cloud-init, logged in to
    with `rootdisk ssh`; then `rootdisk ssh vm/demo` with no other setup (the demo's data
    dir is the default one: the cluster, the key and the guest's host key are found);
    then `make demo` again on the same data dir once the checkout has changed (the
    running cluster's recorded code fingerprint no longer matches): the demo stops the
    cluster as STOP=1 does and starts it again from its state (the kubeconfig of the first
    run still there while the new API server is not listening yet; the manifests applied
    again beside the servers' pods), and the demo's new VM is logged in to again (the same
    keys); then STOP=1."""
    state = tmp_path / "state"
    env = {**os.environ, "XDG_STATE_HOME": str(state), "HOME": str(tmp_path / "home")}
    env.pop("KUBECONFIG", None)
    data_dir = state / "rootdisk"  # the default data dir under that XDG_STATE_HOME
    try:
        out = demo(data_dir, env=env, record=record_property, label="first run")
        assert out.returncode == 0, out.stdout + out.stderr
        text = out.stdout
        assert "DataVolume demo-rootdisk: Succeeded          100.0%" in text
        # the import's phases only move forward (it once went back from ImportInProgress
        # to ImportScheduled while the populator rebound the volume)
        order = ["Pending", "PendingPopulation", "ImportScheduled", "ImportInProgress",
                 "Succeeded"]
        phases = [line.split(":", 1)[1].split()[0] for line in text.splitlines()
                  if line.startswith("   DataVolume demo-rootdisk:")]
        ranks = [order.index(p) for p in phases if p in order]
        assert ranks == sorted(ranks), phases
        assert "VirtualMachine demo: Running" in text
        assert "   | Linux demo " in text and "   | status: done" in text  # from the guest
        login = subprocess.run([sys.executable, "-m", "rootdisk", "ssh", "vm/demo",
                                "--command", "cloud-init status"], capture_output=True,
                               text=True, timeout=300, check=False, env=env,
                               stdin=subprocess.DEVNULL)
        assert login.returncode == 0, login.stdout + login.stderr
        assert "status: done" in login.stdout
        assert f"export KUBECONFIG={data_dir}/kubeconfig" in text
        assert is_running(str(data_dir))  # left up for the user
        pid = read_pid(str(data_dir))
        assert codeprint.recorded(str(data_dir)) == codeprint.fingerprint(ROOT)
        # what a pull or an edit of the checkout does to the running cluster's record
        codeprint.record(str(data_dir), "0" * 64)
        again = demo(data_dir, env=env, record=record_property, label="after a code change")
        assert again.returncode == 0, again.stdout + again.stderr
        assert "was started from other code than this checkout's" in again.stdout
        assert read_pid(str(data_dir)) != pid  # a new `rootdisk up`
        assert codeprint.recorded(str(data_dir)) == codeprint.fingerprint(ROOT)
        assert "replacing the VirtualMachine demo of an earlier demo" in again.stdout
        assert "   | status: done" in again.stdout
    finally:
        stopped = demo(data_dir, "--stop", env=env, timeout=180, record=record_property,
                       label="stop")
    assert stopped.returncode == 0, stopped.stdout
    assert not is_running(str(data_dir))
