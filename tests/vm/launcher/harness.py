"""Start ``python -m vm.launcher`` for real (optionally in the pod sandbox) and observe it.

Every launch is bounded (a deadline on each wait) and torn down with its whole process
tree (QEMU runs in its own session, so descendants are found through /proc).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from tests.vm.launcher.sandbox import UID, Pod
from vm.launcher import client

REPO = Path(__file__).resolve().parents[3]
UID_DEFAULT = "6a1c2b9e-8d4e-4c1f-9a57-3f0e5b7c1d22"


def make_vmi(
    *,
    name: str = "vm1",
    namespace: str = "default",
    uid: str = UID_DEFAULT,
    memory: str = "64Mi",
    disks: list[dict[str, Any]] | None = None,
    volumes: list[dict[str, Any]] | None = None,
    grace: int | None = None,
    **spec_extra: Any,
) -> dict[str, Any]:
    disks = disks if disks is not None else [{"name": "root", "disk": {"bus": "virtio"}}]
    volumes = (
        volumes
        if volumes is not None
        else [
            {"name": d["name"], "persistentVolumeClaim": {"claimName": f"pvc-{d['name']}"}}
            for d in disks
        ]
    )
    spec: dict[str, Any] = {
        "domain": {"resources": {"requests": {"memory": memory}}, "devices": {"disks": disks}},
        "volumes": volumes,
        **spec_extra,
    }
    if grace is not None:
        spec["terminationGracePeriodSeconds"] = grace
    return {
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachineInstance",
        "metadata": {"name": name, "namespace": namespace, "uid": uid},
        "spec": spec,
    }


def descendants(pid: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(ppid, []).append(int(entry))
    out, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


def cmdline(pid: int) -> list[str]:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")
    except OSError:
        return []


class Launch:
    """One launcher run in its own short temp dir (unix socket paths must stay < 108)."""

    def __init__(
        self,
        vmi: dict[str, Any],
        *,
        driver: str = "qemu",
        sandbox: bool = False,
        env: dict[str, str] | None = None,
        args: list[str] | None = None,
    ) -> None:
        self.vmi = vmi
        self.driver = driver
        self.sandbox = sandbox
        self.base = Path(tempfile.mkdtemp(prefix="lt-", dir="/tmp"))
        self.extra_env = env or {}
        self.extra_args = args or []
        self.proc: subprocess.Popen[bytes] | None = None
        self.pod: Pod | None = None
        # the node's socket directory, and in it the VMI's own one (what its pod mounts)
        self.socket_root = self.base / "sock"
        uid = str(vmi["metadata"]["uid"])
        if sandbox:
            self.pod = Pod(self.base)
            self.private = self.pod.empty_dir("priv", "/var/run/kubevirt-private")
            self.ephemeral = self.pod.empty_dir("eph", "/var/run/kubevirt-ephemeral-disks")
            self.runtime = self.pod.empty_dir("run", "/var/run/libvirt")
            self.sockets = self.pod.empty_dir(f"sock/{uid}", "/var/run/kubevirt/sockets")
            self.term = self.pod.file("term", "/dev/termination-log")
        else:
            self.private, self.sockets = self.base / "priv", self.socket_root / uid
            self.private.mkdir()
            # the pod's ephemeral-disks and libvirt-runtime emptyDirs
            self.ephemeral, self.runtime = self.base / "eph", self.base / "run"
            self.ephemeral.mkdir()
            self.runtime.mkdir()
            self.sockets.mkdir(parents=True)
            self.term = self.base / "term"
        self.output = self.base / "launcher.out"

    # disks ------------------------------------------------------------------------------
    def volume_dir(self, name: str) -> Path:
        d = self.private / "vmi-disks" / name
        d.mkdir(parents=True, exist_ok=True)
        if self.sandbox:
            for p in (self.private / "vmi-disks", d):
                os.chown(p, UID, UID)
        return d

    def add_disk(self, name: str, source: Path) -> Path:
        target = self.volume_dir(name) / "disk.img"
        subprocess.run(["cp", "--sparse=always", str(source), str(target)], check=True)
        if self.sandbox:
            os.chown(target, UID, UID)
        return target

    # running ----------------------------------------------------------------------------
    @property
    def socket(self) -> Path:
        return self.sockets / f"{self.vmi['metadata']['uid']}.sock"

    @property
    def console_log(self) -> Path:
        return self.private / "console.log"

    def start(self) -> Launch:
        env = {
            "VMI": json.dumps(self.vmi),
            "LAUNCHER_DRIVER": self.driver,
            "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
            "LAUNCHER_LOG_LEVEL": "DEBUG",
            **self.extra_env,
        }
        inner = [sys.executable, "-m", "vm.launcher", *self.extra_args]
        if self.pod is not None:
            argv = self.pod.argv(inner, env=env)
        else:
            argv = [
                *inner,
                "--private-dir",
                str(self.private),
                "--socket-dir",
                str(self.sockets),
                "--termination-log",
                str(self.term),
                "--ephemeral-dir",
                str(self.ephemeral),
                "--runtime-dir",
                str(self.runtime),
            ]
            env = {**os.environ, **env, "PYTHONPATH": str(REPO)}
        with open(self.output, "wb") as out:
            self.proc = subprocess.Popen(
                argv,
                env=env,
                cwd=REPO,
                stdout=out,
                stderr=out,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        return self

    def wait(self, timeout: float = 120) -> int:
        assert self.proc is not None
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(
                f"launcher still running after {timeout} s:\n{self.log()}"
            ) from None

    def log(self) -> str:
        return self.output.read_text(errors="replace")[-6000:] if self.output.exists() else ""

    def termination(self) -> dict[str, Any]:
        data = self.term.read_bytes()
        assert len(data) <= 4096
        result: dict[str, Any] = json.loads(data)
        return result

    def console_text(self) -> str:
        return self.console_log.read_text(errors="replace") if self.console_log.exists() else ""

    def wait_for_console(self, text: str, timeout: float = 120) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if text in self.console_text():
                return
            if self.proc is not None and self.proc.poll() is not None:
                break
            time.sleep(0.05)
        raise AssertionError(
            f"{text!r} not in console after {timeout} s: "
            f"{self.console_text()[-2000:]!r}\n{self.log()}"
        )

    def wait_for_state(self, state: str, timeout: float = 60) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        last: dict[str, Any] = {}
        while time.monotonic() < deadline:
            with contextlib.suppress(client.ControlError, OSError):
                last = client.status(self.socket, timeout=5)
                if last.get("state") == state:
                    return last
            time.sleep(0.05)
        raise AssertionError(f"state {state!r} not reached, last {last}\n{self.log()}")

    def request(self, body: dict[str, Any]) -> dict[str, Any]:
        return client.request(self.socket, body, timeout=10)

    def qemu_pids(self) -> list[int]:
        assert self.proc is not None
        return [
            p
            for p in descendants(self.proc.pid)
            if os.path.basename(cmdline(p)[0]).startswith("qemu-system")
        ]

    def cleanup(self) -> None:
        if self.proc is not None:
            for pid in [*descendants(self.proc.pid), self.proc.pid]:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(10)
        shutil.rmtree(self.base, ignore_errors=True)
