"""Benchmark: cloning a golden image on `rootdisk up`.

Why it exists: a clone of a golden disk should cost what the storage makes it cost.
Printed, measured in one run:

- ``csi-clone`` on ``local-reflink``, DataVolume created → Succeeded, for a 4 GiB and a
  16 GiB sparse golden image holding 1 GiB of data each (goal: under 1 s of storage time,
  the same at both sizes);
- the host-assisted ``copy`` (CDIConfig ``cloneStrategyOverride: copy``), DataVolume
  created → Succeeded, and the copy programs alone on the same files (the source program
  ``importer.cloner`` streaming to the target program ``importer.clonetarget`` over
  mutual TLS on loopback, with a fresh per-clone CA), each divided by
  ``cp --reflink=never --sparse=always`` of the same ``disk.img`` (both write into the
  same host directory; goal <= 1.5), with the allocated bytes of each output beside the
  source's. Durability is part of the work on both sides: the target fsyncs before it
  reports success, and cp is followed by ``sync`` (as is the copy: both timings start
  after a ``sync`` and end after one). The DataVolume is measured twice: with CDIConfig's
  default pod resources (upstream's: a 750m CPU limit on each pod) and with the CPU limit
  lifted to two cores (``spec.podResourceRequirements``), which shows what the cap costs
  a stream whose two sides each need most of a core.

    python bench/clone.py [--sizes 4G,16G] [--data 1G] [--runs 3]

Needs root (localcluster's loop devices and mounts), like `rootdisk up`.
"""

from __future__ import annotations

import argparse
import datetime
import os
import resource
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import DEFAULT_WORKDIR, human, parse_size

from cdi.config import DEFAULT_POD_RESOURCES
from kubeclient import Client, resources
from localcluster.cluster import Cluster, Options
from pki.certs import paired_tls
from rootdisk.images import IMAGES
from tests.e2e import kit

CHUNK = 16 * 2**20
DEFAULT_CPU_LIMIT = DEFAULT_POD_RESOURCES["limits"]["cpu"]
UNCAPPED = {"limits": {"cpu": "2", "memory": DEFAULT_POD_RESOURCES["limits"]["memory"]},
            "requests": dict(DEFAULT_POD_RESOURCES["requests"])}
"""CDIConfig ``spec.podResourceRequirements`` for the uncapped row: upstream's defaults
with the CPU limit at the machine's two cores."""


