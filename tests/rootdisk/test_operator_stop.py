"""The operator as a pod runs it (``python -m rootdisk.operator``), against a real
localcluster API server: SIGTERM, as the kubelet sends it on a rollout, ends the leading
replica promptly and releases its Lease, so the next replica leads at once instead of
after the grace period plus the Lease's duration."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from kubeclient import Client
from kubeclient.resources import LEASES, NAMESPACES
from localcluster.apiserver.threaded import ServerThread
from tests.vm.conftest import kube_for

ROOT = Path(__file__).resolve().parents[2]
STOP_BOUND = 15.0  # seconds; the hang this guards against lasted the whole grace period


@pytest.fixture()
def apiserver(tmp_path: Path) -> Iterator[tuple[Client, Path]]:
    thread = ServerThread(tmp_path / "apiserver", bookmark_interval=0.5)
    server = thread.start()
    kube = kube_for(server)
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "t",
        "clusters": [{"name": "t", "cluster": {"server": server.url,
                                               "certificate-authority": str(server.ca_path)}}],
        "users": [{"name": "t", "user": {"token": server.admin_token}}],
        "contexts": [{"name": "t", "context": {"cluster": "t", "user": "t"}}]}))
    kubeconfig.chmod(0o600)
    kube.create(NAMESPACES, {"apiVersion": "v1", "kind": "Namespace",
                             "metadata": {"name": "rootdisk"}})
    try:
        yield kube, kubeconfig
    finally:
        kube.api.close()
        thread.stop()


def _holder(kube: Client) -> str | None:
    lease = kube.get_or_none(LEASES, "rootdisk-vm", "rootdisk") or {}
    return (lease.get("spec") or {}).get("holderIdentity")


def _wait(what: str, fn: object, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if fn():  # type: ignore[operator]
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.mark.timeout(120)
@pytest.mark.parametrize("how", ["env", "flag"])
def test_sigterm_ends_the_leader_promptly_and_releases_its_lease(
        apiserver: tuple[Client, Path], tmp_path: Path, how: str) -> None:
    """``how``: the kubeconfig named by $KUBECONFIG, or by ``--kubeconfig`` (which every
    client the handlers make must honour too, not only the operator's own)."""
    kube, kubeconfig = apiserver
    env = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"}
    if how == "env":
        env["KUBECONFIG"] = str(kubeconfig)
    log = (tmp_path / "operator.log").open("wb")
    proc = subprocess.Popen(
        [sys.executable, "-m", "rootdisk.operator", "--controllers", "vm",
         *(["--kubeconfig", str(kubeconfig)] if how == "flag" else []),
         "--identity", "replica-a", "--bind", "127.0.0.1",
         "--health-port", "0", "--webhook-port", "0", "--namespace", "rootdisk"],
        cwd=ROOT, stdout=log, stderr=subprocess.STDOUT,
        env={**env, "PYTHONPATH": str(ROOT)})
    try:
        _wait("the Lease held by replica-a", lambda: _holder(kube) == "replica-a", 60)
        # kopf is running once it has logged in (its login activity succeeded)
        _wait("kopf running", lambda: b"Activity 'login' succeeded"
              in (tmp_path / "operator.log").read_bytes(), 60)
        proc.send_signal(signal.SIGTERM)
        started = time.monotonic()
        rc = proc.wait(timeout=STOP_BOUND)
        took = time.monotonic() - started
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        log.close()
    output = (tmp_path / "operator.log").read_text(errors="replace")
    assert rc == 0, output[-4000:]
    assert took < STOP_BOUND
    assert not _holder(kube), "the Lease was not released"
