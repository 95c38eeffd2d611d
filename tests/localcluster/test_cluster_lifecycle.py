"""`rootdisk up`/`down`, restarts, the data-dir lock, and recovery from a killed run."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import pytest

from kubeclient import Client, resources
from localcluster.cluster import Cluster, ClusterError, is_running
from tests.localcluster.clusterkit import (
    TESTBOX,
    claim_volume,
    logs,
    needs_root,
    options,
    pod,
    pvc,
    running,
    try_logs,
    wait_for,
    wait_phase,
)
from tests.localcluster.storage.conftest import leftovers, settled_leftovers

pytestmark = [needs_root, pytest.mark.slow]


def test_second_start_on_the_same_data_dir_is_refused(tmp_path) -> None:
    with running(str(tmp_path)):
        second = Cluster(str(tmp_path), options())
        with pytest.raises(ClusterError, match=f"already running on {tmp_path}.*pid {os.getpid()}"):
            second.start()
        assert is_running(str(tmp_path))
    assert not is_running(str(tmp_path))
    assert settled_leftovers(str(tmp_path)) == ([], [])


def test_volume_data_survives_down_and_up(tmp_path) -> None:
    with running(str(tmp_path)) as c:
        kube = c.kube
        assert kube is not None
        kube.create(resources.PVCS, pvc("keep", sc="local-immediate"), "default")
        kube.create(resources.PODS, pod("writer", "write", "/data/f", "persisted",
                                     volumes=[claim_volume("d", "keep")],
                                     mounts=[{"name": "d", "mountPath": "/data"}]), "default")
        wait_phase(kube, resources.PODS, "writer", "Succeeded")
    assert settled_leftovers(str(tmp_path)) == ([], [])
    with running(str(tmp_path)) as c:
        kube = c.kube
        assert kube is not None
        assert wait_phase(kube, resources.PVCS, "keep", "Bound")
        kube.create(resources.PODS, pod("reader", "read", "/data/f",
                                     volumes=[claim_volume("d", "keep")],
                                     mounts=[{"name": "d", "mountPath": "/data"}]), "default")
        wait_phase(kube, resources.PODS, "reader", "Succeeded")
        assert logs(kube, "reader") == "read: persisted\n"


def _up(data_dir: str, manifests: str) -> subprocess.Popen[str]:
    env = dict(os.environ, LOCALCLUSTER_IMAGES=json.dumps({"rootdisk/testbox": ["python",
                                                                                TESTBOX]}))
    with open(os.path.join(os.path.dirname(manifests), "up.log"), "w") as log:
        return subprocess.Popen(
            [sys.executable, "-m", "rootdisk", "up", "--data-dir", data_dir, "--manifests",
             manifests], stdout=subprocess.PIPE, stderr=log, text=True, env=env,
            start_new_session=True)


def _reap(proc: subprocess.Popen[str]) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    if proc.stdout is not None:
        proc.stdout.close()


def _wait_up(proc: subprocess.Popen[str]) -> str:
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert "kubeconfig:" in line, (line, proc.poll())
    return line.split("kubeconfig:")[1].strip()


def test_rootdisk_up_and_down(tmp_path) -> None:
    data_dir, manifests = str(tmp_path / "state"), str(tmp_path / "manifests")
    os.makedirs(manifests)
    proc = _up(data_dir, manifests)
    try:
        kubeconfig = _wait_up(proc)
        assert kubeconfig == os.path.join(data_dir, "kubeconfig")
        again = subprocess.run([sys.executable, "-m", "rootdisk", "up", "--data-dir", data_dir],
                               capture_output=True, text=True, timeout=60, check=False)
        assert again.returncode == 1 and "already running" in again.stderr
        down = subprocess.run([sys.executable, "-m", "rootdisk", "down", "--data-dir", data_dir],
                              capture_output=True, text=True, timeout=90, check=False)
        assert down.returncode == 0, down.stderr
        assert proc.wait(30) == 0
    finally:
        _reap(proc)
    assert settled_leftovers(data_dir) == ([], [])
    down = subprocess.run([sys.executable, "-m", "rootdisk", "down", "--data-dir", data_dir],
                          capture_output=True, text=True, timeout=60, check=False)
    assert down.returncode == 1 and "no cluster is running" in down.stderr


def test_killed_run_leaves_nothing_after_the_next_start(tmp_path) -> None:
    data_dir, manifests = str(tmp_path / "state"), str(tmp_path / "manifests")
    os.makedirs(manifests)
    proc = _up(data_dir, manifests)
    try:
        kube = Client.connect(_wait_up(proc))
        kube.create(resources.PVCS, pvc("fs", sc="local-reflink"), "default")
        kube.create(resources.PVCS, pvc("blk", mode="Block"), "default")
        kube.create(resources.PODS, pod(
            "busy", "append", "/data/runs", "run", "sleep", "600", restart="Always",
            volumes=[claim_volume("d", "fs"), claim_volume("b", "blk")],
            mounts=[{"name": "d", "mountPath": "/data"}],
            devices=[{"name": "b", "devicePath": "/dev/xvdb"}]), "default")
        wait_for(lambda: "lines: 1" in try_logs(kube, "busy"), what="pod running")
        kube.close()
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(30)
    finally:
        _reap(proc)
    mounts, loops = leftovers(data_dir)
    # the pool, the shared mount the volumes live under, fs; loops: pool, fs, blk: orphaned
    assert len(mounts) == 3 and len(loops) == 3
    with running(data_dir) as c:
        mounts, loops = leftovers(data_dir)
        assert len(mounts) == 3 and len(loops) == 3  # re-attached once, not doubled
        kube = c.kube
        assert kube is not None
        # The pod runs again on the same volume, whose data survived the kill.
        wait_for(lambda: "lines: 2" in try_logs(kube, "busy"), what="pod rerun")
    assert settled_leftovers(data_dir) == ([], [])


def test_missing_programs_are_named(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    cluster = Cluster(str(tmp_path / "state"), options())
    with pytest.raises(ClusterError, match=r"missing programs: losetup, mount, .*bwrap"):
        cluster.start()
    assert not is_running(str(tmp_path / "state"))
