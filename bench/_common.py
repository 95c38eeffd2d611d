"""Shared parts of the import benchmarks: images, timing, memory sampling, the table.

Why it exists: every benchmark runs rootdisk and a reference tool side by side on the
same image, in the same run, several times, and prints medians and ratios; this module
holds what they share so each script only lists its cases.

Timing is wall-clock from process start to exit (the whole command, as a user or a pod
would see it). Runs of different cases are interleaved (A B C, A B C, ...) so that drift
on a noisy machine hits all cases alike; ``sync`` runs before each timed command so the
previous case's dirty pages are not flushed on the next one's clock. The page cache is
not dropped (not allowed here, and not reliable): the served image is warm in memory,
which makes the "network" a loopback link with no disk behind it — the throttled runs
are the realistic ones.

Memory: a sampler thread sums VmRSS (and RssAnon) over the command's whole process tree
(the command and all its descendants: qemu-img, nbdkit, ...) every few milliseconds
and keeps the peak. A child caught between fork and exec is left out: it runs on its
parent's pages, and counting it doubled the parent in some samples. RSS counts shared
library pages once per process, so the sum overstates a little; page cache is not in
it (a cgroup's memory.peak would include the written disk's cache, and creating cgroups
is not ours to do on this machine).
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import quote

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from tests.fixtures.images import (  # noqa: E402 - needs REPO on sys.path first
    GiB,
    MiB,
    build_patterned_raw,
    convert,
)

DEFAULT_WORKDIR = REPO / ".bench"
GOAL_RSS = 100 * MiB


def parse_size(text: str) -> int:
    """``1G``, ``1GiB``, ``512M``, ``64MiB``, ``1073741824`` → bytes (binary units)."""
    m = re.fullmatch(r"\s*(\d+)\s*([KMGT]?)(i?B)?\s*", text, re.IGNORECASE)
    if not m:
        raise ValueError(f"size {text!r}: expected a number with an optional K/M/G/T suffix")
    power = " KMGT".index(m.group(2).upper() or " ")
    return int(m.group(1)) << (10 * power)


def human(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GiB"


def rootdisk_argv() -> list[str]:
    script = Path(sys.executable).parent / "rootdisk"
    if script.exists():
        return [str(script)]
    return [sys.executable, "-m", "rootdisk"]


# ----------------------------------------------------------------------- images
@dataclass(frozen=True)
class BenchImages:
    raw: Path
    qcow2: Path
    raw_gz: Path
    size: int


def prepare_images(workdir: Path, size: int, *, data_ratio: float = 0.5) -> BenchImages:
    """The benchmark images, built once into ``workdir`` and reused across runs."""
    workdir.mkdir(parents=True, exist_ok=True)
    tag = f"{size // MiB}M-{int(data_ratio * 100)}pct"
    raw = workdir / f"bench-{tag}.raw"
    qcow2 = workdir / f"bench-{tag}.qcow2"
    raw_gz = workdir / f"bench-{tag}.raw.gz"
    if not raw.exists():
        print(f"building {raw.name} ({human(size)}, {data_ratio:.0%} random data)...", flush=True)
        tmp = raw.with_name(raw.name + ".tmp")
        build_patterned_raw(tmp, size=size, data_ratio=data_ratio)
        tmp.rename(raw)
    if not qcow2.exists():
        print(f"building {qcow2.name}...", flush=True)
        tmp = qcow2.with_name(qcow2.name + ".tmp")
        convert(raw, "raw", tmp, ["-O", "qcow2"])
        tmp.rename(qcow2)
    if not raw_gz.exists():
        print(f"building {raw_gz.name} (gzip -6, takes a while once)...", flush=True)
        tmp = raw_gz.with_name(raw_gz.name + ".tmp")
        with raw.open("rb") as fin, tmp.open("wb") as fout:
            subprocess.run(["gzip", "-6", "-n", "-c"], stdin=fin, stdout=fout, check=True)
        tmp.rename(raw_gz)
    return BenchImages(raw=raw, qcow2=qcow2, raw_gz=raw_gz, size=size)


# ------------------------------------------------------------------ measuring
def _children(pid: int) -> list[int]:
    kids: list[int] = []
    with contextlib.suppress(OSError):
        for task in os.listdir(f"/proc/{pid}/task"):
            with contextlib.suppress(OSError):
                kids += [
                    int(c) for c in Path(f"/proc/{pid}/task/{task}/children").read_text().split()
                ]
    return kids


def _tree(pid: int) -> list[int]:
    seen, todo = [], [pid]
    while todo:
        p = todo.pop()
        seen.append(p)
        todo += _children(p)
    return seen


_PF_FORKNOEXEC = 0x40  # kernel task flag: forked, and not (yet) exec'd


def _forked_not_execd(pid: int) -> bool:
    """A child between fork and exec runs on its parent's pages (vfork: the very same
    memory; fork: copy-on-write); adding its RSS would count the parent twice."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    flags = int(stat.rsplit(")", 1)[1].split()[6])  # field 9, after "pid (comm) state"
    return bool(flags & _PF_FORKNOEXEC)


