"""The cloud-guest half of bench/vm_boot.py: on ``rootdisk up``, a VirtualMachine booting
the Debian cloud guest (rootdisk.cloudguest) with a cloud-init NoCloud volume, timed from
its create to the first SSH login as the user its user-data makes; against the same
qcow2 booted by hand with ``qemu-system-x86_64`` and the very seed ISO the launcher
built (copied out of the launcher pod on the first run), SSH-polled the same way.

Why it exists: what a user waits for with a real cloud image is create → SSH, and the
launcher, the pod and the cluster must add little to the guest's own boot (goal: the
median ratio ≤ 1.3 with the default driver); the launcher pod's memory beyond QEMU's
should stay under 64 MiB (upstream budgets 288 MiB for such a VMI).

Both boots: TCG, 2 vCPUs, 1 GiB, QEMU's default CPU model (the launcher's under TCG),
the root disk and the seed on virtio-blk, user-mode networking with port 22 forwarded
(the launcher: at the pod IP's 30022, as a launcher takes ports below the unprivileged
start; by hand: at 127.0.0.1:<free port>). SSH polling, both: every second, once the
port sends sshd's banner, ``ssh user@host true`` until it succeeds (bounded). The
DataVolume is imported once before the runs, so the import is not timed; runs
alternate (cluster, hand).
"""

from __future__ import annotations

import json
import shutil
import socket
import statistics
import subprocess
import time
from pathlib import Path
from typing import Any

from _common import human
from vm_boot_cluster import PodMemorySampler, _launcher_pod, cluster, datavolume, wait

from kubeclient import Client
from kubeclient.resources import PODS, VMIS, VMS
from rootdisk.cloudguest import build_cloud_guest
from rootdisk.demo import serve
from tests.fixtures.cloudvm import SSH_OPTIONS, CloudVM, keypair, user_data
from vm import nodeports
from vm.domain.podnet import node_port

NS = "default"
USER = "bench"
MEMORY_MIB = 1024
QEMU = "qemu-system-x86"


def _vm(name: str, dv: str, userdata: str) -> dict[str, Any]:
    return {"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachine",
            "metadata": {"name": name},
            "spec": {"runStrategy": "Always", "template": {"spec": {
                "terminationGracePeriodSeconds": 5,
                "domain": {"cpu": {"cores": 2},
                           "resources": {"requests": {"memory": f"{MEMORY_MIB}Mi"}},
                           "devices": {
                               "disks": [{"name": "root", "bootOrder": 1,
                                          "disk": {"bus": "virtio"}},
                                         {"name": "ci", "disk": {"bus": "virtio"}}],
                               "interfaces": [{"name": "default", "masquerade": {},
                                               "ports": [{"name": "ssh", "port": 22}]}]}},
                "networks": [{"name": "default", "pod": {}}],
                "volumes": [{"name": "root", "persistentVolumeClaim": {"claimName": dv}},
                            {"name": "ci", "cloudInitNoCloud": {"userData": userdata}}]}}}}


def _banner(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=3) as s:
            s.settimeout(3)
            return s.recv(4).startswith(b"SSH-")
    except OSError:
        return False


def wait_ssh(host: str, port: int, key: Path, *, start: float, timeout: float) -> float:
    """As CloudVM.wait_ssh: seconds from ``start`` to the first ``ssh true`` that works."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if _banner(host, port):
            try:
                done = subprocess.run(["ssh", *SSH_OPTIONS, "-i", str(key), "-p", str(port),
                                       f"{USER}@{host}", "true"], capture_output=True,
                                      timeout=30, stdin=subprocess.DEVNULL)
            except subprocess.TimeoutExpired:
                pass
            else:
                if done.returncode == 0:
                    return time.monotonic() - start
        time.sleep(1)
    raise TimeoutError(f"no SSH login at {host}:{port} within {timeout:.0f} s")


def _qemu_root(name: str) -> Path | None:
    """The VM's QEMU's view of the filesystem (/proc/<pid>/root): the launcher pod's."""
    needle = f"guest={NS}_{name}".encode()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if argv and Path(argv[0].decode(errors="replace")).name.startswith(QEMU) and any(
                needle in a for a in argv):
            return entry / "root"
    return None


