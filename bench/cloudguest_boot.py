"""Benchmark: the Debian cloud guest (rootdisk.cloudguest) from QEMU's start to an SSH
login as the user its NoCloud seed made, under TCG, and what dominates the boot.

Why it exists: the demo's promise is a VM people can use (create -> SSH) in about a
minute and a half on this machine; this is the guest's share of it, without the cluster.

    python bench/cloudguest_boot.py [--runs 3] [--bus virtio|sata] [--cpu max]

Each run boots a fresh overlay on the cached image with a new seed (a new instance, so
cloud-init does its first-boot work every time) and prints the seconds to the first
successful ``ssh user@127.0.0.1 true``, then to ``cloud-init status --wait`` done; the
median and minimum at the end, and the last run's ``systemd-analyze`` and blame.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

from _common import REPO

from rootdisk.cloudguest import build_cloud_guest
from tests.fixtures.cloudvm import CloudVM, keypair, seed_iso, user_data

USER = "bench"


def one_boot(image: Path, bus: str, cpu: str, n: int) -> tuple[float, float, str]:
    with tempfile.TemporaryDirectory(prefix="cloudguest-bench-", dir=REPO / ".state") as tmp:
        work = Path(tmp)
        key, public = keypair(work)
        seed = seed_iso(
            work,
            user_data(USER, public, runcmd_file="/var/tmp/bench", runcmd_text="ok"),
            instance_id=f"bench-{time.time_ns()}-{n}",
            hostname=f"bench{n}",
        )
        vm = CloudVM(image, seed, work, disk_bus=bus, cpu=cpu)
        vm.start()
        try:
            to_ssh = vm.wait_ssh(key, USER, timeout=600)
            done = vm.ssh(key, USER, "cloud-init status --wait", timeout=600)
            to_done = time.monotonic() - vm.started
            if "status: done" not in done.stdout:
                raise RuntimeError(f"cloud-init did not finish: {done.stdout} {done.stderr}")
            blame = vm.ssh(
                key, USER, "systemd-analyze; systemd-analyze blame | head -10", timeout=120
            ).stdout
        finally:
            vm.close()
    return to_ssh, to_done, blame


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--bus", choices=("virtio", "sata"), default="virtio")
    parser.add_argument("--cpu", default="max", help="QEMU's -cpu model (TCG)")
    args = parser.parse_args()
    started = time.monotonic()
    image = build_cloud_guest()
    print(f"image {image} (ready in {time.monotonic() - started:.1f}s)")
    ssh_times, done_times, blame = [], [], ""
    for n in range(args.runs):
        to_ssh, to_done, blame = one_boot(image, args.bus, args.cpu, n)
        ssh_times.append(to_ssh)
        done_times.append(to_done)
        print(f"run {n + 1}: SSH login {to_ssh:.1f}s, cloud-init done {to_done:.1f}s")
    print(
        f"{args.bus}, -cpu {args.cpu}, TCG: SSH login median {statistics.median(ssh_times):.1f}s "
        f"(min {min(ssh_times):.1f}s); cloud-init done median "
        f"{statistics.median(done_times):.1f}s (min {min(done_times):.1f}s)"
    )
    print("last run:\n" + blame)
    return 0


if __name__ == "__main__":
    sys.exit(main())
