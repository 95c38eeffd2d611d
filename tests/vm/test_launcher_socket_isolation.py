"""One launcher pod cannot reach another's control socket (the attack of a user who execs
into their own launcher pod): two launchers' control servers run as uid 107 without
capabilities in their pods' sandboxes, each with the socket directory its rendered pod
spec mounts, in directories the handler made as uid 107; launcher B lists, looks for,
connects to and removes launcher A's socket, then puts a symlink to it where the handler
looks for B's socket."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.vm.launcher import sandbox
from vm.handler import kube as handler_kube
from vm.handler import sockets
from vm.launcher import client
from vm.vmi.pod import LauncherConfig, launcher_pod

pytestmark = pytest.mark.skipif(not sandbox.available(), reason="needs root, bwrap and setpriv")

A = "3f0c6a52-0d1e-4b8a-9c61-2b7d4e5f6a01"
B = "8e2d1c40-7b6a-4f3e-8d2c-1a0b9c8d7e02"
ENV = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}


def _vmi(name: str, uid: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "ns", "uid": uid},
            "spec": {"domain": {"resources": {"requests": {"memory": "64Mi"}},
                                "devices": {"disks": []}}}}


def _host_mounts(pod: dict[str, Any]) -> dict[str, str]:
    """The compute container's hostPath mounts: node path → path in the pod."""
    volumes = {v["name"]: v for v in pod["spec"]["volumes"]}
    [compute] = [c for c in pod["spec"]["containers"] if c["name"] == "compute"]
    return {volumes[m["name"]]["hostPath"]["path"]: m["mountPath"]
            for m in compute["volumeMounts"] if "hostPath" in volumes[m["name"]]}


def _as_handler(root: Path, *uids: str) -> None:
    """sockets.ensure as the handler runs it: uid/gid 107, no other group, no capability,
    in a pod's sandbox (which binds the checkout, wherever it lives: under a 0700 home
    uid 107 could not read it from the host)."""
    pod = sandbox.Pod(root.parent / "handler-pod")
    pod.binds[str(root)] = str(root)
    subprocess.run(pod.argv(
        [sys.executable, "-c",
         "import sys; from pathlib import Path; from vm.handler import sockets; "
         "sockets.ensure(Path(sys.argv[1]), sys.argv[2:])", str(root), *uids], env=ENV),
        check=True, timeout=60)


@pytest.fixture
def base() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="iso-", dir="/tmp"))  # short: sun_path
    os.chmod(path, 0o755)  # noqa: S103 - uid 107 (the handler, the pods) walks through it
    yield path
    shutil.rmtree(path)


def test_a_launcher_cannot_see_reach_or_replace_another_launchers_socket(base: Path) -> None:
    root = base / "sockets"  # as the handler's init container leaves it: root:107 0770
    root.mkdir()
    os.chown(root, 0, 107)
    os.chmod(root, 0o770)  # noqa: S103 - the handler's init container's mode
    config = LauncherConfig(host_sockets=str(root))
    pods = {uid: launcher_pod(vmi=_vmi(name, uid), claims=[], views={}, config=config)
            for name, uid in (("a", A), ("b", B))}
    _as_handler(root, A, B)
    for uid in (A, B):
        st = os.lstat(root / uid)
        assert (st.st_uid, st.st_gid, st.st_mode & 0o7777) == (107, 107, 0o700)
    mounts = {uid: _host_mounts(pod) for uid, pod in pods.items()}

    def argv(uid: str, *rest: str) -> list[str]:
        pod = sandbox.Pod(base / f"pod-{uid[:8]}")
        pod.binds.update(mounts[uid])
        return pod.argv([sys.executable, "-m", "tests.vm.control_stub",
                         "/var/run/kubevirt/sockets", uid, *rest], env=ENV)

    [a_dir] = mounts[A]  # where A's pod puts its socket on the node
    a_socket = Path(a_dir) / f"{A}.sock"
    a = subprocess.Popen(argv(A), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while True:
            with contextlib.suppress(client.ControlError):
                assert client.status(a_socket, timeout=5)["reason"] == A
                break
            assert a.poll() is None and time.monotonic() < deadline, a.stdout.read()  # type: ignore[union-attr]
            time.sleep(0.1)

        b = subprocess.run(argv(B, A, str(a_socket)), capture_output=True, text=True,
                           timeout=120)
        assert b.returncode == 0, b.stdout + b.stderr
        report = json.loads(b.stdout.splitlines()[-1])
        assert report["listing"] == [f"{B}.sock"]
        assert report["found"] == []
        assert set(report["connect"].values()) == {"FileNotFoundError"}, report
        assert set(report["unlink"].values()) == {"FileNotFoundError"}, report

        assert mounts[A] == {str(root / A): "/var/run/kubevirt/sockets"}
        assert mounts[B] == {str(root / B): "/var/run/kubevirt/sockets"}
        assert a_socket == handler_kube.socket_of({"metadata": {"uid": A}}, str(root))
        # A's socket is whole and A's; B's "socket" is a symlink to it now, which the
        # handler does not follow: neither status nor the console reach A through B
        assert client.status(a_socket, timeout=5)["reason"] == A
        b_socket = handler_kube.socket_of({"metadata": {"uid": B}}, str(root))
        assert os.readlink(b_socket) == str(a_socket)
        with pytest.raises(client.ControlError, match="not a socket"):
            client.status(b_socket, timeout=5)
        with pytest.raises(client.ControlError, match="not a socket"):
            client.attach_console(b_socket, timeout=5)

        # the handler's cleanup, both VMIs gone: A's listens, B's holds a symlink (not
        # what a launcher makes): both stay, A's socket untouched
        assert sockets.collect(root, [], grace=0) == 0
        assert client.status(a_socket, timeout=5)["reason"] == A
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(a.pid, 9)
        a.wait(10)
        if a.stdout is not None:
            a.stdout.close()
    # A killed without its cleanup (once the kernel has closed its socket: the sandbox's
    # processes die with bwrap, a moment later): its dead socket and directory go, B's stays
    deadline = time.monotonic() + 20
    while sockets.collect(root, [], grace=0) == 0:
        assert time.monotonic() < deadline, os.listdir(root / A)
        time.sleep(0.1)
    assert sorted(os.listdir(root)) == [B]
