"""The cluster half of bench/vm_boot.py: time from creating a VirtualMachine on ``rootdisk
up`` to the guest's marker in its console log, against a hand-run QEMU booting the same
disk in the same run.

Why it exists: what a user waits for on the cluster is the whole path (VM controller →
VMI → launcher pod → kubelet → launcher → QEMU), not the launcher alone. The disk comes
from a DataVolume that has already Succeeded (created first and waited for, on the
Immediate-binding class), so the import is not timed; each run creates a VM on it
(runStrategy Once: the guest's power-off after its marker ends it, and the final VMI and
its pod stay until the VM is deleted, where RerunOnFailure would delete them at once and
the pod's log with them, racing the reads), reads the launcher pod's
``guest-console-log`` container (what ``rootdisk console --log`` prints) until the
marker, then deletes the VM and waits for its pod to go. The driver is switched
through the KubeVirt CR's ``spec.configuration.launcherDriver``.

Memory: the peak of the summed RSS of the launcher pod's processes (every process tree
whose root's command line names the pod's uid: the kubelet's sandboxes of its
containers), beside upstream's overhead for that VMI (vm/vmi/overhead.py).
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

from _common import REPO, _memory, _tree

from kubeclient import Client, KubeError, load_configuration
from kubeclient.resources import DATAVOLUMES, KUBEVIRTS, PODS, VMIS, VMS
from rootdisk.demo import components_ready, serve
from tests.fixtures.guests import MARKER
from vm.vmi.overhead import memory_overhead

NS = "default"
MIB = 1024 * 1024


def wait(what: str, fn: Callable[[], Any], *, timeout: float, every: float = 0.2) -> Any:
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = fn()
        if last:
            return last
        time.sleep(every)
    raise TimeoutError(f"timed out after {timeout:.0f} s waiting for {what} (last {last!r})")


class PodMemorySampler:
    """Peak summed RSS over the process trees whose root's argv names ``uid``."""

    def __init__(self, uid_fn: Callable[[], str | None], interval: float = 0.02) -> None:
        self.uid_fn = uid_fn
        self.interval = interval
        self.peak_rss = 0
        self.peak_by_name: dict[str, int] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    @staticmethod
    def _roots(uid: str) -> list[int]:
        found = []
        needle = uid.encode()
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            with contextlib.suppress(OSError):
                if needle in Path(f"/proc/{entry}/cmdline").read_bytes():
                    found.append(int(entry))
        # keep only the outermost: a root's descendants are counted through it
        inside: set[int] = set()
        for p in found:
            inside.update(q for q in _tree(p) if q != p)
        return [p for p in found if p not in inside]

    def _run(self) -> None:
        uid: str | None = None
        roots: list[int] = []
        rescan = 0.0
        while not self._stop.is_set():
            if uid is None:
                uid = self.uid_fn()
            if uid and time.monotonic() >= rescan:
                roots = self._roots(uid)
                rescan = time.monotonic() + 0.25
            total = 0
            by_name: dict[str, int] = {}
            for pid in {q for r in roots for q in _tree(r)}:
                name, rss, _ = _memory(pid)
                total += rss
                by_name[name] = by_name.get(name, 0) + rss
            self.peak_rss = max(self.peak_rss, total)
            for name, rss in by_name.items():
                if rss:
                    self.peak_by_name[name] = max(self.peak_by_name.get(name, 0), rss)
            self._stop.wait(self.interval)

    def __enter__(self) -> PodMemorySampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


