"""Benchmark: localcluster's API server vs kmock's emulator, side by side in one run.

    python bench/apiserver.py [--count 2000] [--concurrency 4] [--time-limit 60]

Each server runs in its own process (ours: ``python -m localcluster.apiserver``, HTTPS,
SQLite WAL, bearer token; kmock 0.8: its ``KubernetesEmulator`` behind ``kmock.Server``,
plain HTTP, in memory). The same client (aiohttp, keep-alive, ``--concurrency`` parallel
writers) opens a watch on ConfigMaps in ``default``, then creates ``--count`` ConfigMaps.
It prints creates/s (from the first request sent to the last response received) and the
watch delivery latency of each object (create request sent → its ADDED event read from the
watch), p50/p99/max. Goals for ours: ≥ 500 creates/s, p99 ≤ 50 ms.

kmock does far less per write (no resourceVersion, uid, validation, persistence), but its
object lookups are linear, so it slows down as objects accumulate (measured here: ~130
creates/s over the first 50, ~11/s over 500): each server gets ``--time-limit`` seconds of
writing, and the table says how many creates it completed in that time.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import re
import signal
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import aiohttp

REPO = Path(__file__).resolve().parent.parent


@dataclass
class Target:
    name: str
    url: str
    headers: dict[str, str]
    ssl_context: ssl.SSLContext | None
    proc: subprocess.Popen[str]


@dataclass
class Result:
    name: str
    done: int
    creates_per_s: float
    p50_ms: float
    p99_ms: float
    max_ms: float
    missing: int


def _wait_for_line(proc: subprocess.Popen[str], pattern: str, timeout: float = 30) -> str:
    deadline = time.monotonic() + timeout
    assert proc.stdout is not None
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            if proc.poll() is not None:
                raise RuntimeError(f"server exited with {proc.returncode}")
            continue
        m = re.search(pattern, line)
        if m:
            return m.group(1)
    raise TimeoutError(f"no line matching {pattern!r}")


def _service_account_token(url: str, headers: dict[str, str], ctx: ssl.SSLContext) -> str:
    """A signed token of ServiceAccount default/bench, bound to cluster-admin: requests
    then pay the JWT check (cached) and the bound-object look-ups, not the admin shortcut."""
    import urllib.request

    def post(path: str, body: dict[str, object]) -> dict[str, object]:
        req = urllib.request.Request(url + path, data=json.dumps(body).encode(), method="POST",
                                     headers={**headers, "Content-Type": "application/json"})
        with urllib.request.urlopen(req, context=ctx, timeout=30) as resp:
            return dict(json.loads(resp.read()))

    post("/api/v1/namespaces/default/serviceaccounts", {"metadata": {"name": "bench"}})
    post("/apis/rbac.authorization.k8s.io/v1/clusterrolebindings", {
        "metadata": {"name": "bench"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                    "name": "cluster-admin"},
        "subjects": [{"kind": "ServiceAccount", "name": "bench", "namespace": "default"}]})
    answer = post("/api/v1/namespaces/default/serviceaccounts/bench/token", {"spec": {}})
    status = answer["status"]
    assert isinstance(status, dict)
    return str(status["token"])


def start_localcluster(data_dir: Path, *, service_account: bool = False) -> Target:
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "localcluster.apiserver",
            "--data-dir",
            str(data_dir),
            "--port",
            "0",
            "--log-level",
            "WARNING",
        ],
        cwd=REPO,
        stdout=subprocess.PIPE,
        text=True,
    )
    url = _wait_for_line(proc, r"serving (https://\S+);")
    token = (data_dir / "admin-token").read_text().strip()
    ctx = ssl.create_default_context(cafile=str(data_dir / "pki" / "ca.crt"))
    headers = {"Authorization": f"Bearer {token}"}
    if service_account:
        headers = {"Authorization": f"Bearer {_service_account_token(url, headers, ctx)}"}
    return Target("localcluster", url, headers, ctx, proc)


def start_kmock() -> Target:
    proc = subprocess.Popen(
        [sys.executable, __file__, "--serve-kmock"], cwd=REPO, stdout=subprocess.PIPE, text=True
    )
    url = _wait_for_line(proc, r"serving (http://\S+)")
    return Target("kmock 0.8", url, {}, None, proc)


async def _serve_kmock() -> None:
    import kmock

    async with kmock.KubernetesEmulator() as emulator, kmock.Server(emulator) as server:
        print(f"serving {str(server.url).rstrip('/')}", flush=True)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        await stop.wait()


async def measure(target: Target, *, count: int, concurrency: int,
                  time_limit: float) -> Result:
    base = f"{target.url}/api/v1/namespaces/default/configmaps"
    sent: dict[str, float] = {}
    received: dict[str, float] = {}
    all_seen = asyncio.Event()
    connector = aiohttp.TCPConnector(limit=concurrency + 2, ssl=target.ssl_context or False)
    async with aiohttp.ClientSession(connector=connector, headers=target.headers) as session:
        watch_open = asyncio.Event()
        writing_done = asyncio.Event()

        async def watch() -> None:
            timeout = aiohttp.ClientTimeout(total=None, sock_read=None)
            async with session.get(base, params={"watch": "true"}, timeout=timeout) as resp:
                resp.raise_for_status()
                watch_open.set()
                async for line in resp.content:
                    now = time.perf_counter()
                    if not line.strip():
                        continue
                    event = json.loads(line)
                    name = event.get("object", {}).get("metadata", {}).get("name", "")
                    if event.get("type") == "ADDED" and name.startswith("bench-"):
                        received.setdefault(name, now)
                        if len(received) == count or (writing_done.is_set()
                                                      and len(received) >= len(sent)):
                            all_seen.set()
                            return

        watcher = asyncio.create_task(watch())
        await asyncio.wait_for(watch_open.wait(), 10)
        await asyncio.sleep(0.2)
        queue: asyncio.Queue[int] = asyncio.Queue()
        for i in range(count):
            queue.put_nowait(i)

        async def writer() -> None:
            while not queue.empty() and time.perf_counter() - started < time_limit:
                i = queue.get_nowait()
                name = f"bench-{i:05d}"
                body = {
                    "apiVersion": "v1",
                    "kind": "ConfigMap",
                    "metadata": {"name": name, "namespace": "default", "labels": {"bench": "yes"}},
                    "data": {"index": str(i), "payload": "x" * 200},
                }
                sent[name] = time.perf_counter()
                async with session.post(base, json=body) as resp:
                    if resp.status >= 300:
                        raise RuntimeError(
                            f"{target.name}: create {name}: {resp.status} {await resp.text()}"
                        )
                    await resp.read()

        started = time.perf_counter()
        await asyncio.gather(*(writer() for _ in range(concurrency)))
        elapsed = time.perf_counter() - started
        writing_done.set()
        if len(received) >= len(sent):
            all_seen.set()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(all_seen.wait(), 30)
        watcher.cancel()
        with contextlib.suppress(asyncio.CancelledError, aiohttp.ClientError):
            await watcher
    done = len(sent)
    latencies = sorted((received[n] - sent[n]) * 1000 for n in received)
    p99 = latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))] if latencies else 0.0
    return Result(target.name, done, done / elapsed, statistics.median(latencies or [0.0]),
                  p99, latencies[-1] if latencies else 0.0, done - len(received))


def _stop(target: Target) -> None:
    target.proc.send_signal(signal.SIGTERM)
    try:
        target.proc.wait(20)
    except subprocess.TimeoutExpired:
        target.proc.kill()
        target.proc.wait(5)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--count", type=int, default=2000)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--time-limit", type=float, default=60.0,
                        help="seconds of writing per server (kmock slows down as it fills)")
    parser.add_argument("--service-account", action="store_true",
                        help="localcluster: send a service-account token (a signed JWT whose "
                             "account is bound to cluster-admin) instead of the admin token")
    parser.add_argument("--serve-kmock", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve_kmock:
        asyncio.run(_serve_kmock())
        return 0
    results = []
    with tempfile.TemporaryDirectory(prefix="bench-apiserver-") as tmp:
        for start in (lambda: start_localcluster(Path(tmp) / "lc",
                                                 service_account=args.service_account),
                      start_kmock):
            target = start()
            try:
                results.append(
                    asyncio.run(measure(target, count=args.count, concurrency=args.concurrency,
                                        time_limit=args.time_limit))
                )
            finally:
                _stop(target)
    print(
        f"\n{args.count} ConfigMap creates, {args.concurrency} writers, one watch open "
        f"(python {sys.version.split()[0]}, {os.cpu_count()} CPUs)\n"
    )
    print(f"{'server':<14} {'created':>8} {'creates/s':>10} {'p50 ms':>8} {'p99 ms':>8} "
          f"{'max ms':>8} {'missed':>7}")
    for r in results:
        print(f"{r.name:<14} {r.done:>8} {r.creates_per_s:>10.0f} {r.p50_ms:>8.1f} "
              f"{r.p99_ms:>8.1f} {r.max_ms:>8.1f} {r.missing:>7}")
    ours = results[0]
    if len(results) > 1 and results[1].creates_per_s:
        print(
            f"\nlocalcluster / kmock creates/s ratio: "
            f"{ours.creates_per_s / results[1].creates_per_s:.2f}"
        )
    goal = (ours.creates_per_s >= 500 and ours.p99_ms <= 50 and not ours.missing
            and ours.done == args.count)
    print(f"goal (≥ 500 creates/s, p99 ≤ 50 ms): {'met' if goal else 'NOT met'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
