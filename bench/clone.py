"""Benchmark: cloning a golden image on `rootdisk up`.

Why it exists: a clone of a golden disk should cost what the storage makes it cost.
Printed, measured in one run:

- ``csi-clone`` on ``local-reflink``, DataVolume created → Succeeded, for a 4 GiB and a
  16 GiB sparse golden image holding 1 GiB of data each (goal: under 1 s of storage time,
  the same at both sizes);
- the host-assisted ``copy`` (CDIConfig ``cloneStrategyOverride: copy``), DataVolume
  created → Succeeded, within the golden image's namespace and into another one (PVC'
  is made beside the golden claim either way, so one pod mounts both claims and
  copies), and into another namespace from a golden claim whose volume is on "another
  node" (``tests/e2e/kit.volume_apart``: no node reaches both volumes, so upstream's two
  pods, both in the golden image's namespace: a source pod streams to the target pod
  over mutual TLS), and the stream's programs alone on the same files
  (``importer.cloner`` streaming to ``importer.clonetarget`` on loopback, with a fresh
  per-clone CA), each divided by ``cp --reflink=never --sparse=always`` of the same
  ``disk.img`` (both write into the same host directory; goal <= 1.5 for the programs,
  <= 1.2 for the DataVolume), with the allocated bytes of each output beside the
  source's. Durability is part of the work on both sides: the target fsyncs before it
  reports success, and cp is followed by ``sync`` (as is the copy: both timings start
  after a ``sync`` and end after one). A DataVolume costs something whatever it copies:
  the csi-clone row (nothing copied) is that cost, and each DataVolume row also shows
  its time less that cost, divided by cp's. The DataVolumes are measured with
  CDIConfig's default pod resources (upstream's: a 750m CPU limit on each pod) and again
  with the CPU limit lifted to two cores (``spec.podResourceRequirements``), which shows
  what the cap costs a stream whose two sides each need most of a core.

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
from typing import Any

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


def clone_dv(kube: Client, ns: str, name: str, source: str, *,
             source_ns: str | None = None) -> float:
    start = time.monotonic()
    made = kube.create(kit.DVS, {
        "apiVersion": "cdi.kubevirt.io/v1beta1", "kind": "DataVolume",
        "metadata": {"name": name},
        "spec": {"source": {"pvc": {"namespace": source_ns or ns, "name": source}},
                 "storage": {"storageClassName": "local-reflink"}}}, ns)
    wait(kube, ns, name, made["metadata"]["resourceVersion"])
    return time.monotonic() - start


def started(kube: Client, ns: str, pod: str) -> bool:
    """Whether the kubelet started pod ``ns/pod`` (its Started Event), even once gone."""
    return any(e.get("reason") == "Started"
               and (e.get("involvedObject") or {}).get("name") == pod
               for e in kube.list(resources.EVENTS, ns))


def copy_dv(kube: Client, ns: str, name: str, source: str, *, source_ns: str,
            two_pods: bool) -> tuple[float, int]:
    """One copy clone DataVolume, timed, its output's allocated bytes, then dropped;
    checks that it ran as asked: the copy strategy, its pod in the source namespace (the
    kubelet's Started Events), and a source pod there only for ``two_pods``."""
    took = clone_dv(kube, ns, name, source, source_ns=source_ns)
    claim = kube.get(resources.PVCS, name, ns)
    assert claim["metadata"]["annotations"]["cdi.kubevirt.io/clone.strategy"] == "copy"
    uid = claim["metadata"]["uid"]
    if not started(kube, source_ns, f"cloner-prime-{uid}"):
        raise RuntimeError(f"{ns}/{name}: its pod did not run in {source_ns}")
    if started(kube, source_ns, f"{uid}-source-pod") != two_pods:
        raise RuntimeError(f"{ns}/{name}: a source pod {'did not run' if two_pods else 'ran'}"
                           f" for a clone from {source_ns}")
    alloc = allocated(Path(kit.volume_path(kube, claim)))
    drop_dv(kube, ns, name, claim)
    return took, alloc


def drop_dv(kube: Client, ns: str, name: str, claim: dict[str, Any]) -> None:
    """Delete a measured DataVolume and wait until its volume is gone, so the next cases
    do not run beside it (a loop-mounted volume left behind made the copy programs'
    writes three to five times slower by the third run)."""
    volume = str((claim.get("spec") or {}).get("volumeName"))
    kube.delete(kit.DVS, name, ns)
    deadline = time.monotonic() + 120
    while kube.get_or_none(resources.PVS, volume) is not None:
        if time.monotonic() > deadline:
            raise RuntimeError(f"volume {volume} of {ns}/{name} not deleted in 120 s")
        time.sleep(0.2)
    subprocess.run(["sync"], check=True)


CASES = {"one pod": (False, False), "one pod, across namespaces": (True, False),
         "two pods, across namespaces": (True, True)}
"""The copy DataVolume's cases, row → (into another namespace, from the golden claim on
"another node"): within the golden image's namespace and into another one (one pod
mounts both claims, in the golden image's namespace), and into another namespace from
a volume no node shares with PVC''s (a source pod streams to a target pod)."""
ROWS = (*CASES, *(f"{row}, uncapped" for row in CASES))
"""The rows: the cases with the default and the lifted CPU limit."""


def _runs(times: list[float]) -> str:
    return ", ".join(f"{t:.2f}" for t in times)


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
            csi_first: list[float] = []
            for size in sizes:
                gname = f"golden-{size >> 30}g"
                src = golden(kube, ns, gname, size, data)
                csi = [clone_dv(kube, ns, f"{gname}-csi-{i}", gname) for i in range(args.runs)]
                csi_first = csi_first or csi
                print(f"csi-clone {human(size)} golden ({human(allocated(src))} allocated), "
                      f"created → Succeeded, median of {args.runs}: "
                      f"{statistics.median(csi):.2f} s (runs {', '.join(f'{t:.2f}' for t in csi)})")
            size = sizes[0]
            gname = f"golden-{size >> 30}g"
            src = Path(kit.volume_path(kube, kube.get(resources.PVCS, gname, ns)))
            # the same image on "another node" (a reflink of it, the same extents): the
            # two pods' case
            clone_dv(kube, ns, f"{gname}-apart", gname)
            kit.volume_apart(kube, ns, f"{gname}-apart")
            kube.patch(kit.CDICONFIGS, "config", {"spec": {"cloneStrategyOverride": "copy"}})
            other = kit.namespace(kube, "bench-other")
            rows: dict[str, list[float]] = {k: [] for k in ROWS}

            def measure(suffix: str, i: int) -> int:
                alloc = 0
                for row, (across, apart) in CASES.items():
                    source = f"{gname}-apart" if apart else gname
                    name = f"{gname}-{row.replace(' ', '').replace(',', '-')}{suffix}-{i}"
                    took, alloc = copy_dv(kube, other if across else ns, name, source,
                                          source_ns=ns, two_pods=apart)
                    rows[row + (", uncapped" if suffix else "")].append(took)
                return alloc

            try:
                cl_times, cp_times = [], []
                cpu: dict[str, list[float]] = {"run_cloner": [], "run_cp": []}
                for i in range(args.runs):
                    dv_alloc = measure("", i)
                    # the stream's programs alone and cp, side by side, into the same
                    # host directory
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
                kit.pod_resources(kube, UNCAPPED)
                for i in range(args.runs):
                    measure("-uncapped", i)
            finally:
                kube.patch(kit.CDICONFIGS, "config",
                           {"spec": {"cloneStrategyOverride": None,
                                     "podResourceRequirements": None}})
            cl_med, cp_med = (statistics.median(t) for t in (cl_times, cp_times))
            fixed = statistics.median(csi_first)
            print(f"host-assisted copy of the {human(size)} golden "
                  f"({human(allocated(src))} allocated), median of {args.runs}:")
            cp_cpu, cl_cpu = (statistics.median(cpu[k]) for k in ("run_cp", "run_cloner"))
            print(f"  cp --sparse=always      {cp_med:5.2f} s   output {human(cp_alloc)} "
                  f"allocated   cpu {cp_cpu:.2f} s   (runs {_runs(cp_times)})")
            print(f"  stream programs         {cl_med:5.2f} s   output {human(cl_alloc)} "
                  f"allocated   cpu {cl_cpu:.2f} s   ratio {cl_med / cp_med:.2f} "
                  f"(goal <= 1.5; runs {_runs(cl_times)})")
            print(f"  DataVolumes (goal <= 1.2), output {human(dv_alloc)} allocated; "
                  f"a DataVolume's own cost (csi-clone, nothing copied) {fixed:.2f} s:")
            for row in ROWS:
                med = statistics.median(rows[row])
                limit = UNCAPPED["limits"]["cpu"] if "uncapped" in row else DEFAULT_CPU_LIMIT
                print(f"  {row + ' (CPU limit ' + limit + ')':56} {med:5.2f} s   ratio "
                      f"{med / cp_med:.2f}   less its own cost {(med - fixed) / cp_med:.2f}"
                      f"   (runs {_runs(rows[row])})")
        finally:
            cluster.stop()


if __name__ == "__main__":
    main()
