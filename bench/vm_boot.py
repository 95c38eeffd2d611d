"""Benchmark: time from starting the launcher to the guest's marker on its console, against
a hand-written ``qemu-system-x86_64`` command booting the same disk, in the same run.

Why it exists: the launcher stands between the pod and QEMU; its cost is what it adds to
a boot (Python start, domain build, QMP or libvirtd) and the memory it keeps. This prints
both, as ratios, with the memory beside upstream's overhead formula.

    python bench/vm_boot.py [--runs 5] [--guests bootsector,linux] [--drivers qemu,libvirt]
                            [--only standalone|cluster]

Cases, interleaved run by run (A B C, A B C…) so machine noise hits all alike:
- ``qemu by hand``: ``qemu-system-x86_64 -machine q35,accel=tcg -nodefaults -drive …
  -device virtio-blk-pci … -serial file:LOG``, timed from exec to the marker in LOG;
- ``launcher/<driver>``: ``python -m vm.launcher`` as the kubelet runs it (bubblewrap,
  uid 107 via setpriv, no capabilities, no_new_privs), timed from exec to the marker in
  the launcher's console log. The guest powers itself off after the marker, so every run
  ends on its own; each is bounded by ``--timeout``.
Memory: peak of the summed RSS over each process tree (bench/_common.py's sampler),
with the peak per process name; upstream's launcher overhead for the same VMI (fixed
240 MiB + 8 MiB per vCPU + 32 MiB video + guest/512, kubevirt's GetMemoryOverhead) is
printed beside it. Then the same on ``rootdisk up`` (bench/vm_boot_cluster.py): VM created
→ marker, with the hand-run QEMU again interleaved. TCG only (the KVM here is kvm_pvm,
which cannot run Linux). The ratio of the fastest runs (min÷min) is printed too: on a
shared machine it is the steadier one.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from _common import REPO, TreeMemorySampler, human

from tests.fixtures.guests import MARKER, GuestBuilder, write_boot_sector_disk
from tests.vm.launcher.sandbox import UID, Pod

MIB = 1024 * 1024
GUEST_MEMORY = {"bootsector": 64 * MIB, "linux": 256 * MIB}


def upstream_overhead(*, guest: int, vcpus: int = 1) -> int:
    """kubevirt's GetMemoryOverhead for a plain VMI: guest/512 + 240Mi + 8Mi per vCPU +
    32Mi for the video device (no IOThreads, VFIO, SEV, TPM or dedicated CPUs)."""
    return guest // 512 + 240 * MIB + 8 * MIB * vcpus + 32 * MIB


@dataclass
class Result:
    label: str
    times: list[float] = field(default_factory=list)
    peak_rss: list[int] = field(default_factory=list)
    by_name: dict[str, int] = field(default_factory=dict)
    failures: list[str] = field(default_factory=list)

    @property
    def median(self) -> float | None:
        return statistics.median(self.times) if self.times else None


def _wait_marker(log: Path, proc: subprocess.Popen[bytes], timeout: float) -> float | None:
    start = time.monotonic()
    while time.monotonic() - start < timeout:
        with contextlib.suppress(OSError):
            if MARKER.encode() in log.read_bytes():
                return time.monotonic()
        if proc.poll() is not None and not (log.exists() and MARKER.encode() in log.read_bytes()):
            return None
        time.sleep(0.002)
    return None


def _finish(proc: subprocess.Popen[bytes], timeout: float) -> None:
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(30)


def _measure(result: Result, argv: list[str], log: Path, env: dict[str, str] | None,
             timeout: float) -> None:
    start = time.monotonic()
    proc = subprocess.Popen(argv, env=env, cwd=REPO, stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    with TreeMemorySampler(proc.pid) as sampler:
        seen = _wait_marker(log, proc, timeout)
        _finish(proc, timeout)  # the guest powers off: memory is sampled to the end
    if seen is None:
        result.failures.append(f"no marker within {timeout:g} s (exit {proc.returncode})")
        return
    result.times.append(seen - start)
    result.peak_rss.append(sampler.peak_rss)
    for name, rss in sampler.peak_by_name.items():
        result.by_name[name] = max(result.by_name.get(name, 0), rss)


def run_hand(result: Result, disk: Path, work: Path, memory: int, timeout: float) -> None:
    log = work / "hand.log"
    log.unlink(missing_ok=True)
    argv = ["qemu-system-x86_64", "-machine", "q35,accel=tcg", "-m", f"{memory // MIB}",
            "-nodefaults", "-no-user-config", "-display", "none",
            "-drive", f"file={disk},format=raw,if=none,id=d0",
            "-device", "virtio-blk-pci,drive=d0", "-serial", f"file:{log}"]
    _measure(result, argv, log, None, timeout)


def run_launcher(result: Result, driver: str, disk: Path, memory: int, timeout: float) -> None:
    base = Path(tempfile.mkdtemp(prefix="vb-", dir="/tmp"))
    try:
        pod = Pod(base)
        private = pod.empty_dir("priv", "/var/run/kubevirt-private")
        pod.empty_dir("sock", "/var/run/kubevirt/sockets")
        pod.file("term", "/dev/termination-log")
        vol = private / "vmi-disks" / "root"
        vol.mkdir(parents=True)
        subprocess.run(["cp", "--sparse=always", str(disk), str(vol / "disk.img")], check=True)
        for p in (private / "vmi-disks", vol, vol / "disk.img"):
            os.chown(p, UID, UID)
        vmi = {"metadata": {"name": "bench", "namespace": "default",
                            "uid": "00000000-0000-4000-8000-00000000b007"},
               "spec": {"domain": {"resources": {"requests": {"memory": str(memory)}},
                                   "devices": {"disks": [{"name": "root",
                                                          "disk": {"bus": "virtio"}}]}},
                        "volumes": [{"name": "root",
                                     "persistentVolumeClaim": {"claimName": "root"}}]}}
        env = {"VMI": json.dumps(vmi), "LAUNCHER_DRIVER": driver,
               "PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "LAUNCHER_LOG_LEVEL": "WARNING"}
        argv = pod.argv([sys.executable, "-m", "vm.launcher"], env=env)
        _measure(result, argv, private / "console.log", None, timeout)
    finally:
        shutil.rmtree(base, ignore_errors=True)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--guests", default="bootsector,linux")
    p.add_argument("--drivers", default="qemu,libvirt")
    p.add_argument("--timeout", type=float, default=120.0)
    p.add_argument("--only", choices=("standalone", "cluster", "cloud"),
                   help="only the standalone launcher, or only the cluster (default: both); "
                   "cloud: only the Debian cloud guest, create → SSH on the cluster against "
                   "QEMU by hand with the same seed (bench/vm_boot_cloud.py)")
    p.add_argument("--cluster-timeout", type=float, default=900.0,
                   help="bound of the cluster's start and of each import (s)")
    args = p.parse_args()
    if os.geteuid() != 0 or not shutil.which("bwrap"):
        print("needs root and bubblewrap (the launcher runs as the kubelet would run it)")
        return 1
    work = Path(tempfile.mkdtemp(prefix="vm-boot-bench-", dir="/tmp"))
    if args.only == "cloud":
        import vm_boot_cloud
        try:
            vm_boot_cloud.run(runs=args.runs, timeout=args.timeout * 5,
                              cluster_timeout=args.cluster_timeout, work=work)
        finally:
            shutil.rmtree(work, ignore_errors=True)
        return 0
    try:
        disks = {}
        for guest in args.guests.split(","):
            if guest == "bootsector":
                disks[guest] = write_boot_sector_disk(work / "bootsector.img", poweroff=True)
            elif guest == "linux":
                disks[guest] = GuestBuilder().linux(mode="poweroff").raw
            else:
                raise SystemExit(f"--guests: unknown guest {guest!r}")
        drivers = args.drivers.split(",")
        if args.only != "cluster":
            standalone(args, disks, drivers, work)
        if args.only != "standalone":
            on_cluster(args, disks, drivers, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


def standalone(args: argparse.Namespace, disks: dict[str, Path], drivers: list[str],
               work: Path) -> None:
    for guest, disk in disks.items():
        memory = GUEST_MEMORY[guest]
        hand = Result("qemu by hand")
        launchers = {d: Result(f"launcher/{d}") for d in drivers}
        print(f"\n== {guest} guest ({human(memory)} RAM, TCG), {args.runs} runs", flush=True)
        for i in range(args.runs):
            run_hand(hand, disk, work, memory, args.timeout)
            for driver, result in launchers.items():
                run_launcher(result, driver, disk, memory, args.timeout)
            line = "  ".join(f"{r.label} {r.times[-1]:.2f}s" if len(r.times) == i + 1
                             else f"{r.label} FAILED" for r in (hand, *launchers.values()))
            print(f"  run {i + 1}: {line}", flush=True)
        report(guest, hand, list(launchers.values()), memory)


def on_cluster(args: argparse.Namespace, disks: dict[str, Path], drivers: list[str],
               work: Path) -> None:
    import vm_boot_cluster as vc
    print("\n== on rootdisk up: VM created → marker (DataVolume already Succeeded)",
          flush=True)
    with vc.cluster(work, timeout=args.cluster_timeout) as (kube, _):
        dvs = vc.prepare(kube, disks, timeout=args.cluster_timeout)
        for guest, disk in disks.items():
            memory = GUEST_MEMORY[guest]
            hand = Result("qemu by hand")
            vms = {d: Result(f"cluster/{d}") for d in drivers}
            formula = 0
            print(f"\n== {guest} guest on the cluster, {args.runs} runs", flush=True)
            for i in range(args.runs):
                before = {id(r): len(r.times) for r in (hand, *vms.values())}
                run_hand(hand, disk, work, memory, args.timeout)
                for driver, result in vms.items():
                    vc.set_driver(kube, driver)
                    name = f"vb-{guest}-{driver}-{i}"
                    try:
                        took, sampler, vmi = vc.boot_vm(kube, name, dvs[guest], memory,
                                                        timeout=args.timeout * 3)
                    except TimeoutError as err:
                        result.failures.append(str(err))
                        print(f"  {result.label}: {err}", flush=True)
                    else:
                        result.times.append(took)
                        result.peak_rss.append(sampler.peak_rss)
                        for n, rss in sampler.peak_by_name.items():
                            result.by_name[n] = max(result.by_name.get(n, 0), rss)
                        formula = vc.upstream_for(vmi)
                    finally:
                        vc.delete_vm(kube, name, timeout=args.cluster_timeout)
                line = "  ".join(f"{r.label} {r.times[-1]:.2f}s"
                                 if len(r.times) > before[id(r)] else f"{r.label} FAILED"
                                 for r in (hand, *vms.values()))
                print(f"  run {i + 1}: {line}", flush=True)
            report(guest, hand, list(vms.values()), memory, formula=formula or None)


def report(guest: str, hand: Result, launchers: list[Result], memory: int, *,
           formula: int | None = None) -> None:
    print(f"\n  {'case':<18} {'median':>8} {'min':>7} {'max':>7} {'ratio':>6} {'min÷min':>7}"
          "  peak tree RSS")
    for r in (hand, *launchers):
        if r.median is None:
            print(f"  {r.label:<18} FAILED: {r.failures[-1] if r.failures else '?'}")
            continue
        ratio = f"{r.median / hand.median:5.2f}" if hand.median else "  -  "
        low = f"{min(r.times) / min(hand.times):5.2f}" if hand.times else "  -  "
        print(f"  {r.label:<18} {r.median:7.3f}s {min(r.times):6.3f}s {max(r.times):6.3f}s "
              f"{ratio:>6} {low:>7}  {human(max(r.peak_rss))}")
        parts = ", ".join(f"{n} {human(v)}" for n, v in sorted(r.by_name.items(),
                                                                key=lambda kv: -kv[1]))
        print(f"  {'':<18} by process: {parts}")
    formula = formula or upstream_overhead(guest=memory)
    print(f"  upstream's launcher pod overhead for this VMI: {human(formula)} "
          f"(pod request {human(memory + formula)})")
    qemu_hand = hand.by_name.get("qemu-system-x86", 0)
    for r in launchers:
        if r.peak_rss and qemu_hand:
            extra = max(r.peak_rss) - qemu_hand
            print(f"  {r.label}: beyond a hand-run QEMU's {human(qemu_hand)}, the pod used "
                  f"{human(extra)} (upstream budgets {human(formula)})")


if __name__ == "__main__":
    sys.exit(main())
