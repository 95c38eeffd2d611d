"""Benchmark: a DataVolume on `rootdisk up` against `rootdisk import` of the same image.

Why it exists: the control plane (operator, populator, importer pod, rebind) must cost
little next to the import itself. Printed, measured side by side in one run:

- time from creating a DataVolume (1 GiB qcow2, half data, over the throttled link) to
  Succeeded, divided by `rootdisk import` of the same URL into a file: goal <= 1.2;
- the fixed cost of a blank 1 GiB DataVolume, creation to Succeeded: goal <= 2 s;
- 50 small DataVolumes (16 MiB qcow2 over HTTP) created at once: all Succeeded, and the
  throughput.

    python bench/datavolume.py [--size 1G] [--runs 3] [--rate 125000000] [--many 50]

Needs root (localcluster's loop devices and mounts), like `rootdisk up`.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from _common import DEFAULT_WORKDIR, human, parse_size, prepare_images, rootdisk_argv, serve_dir

from kubeclient import Client
from localcluster.cluster import Cluster, Options
from rootdisk.images import IMAGES
from tests.e2e import kit
from tests.fixtures.images import ImageFactory


def time_dv(kube: Client, ns: str, name: str, source: dict, size: str,
            timeout: float = 1800) -> float:
    body = kit.datavolume(name, source, size=size,
                          storage={"storageClassName": "local-immediate"})
    start = time.monotonic()
    kube.create(kit.DVS, body, ns)
    while True:
        phase = kit.dv_status(kube, ns, name).get("phase")
        if phase == "Succeeded":
            elapsed = time.monotonic() - start
            break
        if phase == "Failed" or time.monotonic() - start > timeout:
            raise RuntimeError(f"DataVolume {name}: {kit.dv_status(kube, ns, name)}")
        time.sleep(0.05)
    delete_dv(kube, ns, name)
    return elapsed


def delete_dv(kube: Client, ns: str, name: str) -> None:
    kube.delete(kit.DVS, name, ns)
    deadline = time.monotonic() + 300
    while kit.leftovers(kube, ns) and time.monotonic() < deadline:
        time.sleep(0.2)


def time_import(url: str, dest: Path, size: str) -> float:
    dest.unlink(missing_ok=True)
    start = time.monotonic()
    subprocess.run([*rootdisk_argv(), "import", url, str(dest), "--size", size,
                    "--filesystem-overhead", "0"], check=True,
                   stdout=subprocess.DEVNULL, timeout=1800)
    elapsed = time.monotonic() - start
    dest.unlink(missing_ok=True)
    return elapsed


def runs(times: list[float]) -> str:
    return ", ".join(f"{t:.2f}" for t in times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", default="1G", help="virtual size of the image (default 1G)")
    parser.add_argument("--runs", type=int, default=3, help="runs per case (median)")
    parser.add_argument("--rate", type=int, default=125_000_000,
                        help="throttled link, bytes/s (1 Gbit/s)")
    parser.add_argument("--many", type=int, default=50, help="small DataVolumes at once")
    parser.add_argument("--workdir", type=Path, default=DEFAULT_WORKDIR)
    args = parser.parse_args()
    size = parse_size(args.size)
    images = prepare_images(args.workdir, size)
    claim_size = f"{size // 2**20}Mi"
    small = ImageFactory(args.workdir / "small").get("qcow2")
    with tempfile.TemporaryDirectory(prefix="dv-bench-", dir=args.workdir) as data, \
            serve_dir(args.workdir, rates={images.qcow2.name: args.rate}) as server:
        (Path(data) / "out").mkdir()
        cluster = Cluster(str(Path(data) / "cluster"),
                          Options(images=IMAGES, manifests=kit.MANIFESTS))
        cluster.start()
        try:
            kube = kit.cluster_kube(cluster)
            kit.wait_operator_ready(kube)
            ns = kit.namespace(kube, "bench")
            url = server.url_for(images.qcow2.name)
            dv_times, cli_times = [], []
            for i in range(args.runs):  # interleaved, so drift hits both alike
                cli_times.append(time_import(url, Path(data) / "out" / "disk.img", claim_size))
                dv_times.append(time_dv(kube, ns, f"big-{i}", {"http": {"url": url}},
                                        claim_size))
            dv_med, cli_med = statistics.median(dv_times), statistics.median(cli_times)
            print(f"1 GiB-class qcow2 ({human(images.qcow2.stat().st_size)}) over "
                  f"{args.rate * 8 / 1e9:.2f} Gbit/s, median of {args.runs}:")
            print(f"  rootdisk import     {cli_med:7.2f} s   (runs {runs(cli_times)})")
            print(f"  DataVolume          {dv_med:7.2f} s   (runs {runs(dv_times)})")
            print(f"  ratio DV/import     {dv_med / cli_med:7.2f}   (goal <= 1.2)")
            blanks = [time_dv(kube, ns, f"blank-{i}", {"blank": {}}, claim_size)
                      for i in range(max(args.runs, 5))]
            print(f"blank {claim_size} DataVolume, median of {len(blanks)}: "
                  f"{statistics.median(blanks):.2f} s   (goal <= 2 s; runs {runs(blanks)})")
            with serve_dir(small.path.parent) as small_server:
                surl = small_server.url_for(small.path.name)
                start = time.monotonic()
                names = [f"small-{i}" for i in range(args.many)]
                for name in names:
                    kube.create(kit.DVS, kit.datavolume(
                        name, {"http": {"url": surl}}, size="32Mi",
                        storage={"storageClassName": "local-immediate"}), ns)
                pending = set(names)
                failed = []
                while pending and time.monotonic() - start < 1800:
                    for name in list(pending):
                        phase = kit.dv_status(kube, ns, name).get("phase")
                        if phase in ("Succeeded", "Failed"):
                            pending.discard(name)
                            if phase == "Failed":
                                failed.append(name)
                    time.sleep(0.2)
                took = time.monotonic() - start
            ok = args.many - len(failed) - len(pending)
            print(f"{args.many} small DataVolumes (16 MiB qcow2) at once: {ok} Succeeded, "
                  f"{len(failed)} Failed, {len(pending)} unfinished in {took:.1f} s "
                  f"({ok / took:.2f} DataVolumes/s)")
        finally:
            cluster.stop()


if __name__ == "__main__":
    main()