@contextlib.contextmanager
def cluster(workdir: Path, *, timeout: float) -> Iterator[tuple[Client, str]]:
    """``rootdisk up`` on a fresh data dir (the checkout's manifests), torn down after."""
    data = workdir / "cluster"
    data.mkdir()
    log = open(data / "up.log", "ab")  # noqa: SIM115 (the child keeps it)
    proc = subprocess.Popen([sys.executable, "-m", "rootdisk", "up", "--data-dir", str(data)],
                            stdout=log, stderr=log, stdin=subprocess.DEVNULL, cwd=REPO,
                            start_new_session=True)
    log.close()
    kube = None
    try:
        kubeconfig = data / "kubeconfig"
        wait("the cluster's kubeconfig", lambda: kubeconfig.exists() or proc.poll() is not None,
             timeout=timeout)
        if proc.poll() is not None:
            raise RuntimeError(f"rootdisk up exited {proc.returncode}; see {data}/up.log")
        kube = Client(load_configuration(str(kubeconfig)))
        wait("the operators (CDI, virt-controller, virt-api, virt-handler)",
             lambda: _quiet(lambda: components_ready(kube)), timeout=timeout, every=1)
        yield kube, str(kubeconfig)
    finally:
        if kube is not None:
            kube.api.close()
        subprocess.run([sys.executable, "-m", "rootdisk", "down", "--data-dir", str(data)],
                       cwd=REPO, check=False, timeout=300, stdout=subprocess.DEVNULL)
        try:
            proc.wait(120)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, 9)
            proc.wait(30)


def _quiet(fn: Callable[[], Any]) -> Any:
    try:
        return fn()
    except (KubeError, OSError) as err:
        return f"error: {err}"


def set_driver(kube: Client, driver: str) -> None:
    for kv in kube.list(KUBEVIRTS, "kubevirt"):
        kube.patch(KUBEVIRTS, kv["metadata"]["name"],
                   {"spec": {"configuration": {"launcherDriver": driver}}}, "kubevirt")


def datavolume(kube: Client, name: str, url: str, *, size: str, timeout: float) -> None:
    dv = {"apiVersion": "cdi.kubevirt.io/v1beta1", "kind": "DataVolume",
          "metadata": {"name": name},
          "spec": {"source": {"http": {"url": url}},
                   "storage": {"storageClassName": "local-immediate",
                               "resources": {"requests": {"storage": size}}}}}
    for attempt in range(30):  # the webhook may need a moment after the operator is Ready
        try:
            kube.create(DATAVOLUMES, dv, NS)
            break
        except KubeError as err:
            if err.status not in (500, 503) or attempt == 29:
                raise
            time.sleep(2)
    phase = wait(f"DataVolume {name} Succeeded", lambda: (
        p := ((kube.get_or_none(DATAVOLUMES, name, NS) or {})
                 .get("status") or {}).get("phase")) in ("Succeeded", "Failed") and p,
                 timeout=timeout, every=0.5)
    if phase != "Succeeded":
        raise RuntimeError(f"DataVolume {name} failed: {kube.get_or_none(DATAVOLUMES, name, NS)}")


def vm_manifest(name: str, dv: str, memory: int) -> dict[str, Any]:
    return {"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachine",
            "metadata": {"name": name},
            "spec": {"runStrategy": "Once",
                     "template": {"spec": {
                         "terminationGracePeriodSeconds": 5,
                         "domain": {"resources": {"requests": {"memory": f"{memory // MIB}Mi"}},
                                    "devices": {"disks": [{"name": "root", "bootOrder": 1,
                                                           "disk": {"bus": "virtio"}}]}},
                         "volumes": [{"name": "root", "dataVolume": {"name": dv}}]}}}}


def _launcher_pod(kube: Client, vmi_uid: str) -> dict[str, Any] | None:
    pods = kube.list(PODS, NS, labelSelector=f"kubevirt.io/created-by={vmi_uid}")
    pods = [p for p in pods if not (p["metadata"].get("annotations") or {}).get(
        "kubevirt.io/ephemeral-provisioning")]
    return pods[0] if pods else None


def _console_log(kube: Client, pod: str) -> bytes:
    try:
        resp = kube.api.call_api(
            f"/api/v1/namespaces/{NS}/pods/{quote(pod)}/log", "GET",
            query_params=[("container", "guest-console-log")], auth_settings=["BearerToken"],
            _preload_content=False, _request_timeout=30)
    except Exception:  # not started yet: the API answers 400
        return b""
    data = resp[0].data if isinstance(resp, tuple) else resp.data
    return bytes(data or b"")