def boot_on_cluster(kube: Client, name: str, dv: str, userdata: str, key: Path, work: Path,
                    *, timeout: float) -> tuple[float, PodMemorySampler]:
    state: dict[str, str] = {}
    with PodMemorySampler(lambda: state.get("pod_uid")) as sampler:
        start = time.monotonic()
        kube.create(VMS, _vm(name, dv, userdata), NS)

        def pod_ip() -> str:
            vmi = kube.get_or_none(VMIS, name, NS)
            if vmi and "pod_uid" not in state:
                pod = _launcher_pod(kube, vmi["metadata"]["uid"])
                if pod:
                    state["pod_uid"] = pod["metadata"]["uid"]
            if "pod_uid" in state:
                for p in kube.list(PODS, NS, labelSelector="kubevirt.io=virt-launcher"):
                    if p["metadata"]["uid"] == state["pod_uid"]:
                        return str((p.get("status") or {}).get("podIP") or "")
            return ""
        ip = wait("the launcher pod's IP", pod_ip, timeout=timeout)
        port = node_port(22, nodeports.unprivileged_port_start())
        took = wait_ssh(ip, port, key, start=start, timeout=timeout)
        seed = work / "seed.iso"
        if not seed.exists():  # the launcher's own ISO, for the hand-run boots
            root = _qemu_root(name)
            if root is None:
                raise RuntimeError("cannot find the launcher's QEMU to copy its seed ISO")
            iso = (f"/var/run/kubevirt-ephemeral-disks/cloud-init-data/{NS}/{name}/"
                   "noCloud.iso")
            shutil.copyfile(f"{root}{iso}", seed)
    return took, sampler


def delete(kube: Client, name: str, *, timeout: float) -> None:
    kube.delete(VMS, name, NS)
    wait(f"VM {name} and its launcher pod to go", lambda: kube.get_or_none(VMS, name, NS) is None
         and kube.get_or_none(VMIS, name, NS) is None and not kube.list(
             PODS, NS, labelSelector="kubevirt.io=virt-launcher"), timeout=timeout, every=0.5)


def boot_by_hand(image: Path, seed: Path, key: Path, work: Path, *, timeout: float) -> float:
    run = work / f"hand-{time.monotonic_ns()}"
    run.mkdir()
    vm = CloudVM(image, seed, run, disk_bus="virtio", seed_bus="virtio",
                 memory_mib=MEMORY_MIB, cpu="qemu64")
    vm.start()
    try:
        return vm.wait_ssh(key, USER, timeout=timeout)
    finally:
        vm.close()
        shutil.rmtree(run, ignore_errors=True)


def _virtual_size(image: Path) -> int:
    info = json.loads(subprocess.run(["qemu-img", "info", "--output=json", str(image)],
                                     capture_output=True, check=True, timeout=60).stdout)
    return int(info["virtual-size"])


def run(*, runs: int, timeout: float, cluster_timeout: float, work: Path) -> None:
    image = Path(build_cloud_guest())
    key, public = keypair(work)
    userdata = user_data(USER, public, runcmd_file="/var/tmp/bench", runcmd_text="ok")
    print(f"\n== Debian cloud guest: create → SSH login ({runs} runs, TCG, 2 vCPU, "
          f"{MEMORY_MIB} MiB), cluster vs QEMU by hand with the launcher's seed ISO",
          flush=True)
    cluster_times: list[float] = []
    hand_times: list[float] = []
    extra: list[int] = []
    qemu_rss: list[int] = []
    with cluster(work, timeout=cluster_timeout) as (kube, _):
        www = work / "www"
        www.mkdir()
        shutil.copyfile(image, www / "cloud.qcow2")
        size_mi = -(-_virtual_size(image) // (1024 * 1024)) + 64
        with serve(www) as base:
            datavolume(kube, "bench-cloud", f"{base}/cloud.qcow2", size=f"{size_mi}Mi",
                       timeout=cluster_timeout)
        for i in range(runs):
            name = f"vb-cloud-{i}"
            try:
                took, sampler = boot_on_cluster(kube, name, "bench-cloud", userdata, key,
                                                work, timeout=timeout)
            finally:
                delete(kube, name, timeout=cluster_timeout)
            cluster_times.append(took)
            q = sampler.peak_by_name.get(QEMU, 0)
            qemu_rss.append(q)
            extra.append(sum(v for n, v in sampler.peak_by_name.items() if n != QEMU))
            hand_times.append(boot_by_hand(image, work / "seed.iso", key, work,
                                           timeout=timeout))
            print(f"  run {i + 1}: cluster {took:.1f}s  by hand {hand_times[-1]:.1f}s  "
                  f"pod beyond QEMU {human(extra[-1])} (QEMU {human(q)})", flush=True)
    c, h = statistics.median(cluster_times), statistics.median(hand_times)
    print(f"\n  create → SSH login: cluster median {c:.1f}s (min {min(cluster_times):.1f}s), "
          f"by hand median {h:.1f}s (min {min(hand_times):.1f}s); ratio {c / h:.2f} "
          f"(min÷min {min(cluster_times) / min(hand_times):.2f})")
    print(f"  launcher pod beyond QEMU (sum of each other process's peak RSS): median "
          f"{human(int(statistics.median(extra)))}, max {human(max(extra))}; QEMU's peak "
          f"{human(max(qemu_rss))}")


if __name__ == "__main__":
    raise SystemExit("run it through bench/vm_boot.py --only cloud")
