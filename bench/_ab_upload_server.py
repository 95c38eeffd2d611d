"""Benchmark: the upload server alone, this checkout against another, runs alternating.

Why it exists: to see what a change to the upload server (``importer/uploadserver``,
``importer/uploadsource.py``) buys without a cluster. Each run starts ``python -m
importer.uploadserver`` from a checkout (this one, or ``--other``, e.g. a ``git archive``
of main) on loopback, with the same TLS and client certificate as in a pod, and POSTs the
benchmark qcow2 to it with ``requests``, optionally paced to ``--rate`` bytes/s (the
client sleeps: a link of that speed). Printed per checkout, median of ``--runs``:

- total: the first byte sent to the server's 200 (the disk written and flushed);
- tail: the last byte handed to the socket to that 200 (what converting after the
  body, or while it arrived, leaves after the upload);
- CPU: user+system seconds of the server and everything it ran (qemu-img, nbdkit).

    python bench/_ab_upload_server.py --other .bench/before [--size 4G] [--runs 3] [--rate 0]

No root needed.
"""

from __future__ import annotations

import argparse
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import DEFAULT_WORKDIR, human, parse_size, prepare_images

REPO = Path(__file__).resolve().parent.parent


class Body:
    """The image as a request body of known length, read 1 MiB at a time, paced to
    ``rate`` bytes/s when given; records when its last byte was handed over."""

    def __init__(self, image: Path, rate: int) -> None:
        self.fh = image.open("rb")
        self.size = image.stat().st_size
        self.rate = rate
        self.sent = 0
        self.start = 0.0
        self.last_byte = 0.0

    def __len__(self) -> int:
        return self.size

    def read(self, _n: int = -1) -> bytes:
        if not self.start:
            self.start = time.monotonic()
        if self.rate:
            due = self.start + self.sent / self.rate
            if (wait := due - time.monotonic()) > 0:
                time.sleep(wait)
        chunk = self.fh.read(1 << 20)
        self.sent += len(chunk)
        if not chunk and not self.last_byte:
            self.last_byte = time.monotonic()
        return chunk


def one_run(tree: Path, image: Path, workdir: Path, claim: str,
            rate: int) -> tuple[float, float, float]:
    sys.path.insert(0, str(REPO))
    from tests.importer.test_uploadserver import Server

    with tempfile.TemporaryDirectory(prefix="alone-", dir=workdir) as d:
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        server = Server(Path(d), size=claim, cwd=tree)
        try:
            body = Body(image, rate)
            subprocess.run(["sync"], check=True)
            resp = server.post("/v1beta1/upload", body)
            done = time.monotonic()
            if resp.status_code != 200 or server.wait() != 0:
                raise RuntimeError(f"upload server: {resp.status_code} {resp.text}")
        finally:
            server.stop()
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
        return done - body.start, done - body.last_byte, cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--other", type=Path, required=True,
                        help="the other checkout (a directory with importer/)")
    parser.add_argument("--size", default="4G", help="virtual size of the qcow2")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--rate", type=int, default=0, help="bytes/s the client sends at")
    parser.add_argument("--workdir", type=Path, default=DEFAULT_WORKDIR)
    args = parser.parse_args()
    size = parse_size(args.size)
    image = prepare_images(args.workdir, size).qcow2
    claim = f"{(size * 5 // 4) // 2**20}Mi"
    trees = {"this": REPO, "other": args.other.resolve()}
    runs: dict[str, list[tuple[float, float, float]]] = {k: [] for k in trees}
    for i in range(args.runs):
        for name in (trees if i % 2 == 0 else reversed(list(trees))):
            runs[name].append(one_run(trees[name], image, args.workdir, claim, args.rate))
            t, tail, cpu = runs[name][-1]
            print(f"  run {i} {name:5}: total {t:6.2f} s, tail {tail:5.2f} s, CPU {cpu:5.2f} s",
                  flush=True)
    pace = f", paced to {args.rate * 8 / 1e9:g} Gbit/s" if args.rate else ""
    print(f"upload server alone, {human(size)} qcow2 ({human(image.stat().st_size)} file)"
          f"{pace}, median of {args.runs}:")
    for name, tree in trees.items():
        total, tail, cpu = (statistics.median(r[k] for r in runs[name]) for k in range(3))
        print(f"  {name:5} ({tree}): total {total:6.2f} s, last byte to 200 {tail:5.2f} s,"
              f" CPU {cpu:5.2f} s")


if __name__ == "__main__":
    sys.exit(main())