def boot_vm(kube: Client, name: str, dv: str, memory: int, *,
            timeout: float) -> tuple[float, PodMemorySampler, dict[str, Any]]:
    """Seconds from the VM's create to the marker in its console log; the pod's memory."""
    state: dict[str, Any] = {}

    def pod_uid() -> str | None:
        return state.get("pod_uid")
    with PodMemorySampler(pod_uid) as sampler:
        start = time.monotonic()
        kube.create(VMS, vm_manifest(name, dv, memory), NS)
        deadline = start + timeout
        seen = None
        while time.monotonic() < deadline and seen is None:
            if "vmi" not in state:
                vmi = kube.get_or_none(VMIS, name, NS)
                if vmi:
                    state["vmi"] = vmi
            if "vmi" in state and "pod" not in state:
                pod = _launcher_pod(kube, state["vmi"]["metadata"]["uid"])
                if pod:
                    state["pod"] = pod["metadata"]["name"]
                    state["pod_uid"] = pod["metadata"]["uid"]
            if "pod" in state and MARKER.encode() in _console_log(kube, state["pod"]):
                seen = time.monotonic()
                break
            status = ((kube.get_or_none(VMIS, name, NS) or {}).get("status") or {})
            if status.get("phase") in ("Failed", "Succeeded"):
                # a guest that powers off at once may end before the log sidecar has
                # copied its marker: the sidecar outlives the guest, give it a moment
                ended = status
                ended_at = state.setdefault("ended_at", time.monotonic())
                if time.monotonic() - ended_at > 15:
                    raise TimeoutError(f"VMI {name} ended {ended.get('phase')} "
                                       f"({ended.get('reason')}: {ended.get('message')}) "
                                       "without its marker in the console log")
            time.sleep(0.05)
        if seen is None:
            raise TimeoutError(f"no marker from VM {name} within {timeout:g} s "
                               f"(VMI {((kube.get_or_none(VMIS, name, NS) or {}).get('status'))})")
        # the guest powers itself off: sample until the pod's processes are gone
        with contextlib.suppress(TimeoutError):
            wait("the VMI to finish", lambda: ((kube.get_or_none(VMIS, name, NS) or {}).get(
                "status") or {}).get("phase") in ("Succeeded", "Failed", None),
                timeout=timeout, every=0.2)
    return seen - start, sampler, state["vmi"]


def delete_vm(kube: Client, name: str, *, timeout: float) -> None:
    kube.delete(VMS, name, NS)
    wait(f"VM {name}, its VMI and launcher pod to go", lambda:
         kube.get_or_none(VMS, name, NS) is None
         and kube.get_or_none(VMIS, name, NS) is None and not [
             p for p in kube.list(PODS, NS, labelSelector="kubevirt.io=virt-launcher")],
         timeout=timeout, every=0.5)


def upstream_for(vmi: dict[str, Any]) -> int:
    return memory_overhead(vmi.get("spec") or {})


def prepare(kube: Client, disks: dict[str, Path], *, timeout: float) -> dict[str, str]:
    """One Succeeded DataVolume per guest disk (served over loopback HTTP for the import)."""
    names = {}
    with tempfile.TemporaryDirectory(prefix="vb-www-", dir="/tmp") as www:
        for guest, disk in disks.items():
            subprocess.run(["cp", "--sparse=always", str(disk), f"{www}/{guest}.img"],
                           check=True)
        with serve(Path(www)) as base:
            for guest, disk in disks.items():
                size = max(64 * MIB, disk.stat().st_size)
                size_mi = -(-size // MIB) + 16
                name = f"bench-{guest}"
                datavolume(kube, name, f"{base}/{guest}.img", size=f"{size_mi}Mi",
                           timeout=timeout)
                names[guest] = name
    return names