def _memory(pid: int) -> tuple[str, int, int]:
    """(name, VmRSS, RssAnon) of one process, bytes; zeros if it is gone, or if it is a
    fork of its parent that has not exec'd yet (its pages are its parent's)."""
    name, rss, anon = "?", 0, 0
    if _forked_not_execd(pid):
        return name, rss, anon
    with contextlib.suppress(OSError):
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("Name:"):
                name = line.split(None, 1)[1].strip()
            elif line.startswith("VmRSS:"):
                rss = int(line.split()[1]) * 1024
            elif line.startswith("RssAnon:"):
                anon = int(line.split()[1]) * 1024
    return name, rss, anon


class TreeMemorySampler:
    """Peak of the summed RSS over a process tree, sampled every ``interval`` seconds."""

    def __init__(self, pid: int, interval: float = 0.005) -> None:
        self.pid = pid
        self.interval = interval
        self.peak_rss = 0
        self.peak_anon = 0
        self.max_processes = 0
        self.peak_by_name: dict[str, int] = {}  # peak summed RSS per process name
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            pids = _tree(self.pid)
            rss = anon = 0
            by_name: dict[str, int] = {}
            for p in pids:
                name, r, a = _memory(p)
                rss += r
                anon += a
                by_name[name] = by_name.get(name, 0) + r
            for name, r in by_name.items():
                if r:  # 0: the process exited between listing and reading
                    self.peak_by_name[name] = max(self.peak_by_name.get(name, 0), r)
            self.peak_rss = max(self.peak_rss, rss)
            self.peak_anon = max(self.peak_anon, anon)
            self.max_processes = max(self.max_processes, len(pids))
            self._stop.wait(self.interval)

    def __enter__(self) -> TreeMemorySampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


@dataclass
class Case:
    """One thing to time: a command (argv, or a shell line) and what to clean up after."""

    label: str
    argv: Sequence[str] | str
    outputs: Sequence[Path] = ()
    memory: bool = True  # sampled for every case, so the sampler's cost is the same for all
    env: dict[str, str] | None = None
    timeout: float = 300.0  # a hung run is killed (whole process group) and recorded
    times: list[float] = field(default_factory=list)
    peak_rss: list[int] = field(default_factory=list)
    peak_anon: list[int] = field(default_factory=list)
    peak_by_name: dict[str, int] = field(default_factory=dict)
    failures: list[str] = field(default_factory=list)

    @property
    def median(self) -> float | None:
        return statistics.median(self.times) if self.times else None

    def run(self) -> None:
        self._clean()
        os.sync()
        shell = isinstance(self.argv, str)
        start = time.monotonic()
        proc = subprocess.Popen(
            self.argv,
            shell=shell,  # the benchmark's own pipelines (curl | gunzip)
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=self.env,
            executable="/bin/bash" if shell else None,
            start_new_session=True,  # its own process group, so a hang can be killed whole
        )
        sampler = TreeMemorySampler(proc.pid) if self.memory else None
        with sampler or contextlib.nullcontext():
            try:
                out, err = proc.communicate(timeout=self.timeout)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.communicate()
                self.failures.append(f"timed out after {self.timeout:.0f} s (killed)")
                self._clean()
                return
        elapsed = time.monotonic() - start
        if proc.returncode != 0:
            # Recorded, not raised: one broken case must not lose the others' figures.
            tail = (out.decode(errors="replace") + err.decode(errors="replace")).strip()
            self.failures.append(f"exit {proc.returncode}: {tail[-600:]}")
            self._clean()
            return
        self.times.append(elapsed)
        if sampler is not None:
            self.peak_rss.append(sampler.peak_rss)
            self.peak_anon.append(sampler.peak_anon)
            for name, r in sampler.peak_by_name.items():
                self.peak_by_name[name] = max(self.peak_by_name.get(name, 0), r)
        self._clean()

    def _clean(self) -> None:
        for path in self.outputs:
            path.unlink(missing_ok=True)