def wait(kube: Client, ns: str, name: str, since: str, timeout: float = 1800) -> None:
    """Until the DataVolume is Succeeded, through a watch from ``since`` (the resource
    version of its creation): a poll every 20 ms was 50 requests a second to the API
    server, which shares the machine's two cores with the clone it measured."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        left = max(1, int(deadline - time.monotonic()))
        for event in kube.watch(kit.DVS, resource_version=since, namespace=ns,
                                       timeout=min(left, 300),
                                       field_selector=f"metadata.name={name}"):
            obj = event.get("object") or {}
            since = (obj.get("metadata") or {}).get("resourceVersion") or since
            if event.get("type") == "BOOKMARK":
                continue
            phase = (obj.get("status") or {}).get("phase")
            if phase == "Succeeded":
                return
            if phase == "Failed" or event.get("type") == "DELETED":
                raise RuntimeError(f"DataVolume {name}: {obj.get('status')}")
    raise RuntimeError(f"DataVolume {name} not Succeeded in {timeout:.0f} s: "
                       f"{kit.dv_status(kube, ns, name)}")


def golden(kube: Client, ns: str, name: str, size: int, data: int) -> Path:
    """A blank DataVolume on local-reflink, then ``data`` bytes of random data spread
    over its disk.img (written on the host: the bench is root)."""
    made = kube.create(kit.DVS, kit.datavolume(
        name, {"blank": {}}, size=f"{size // 2**20}Mi",
        storage={"storageClassName": "local-reflink"}), ns)
    wait(kube, ns, name, made["metadata"]["resourceVersion"])
    path = Path(kit.volume_path(kube, kube.get(resources.PVCS, name, ns)))
    chunks = data // CHUNK
    stride = (path.stat().st_size - CHUNK) // max(1, chunks - 1)
    block = os.urandom(CHUNK)
    fd = os.open(path, os.O_WRONLY)
    try:
        for i in range(chunks):
            os.pwrite(fd, block, (i * stride) // 4096 * 4096)
        os.fsync(fd)
    finally:
        os.close(fd)
    return path


def clone_dv(kube: Client, ns: str, name: str, source: str) -> float:
    start = time.monotonic()
    made = kube.create(kit.DVS, {
        "apiVersion": "cdi.kubevirt.io/v1beta1", "kind": "DataVolume",
        "metadata": {"name": name},
        "spec": {"source": {"pvc": {"namespace": ns, "name": source}},
                 "storage": {"storageClassName": "local-reflink"}}}, ns)
    wait(kube, ns, name, made["metadata"]["resourceVersion"])
    return time.monotonic() - start


def drop_dv(kube: Client, ns: str, name: str, claim: dict[str, object]) -> None:
    """Delete a measured DataVolume and wait until its volume is gone, so the next cases
    do not run beside it (a loop-mounted volume left behind made the copy programs'
    writes three to five times slower by the third run)."""
    volume = str((claim.get("spec") or {}).get("volumeName"))  # type: ignore[union-attr]
    kube.delete(kit.DVS, name, ns)
    deadline = time.monotonic() + 120
    while kube.get_or_none(resources.PVS, volume) is not None:
        if time.monotonic() > deadline:
            raise RuntimeError(f"volume {volume} of {ns}/{name} not deleted in 120 s")
        time.sleep(0.2)
    subprocess.run(["sync"], check=True)


def allocated(path: Path) -> int:
    return path.stat().st_blocks * 512


def timed(argv: list[str], env: dict[str, str] | None = None) -> float:
    subprocess.run(["sync"], check=True)
    start = time.monotonic()
    subprocess.run(argv, check=True, env=env, stdout=subprocess.DEVNULL, timeout=1800)
    subprocess.run(["sync"], check=True)
    return time.monotonic() - start


def _children_cpu() -> float:
    """CPU seconds (user + system) used so far by finished child processes (cp, sync, the
    copy programs): what each side costs, apart from waiting for the disk."""
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def tls_dirs(work: Path) -> tuple[Path, Path]:
    """A per-clone CA and the two leaves, as the clone populator's Secrets hold them."""
    pair = paired_tls(server_name="clone-target", client_name="clone-source",
                      now=datetime.datetime.now(datetime.UTC),
                      validity=datetime.timedelta(hours=1))
    dirs = []
    for name, party in (("target-tls", pair.server), ("source-tls", pair.client)):
        d = work / name
        d.mkdir(exist_ok=True)
        for file, data in (("ca.crt", party.ca), ("tls.crt", party.cert),
                           ("tls.key", party.key)):
            (d / file).write_bytes(data)
        dirs.append(d)
    return dirs[0], dirs[1]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def run_cloner(src: Path, work: Path) -> tuple[float, int]:
    """The target program listening, the source program streaming to it; timed from a
    synced start until both exited and a ``sync`` returned."""
    out = work / "disk.img"
    target_tls, source_tls = tls_dirs(work)
    port = free_port()
    base = {k: v for k, v in os.environ.items() if k != "POD_IP"}
    target_env = {**base, "CLONER_TARGET": str(out), "CLONE_TLS_DIR": str(target_tls),
                  "IMPORTER_IMAGE_SIZE": str(src.stat().st_size), "FILESYSTEM_OVERHEAD": "0",
                  "CLONE_PORT": str(port), "IMPORTER_TERMINATION_LOG": "/dev/null"}
    source_env = {**base, "CLONER_SOURCE": str(src), "CLONE_TARGET": f"127.0.0.1:{port}",
                  "CLONE_TLS_DIR": str(source_tls), "IMPORTER_TERMINATION_LOG": "/dev/null"}
    subprocess.run(["sync"], check=True)
    start = time.monotonic()
    target = subprocess.Popen([sys.executable, "-m", "importer.clonetarget"], env=target_env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    source = subprocess.Popen([sys.executable, "-m", "importer.cloner"], env=source_env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    codes = (source.wait(1800), target.wait(1800))
    subprocess.run(["sync"], check=True)
    took = time.monotonic() - start
    if codes != (0, 0):
        raise RuntimeError(f"copy programs exited {codes}")
    alloc = allocated(out)
    out.unlink()
    return took, alloc


def run_cp(src: Path, work: Path) -> tuple[float, int]:
    out = work / "cp.img"
    took = timed(["cp", "--reflink=never", "--sparse=always", str(src), str(out)])
    alloc = allocated(out)
    out.unlink()
    return took, alloc


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="4G,16G", help="golden image sizes")
    parser.add_argument("--data", default="1G", help="data in each golden image")
    parser.add_argument("--runs", type=int, default=3, help="runs per case (median)")
    parser.add_argument("--workdir", type=Path, default=DEFAULT_WORKDIR)
    args = parser.parse_args()
    sizes = [parse_size(s) for s in args.sizes.split(",")]
    data = parse_size(args.data)
    args.workdir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="clone-bench-", dir=args.workdir) as tmp:
        cluster = Cluster(str(Path(tmp) / "cluster"),
                          Options(images=IMAGES, manifests=kit.MANIFESTS))
        cluster.start()
        try:
            kube = kit.cluster_kube(cluster)
            kit.wait_operator_ready(kube)
            ns = kit.namespace(kube, "bench")
            for size in sizes:
                gname = f"golden-{size >> 30}g"
                src = golden(kube, ns, gname, size, data)
                csi = [clone_dv(kube, ns, f"{gname}-csi-{i}", gname) for i in range(args.runs)]
                print(f"csi-clone {human(size)} golden ({human(allocated(src))} allocated), "
                      f"created → Succeeded, median of {args.runs}: "
                      f"{statistics.median(csi):.2f} s (runs {', '.join(f'{t:.2f}' for t in csi)})")
            size = sizes[0]
            gname = f"golden-{size >> 30}g"
            src = Path(kit.volume_path(kube, kube.get(resources.PVCS, gname, ns)))
            kube.patch(kit.CDICONFIGS, "config", {"spec": {"cloneStrategyOverride": "copy"}})
            try:
                dv_times, cl_times, cp_times = [], [], []
                cpu: dict[str, list[float]] = {"run_cloner": [], "run_cp": []}
                for i in range(args.runs):
                    name = f"{gname}-copy-{i}"
                    dv_times.append(clone_dv(kube, ns, name, gname))
                    claim = kube.get(resources.PVCS, name, ns)
                    assert claim["metadata"]["annotations"][
                        "cdi.kubevirt.io/clone.strategy"] == "copy"
                    out = Path(kit.volume_path(kube, claim))
                    dv_alloc = allocated(out)
                    drop_dv(kube, ns, name, claim)
                    # the cloner alone and cp, side by side, into the same host directory
                    work = Path(tmp) / "out"
                    work.mkdir(exist_ok=True)
                    # alternate which goes first, so a warm page cache favours neither
                    order = (run_cloner, run_cp) if i % 2 == 0 else (run_cp, run_cloner)
                    results = {}
                    for fn in order:
                        before = _children_cpu()
                        results[fn.__name__] = fn(src, work)
                        cpu[fn.__name__].append(_children_cpu() - before)
                    took, cl_alloc = results["run_cloner"]
                    cl_times.append(took)
                    took, cp_alloc = results["run_cp"]
                    cp_times.append(took)
                # the same DataVolumes with the pods' CPU limit lifted (an administrator's
                # CDIConfig podResourceRequirements): upstream's default 750m caps each
                # side of a stream that needs more than that of a core (TLS in and out)
                kube.patch(kit.CDICONFIGS, "config",
                           {"spec": {"podResourceRequirements": UNCAPPED}})
                uncapped = []
                for i in range(args.runs):
                    name = f"{gname}-uncapped-{i}"
                    uncapped.append(clone_dv(kube, ns, name, gname))
                    drop_dv(kube, ns, name, kube.get(resources.PVCS, name, ns))
            finally:
                kube.patch(kit.CDICONFIGS, "config",
                           {"spec": {"cloneStrategyOverride": None,
                                     "podResourceRequirements": None}})
            dv_med, cl_med, cp_med = (statistics.median(t) for t in
                                      (dv_times, cl_times, cp_times))
            print(f"host-assisted copy of the {human(size)} golden "
                  f"({human(allocated(src))} allocated), median of {args.runs}:")
            cp_cpu, cl_cpu = (statistics.median(cpu[k]) for k in ("run_cp", "run_cloner"))
            print(f"  cp --sparse=always   {cp_med:7.2f} s   output {human(cp_alloc)} allocated"
                  f"   cpu {cp_cpu:.2f} s")
            print(f"  copy programs        {cl_med:7.2f} s   output {human(cl_alloc)} allocated"
                  f"   cpu {cl_cpu:.2f} s   ratio {cl_med / cp_med:.2f} (goal <= 1.5)")
            print(f"  runs: cp {', '.join(f'{t:.2f}' for t in cp_times)}; copy programs "
                  f"{', '.join(f'{t:.2f}' for t in cl_times)}; DataVolume "
                  f"{', '.join(f'{t:.2f}' for t in dv_times)}")
            print(f"  DataVolume (copy)    {dv_med:7.2f} s   output {human(dv_alloc)} allocated"
                  f"   ratio {dv_med / cp_med:.2f}   (pods' CPU limit {DEFAULT_CPU_LIMIT})")
            up_med = statistics.median(uncapped)
            print(f"  DataVolume (copy)    {up_med:7.2f} s   ratio {up_med / cp_med:.2f}"
                  f"   (pods' CPU limit {UNCAPPED['limits']['cpu']}; runs "
                  f"{', '.join(f'{t:.2f}' for t in uncapped)})")
        finally:
            cluster.stop()


if __name__ == "__main__":
    main()
