"""`make demo` waits for its cluster's API server to answer, not for a kubeconfig file: a
cluster started again on its data dir takes the lock before its new API server listens,
while the kubeconfig of its earlier run is still there (the demo once read that one and
failed with a refused connection). And it restarts a running cluster that was started
from other code than the checkout's."""

from __future__ import annotations

import contextlib
import datetime as dt
import fcntl
import os
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from kubeclient.resources import VMS
from localcluster.apiserver import kubeconfig
from localcluster.apiserver.threaded import ServerThread
from localcluster.cluster import LOCK_FILE
from pki import certs
from rootdisk import codeprint, demo
from rootdisk.demo import DemoError, MiB, start_cluster
from tests.cdi.conftest import cdi_client


@contextlib.contextmanager
def running_on(data_dir: Path) -> Iterator[None]:
    """The data dir's lock held, as a `rootdisk up` that is starting holds it (from the
    checkout's code)."""
    codeprint.record(str(data_dir), codeprint.fingerprint(codeprint.checkout()))
    with open(data_dir / LOCK_FILE, "a+") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def test_the_kubeconfig_of_an_earlier_run_is_not_taken_for_a_cluster_that_answers(
        tmp_path: Path) -> None:
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ca = certs.make_ca(name="earlier", now=dt.datetime.now(dt.UTC))
    kubeconfig.write(tmp_path / "kubeconfig", kubeconfig.render(
        server=f"https://127.0.0.1:{port}", ca_pem=ca.cert_pem, token="earlier"))
    with running_on(tmp_path), pytest.raises(DemoError, match="API server"):
        start_cluster(str(tmp_path), timeout=1.5)


def test_a_cluster_whose_api_server_answers_is_taken(tmp_path: Path) -> None:
    thread = ServerThread(tmp_path)
    thread.start()
    try:
        with running_on(tmp_path):
            assert start_cluster(str(tmp_path), timeout=30) == str(tmp_path / "kubeconfig")
    finally:
        thread.stop()


@pytest.mark.parametrize("record", ["the checkout's", "another", "none"])
def test_make_demo_restarts_a_cluster_running_other_code(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, record: str) -> None:
    """A running cluster (the lock held, an API server answering) whose record is the
    checkout's is taken as it is; with another record or none, the demo stops it first.
    The stop is replaced here by one that fails, which the demo reports."""
    stops: list[str] = []

    def failing_stop(data_dir: str) -> int:
        stops.append(data_dir)
        return 1

    monkeypatch.setattr(demo, "stop", failing_stop)
    thread = ServerThread(tmp_path)
    thread.start()
    try:
        with running_on(tmp_path):
            if record == "none":
                os.unlink(tmp_path / codeprint.FILE)
            elif record == "another":
                codeprint.record(str(tmp_path), "0" * 64)
            if record == "the checkout's":
                assert demo.start_cluster(str(tmp_path), timeout=30) == \
                    str(tmp_path / "kubeconfig")
                assert stops == []
            else:
                with pytest.raises(demo.DemoError, match="did not stop"):
                    demo.start_cluster(str(tmp_path), timeout=30)
                assert stops == [str(tmp_path)]
    finally:
        thread.stop()


def test_the_earlier_demos_vm_is_gone_before_the_restart(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """Restarted with the earlier demo's VirtualMachine (runStrategy Always) still there,
    the cluster would boot it again only for the demo to replace it: the demo deletes it
    (and waits for it, its VMI and DataVolume to go) before it stops the cluster. The
    stop is replaced by one that records what the API server held then, and fails."""
    held: list[object] = []
    with cdi_client(tmp_path, crds=("virtualmachines.yaml", "virtualmachineinstances.yaml",
                                    "datavolumes.yaml"),
                    served="/apis/kubevirt.io/v1/virtualmachines", namespaces=()) as kube:

        def recording_stop(data_dir: str) -> int:
            held.append(kube.get_or_none(VMS, demo.VM_NAME, demo.NAMESPACE))
            return 1

        monkeypatch.setattr(demo, "stop", recording_stop)
        kube.create(VMS, demo.vm_manifest("http://127.0.0.1:9/guest.qcow2", disk_size=MiB),
                    demo.NAMESPACE)
        with running_on(tmp_path):
            codeprint.record(str(tmp_path), "0" * 64)  # started from other code
            with pytest.raises(demo.DemoError, match="did not stop"):
                demo.start_cluster(str(tmp_path), timeout=30)
    assert held == [None]
    out = capsys.readouterr().out
    assert out.index("restarting it") < out.index(
        f"replacing the VirtualMachine {demo.VM_NAME} of an earlier demo")