@dataclass(frozen=True)
class ServedDir:
    """A directory served by the test image server running in a process of its own."""

    url: str

    def url_for(self, name: str) -> str:
        return f"{self.url}/{quote(name)}"


@contextlib.contextmanager
def serve_dir(root: Path, *, rates: dict[str, int] | None = None,
              connection_rates: dict[str, int] | None = None) -> Iterator[ServedDir]:
    """Start ``python -m tests.fixtures.httpserver ROOT`` (its own process: the benchmark's
    sampler thread must not compete with the server for a GIL); stop it on exit.
    ``rates`` throttle a file's link (shared by its requests), ``connection_rates`` each
    request on its own (a CDN's cap per connection)."""
    argv = [sys.executable, "-m", "tests.fixtures.httpserver", str(root)]
    for name, rate in (rates or {}).items():
        argv += ["--rate", f"{name}={rate}"]
    for name, rate in (connection_rates or {}).items():
        argv += ["--connection-rate", f"{name}={rate}"]
    proc = subprocess.Popen(
        argv, cwd=REPO, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline().strip()
        if not line.startswith("http"):
            raise RuntimeError(f"image server did not start (exit {proc.poll()})")
        yield ServedDir(url=line)
    finally:
        if proc.stdin is not None:
            proc.stdin.close()  # the server stops when its stdin closes
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def run_interleaved(cases: Sequence[Case], runs: int) -> None:
    for i in range(runs):
        for case in cases:
            before = len(case.times)
            case.run()
            took = f"{case.times[-1]:7.2f} s" if len(case.times) > before else "FAILED"
            print(f"  run {i + 1}/{runs} {case.label:<42} {took}", flush=True)


def print_cases(title: str, cases: Sequence[Case]) -> None:
    print(f"\n{title}")
    print(f"  {'case':<42} {'median':>8} {'min':>8} {'max':>8}  peak RSS (anon)")
    for c in cases:
        if c.median is None:
            print(f"  {c.label:<42} FAILED every run; last: {c.failures[-1]}")
            continue
        mem = ""
        if c.peak_rss:
            mem = f"  {human(max(c.peak_rss))} ({human(max(c.peak_anon))})"
        print(f"  {c.label:<42} {c.median:7.2f}s {min(c.times):7.2f}s {max(c.times):7.2f}s{mem}")
        if c.peak_by_name:
            parts = sorted(c.peak_by_name.items(), key=lambda kv: -kv[1])
            detail = ", ".join(f"{name} {human(rss)}" for name, rss in parts)
            print(f"  {'':<42} peak RSS by process: {detail}")
        if c.failures:
            print(f"  {'':<42} {len(c.failures)} run(s) FAILED; last: {c.failures[-1]}")


def ratio_line(label: str, ours: Case, theirs: Case, goal: float | None) -> str:
    if ours.median is None or theirs.median is None:
        return f"  {label:<58}    n/a (a case failed)"
    r = ours.median / theirs.median
    verdict = ""
    if goal is not None:
        verdict = f"  goal <= {goal:.2f}: {'met' if r <= goal else 'NOT met'}"
    return f"  {label:<58} {r:6.2f}{verdict}"


def peak_text(case: Case) -> str:
    return human(max(case.peak_rss)) if case.peak_rss else "n/a"


def memory_line(case: Case, *, goal: int = GOAL_RSS) -> str:
    """The peak RSS of a case's process tree against ``goal`` bytes."""
    if not case.peak_rss:
        return f"  peak RSS ({case.label}): n/a (failed)"
    peak = max(case.peak_rss)
    verdict = "met" if peak <= goal else "NOT met"
    return (
        f"  peak RSS of the importer's process tree ({case.label}): {human(peak)}, "
        f"anon {human(max(case.peak_anon))}  goal <= {human(goal)}: {verdict}"
    )


def require_tools(*tools: str) -> None:
    missing = [t for t in tools if shutil.which(t) is None]
    if missing:
        sys.exit(f"missing tools: {', '.join(missing)} (run make setup)")


__all__ = [
    "DEFAULT_WORKDIR",
    "GOAL_RSS",
    "REPO",
    "BenchImages",
    "Case",
    "GiB",
    "MiB",
    "TreeMemorySampler",
    "human",
    "memory_line",
    "parse_size",
    "peak_text",
    "prepare_images",
    "print_cases",
    "ratio_line",
    "require_tools",
    "rootdisk_argv",
    "run_interleaved",
    "serve_dir",
]
