"""Benchmark: rootdisk's one-pass HTTP import against the ways it replaces.

Why it exists: the importer's reason to be is beating upstream CDI's download-to-scratch-
then-convert path without a scratch volume; this prints the ratios that say whether it
does, measured side by side in one run (see bench/README.md for the method).

    python bench/import_http.py [--size 1G] [--runs 3] [--rate 125000000]

Cases, each over loopback from the test image server, unthrottled then throttled to
``--rate`` bytes/s (125 MB/s = 1 Gbit/s, like a real link):
- qcow2 (``--size`` virtual, half random data): ``rootdisk import`` vs ``curl -o scratch
  && qemu-img convert -f qcow2 -O raw`` (upstream's path) vs plain ``curl -o`` (the link's
  limit) vs ``qemu-img convert`` of the local file (no network at all);
- raw.gz of the same disk: ``rootdisk import`` vs ``curl | gunzip > file``.
For reference, the building blocks of a one-pass import by hand: ``nbdkit`` (curl
plugin, readahead filter) feeding ``qemu-img convert``, and qemu-img's own curl driver.
"""

from __future__ import annotations

import argparse
import shlex
from pathlib import Path

from _common import (
    DEFAULT_WORKDIR,
    Case,
    human,
    memory_line,
    parse_size,
    peak_text,
    prepare_images,
    print_cases,
    ratio_line,
    require_tools,
    rootdisk_argv,
    run_interleaved,
    serve_dir,
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", default="1G", help="virtual size of the image (default 1G)")
    parser.add_argument("--runs", type=int, default=3, help="runs per case (median; >= 3)")
    parser.add_argument(
        "--rate", type=int, default=125_000_000, help="throttled link, bytes/s (1 Gbit/s)"
    )
    parser.add_argument("--workdir", type=Path, default=DEFAULT_WORKDIR)
    parser.add_argument("--data-ratio", type=float, default=0.5)
    parser.add_argument("--skip-unthrottled", action="store_true")
    parser.add_argument("--skip-throttled", action="store_true")
    parser.add_argument("--skip-capped", action="store_true",
                        help="skip the link whose server caps each connection")
    args = parser.parse_args()
    require_tools("curl", "gunzip", "qemu-img", "nbdkit")
    size = parse_size(args.size)
    images = prepare_images(args.workdir, size, data_ratio=args.data_ratio)
    out = args.workdir / "out"
    out.mkdir(exist_ok=True)
    dest, scratch = out / "disk.img", out / "scratch.img"
    q = shlex.quote
    print(
        f"image: {images.qcow2.name} ({human(images.qcow2.stat().st_size)} qcow2, "
        f"{human(images.raw_gz.stat().st_size)} raw.gz, {human(size)} virtual); "
        f"{args.runs} runs per case"
    )

    local = Case(
        "qemu-img convert, local qcow2",
        ["qemu-img", "convert", "-f", "qcow2", "-O", "raw", str(images.qcow2), str(dest)],
        outputs=[dest],
    )
    summary: list[str] = []
    link = f"{args.rate * 8 / 1e9:.2f} Gbit/s"
    modes: list[tuple[str, int | None, int | None]] = []
    if not args.skip_unthrottled:
        modes.append(("unthrottled", None, None))
    if not args.skip_throttled:
        modes.append((f"throttled to {link}", args.rate, None))
    if not args.skip_capped:
        modes.append((f"{link}, each connection capped at a quarter of it", args.rate,
                      args.rate // 4))
    for mode, rate, per_connection in modes:
        served = (images.qcow2, images.raw_gz)
        rates = {image.name: rate for image in served} if rate else {}
        capped = {image.name: per_connection for image in served} if per_connection else {}
        with serve_dir(args.workdir, rates=rates, connection_rates=capped) as server:
            qurl, gzurl = server.url_for(images.qcow2.name), server.url_for(images.raw_gz.name)
            ours = Case(
                "rootdisk import (qcow2)",
                [*rootdisk_argv(), "import", qurl, str(dest)],
                outputs=[dest],
                memory=True,
            )
            dtc = Case(
                "curl -o scratch; qemu-img convert",
                f"curl -sSf -o {q(str(scratch))} {q(qurl)} && "
                f"qemu-img convert -f qcow2 -O raw {q(str(scratch))} {q(str(dest))}",
                outputs=[scratch, dest],
                memory=True,
            )
            curl = Case(
                "curl -o (qcow2 file)", ["curl", "-sSf", "-o", str(dest), qurl], outputs=[dest]
            )
            ours_gz = Case(
                "rootdisk import (raw.gz)",
                [*rootdisk_argv(), "import", gzurl, str(dest)],
                outputs=[dest],
                memory=True,
            )
            gunzip = Case(
                "curl | gunzip > file",
                f"set -o pipefail; curl -sSf {q(gzurl)} | gunzip > {q(str(dest))}",
                outputs=[dest],
            )
            # Building blocks, for reference: how fast the one-pass idea can go here.
            nbdkit_curl = Case(
                "nbdkit curl+readahead | qemu-img convert",
                [
                    "nbdkit", "-r", "-U", "-", "--filter=readahead", "curl", f"url={qurl}",
                    "--run", f'qemu-img convert -f qcow2 -O raw "$uri" {q(str(dest))}',
                ],
                outputs=[dest],
                memory=True,
            )  # fmt: skip
            qemu_curl = Case(
                "qemu-img convert of the URL (curl driver)",
                ["qemu-img", "convert", "-f", "qcow2", "-O", "raw", qurl, str(dest)],
                outputs=[dest],
                timeout=120,  # QEMU 7.2's curl driver was seen hanging here, idle
            )
            cases = [ours, dtc, curl, nbdkit_curl, qemu_curl, ours_gz, gunzip]
            if rate is None:
                cases.insert(5, local)
            if per_connection:  # the moonshot: only the qcow2 against the one stream
                cases = [ours, curl, dtc]
            print(f"\n== {mode}", flush=True)
            run_interleaved(cases, args.runs)
            print_cases(f"{mode}: medians of {args.runs}", cases)
            throttled = rate is not None
            if per_connection:
                summary += [
                    f"{mode}:",
                    ratio_line("rootdisk / curl -o (one capped stream)", ours, curl, 0.5),
                    ratio_line("rootdisk / download-then-convert", ours, dtc, None),
                    memory_line(ours, goal=64 * 1024 * 1024),
                ]
                continue
            summary += [
                f"{mode}:",
                ratio_line(
                    "rootdisk / download-then-convert (upstream)",
                    ours,
                    dtc,
                    0.8 if throttled else 0.7,
                ),
                ratio_line("rootdisk / curl -o (the link)", ours, curl, 1.1 if throttled else None),
                ratio_line("rootdisk / qemu-img convert of the local file", ours, local, None),
                ratio_line(
                    "nbdkit curl | qemu-img / download-then-convert", nbdkit_curl, dtc, None
                ),
                ratio_line("qemu-img curl driver / download-then-convert", qemu_curl, dtc, None),
                ratio_line("rootdisk raw.gz / curl | gunzip", ours_gz, gunzip, 1.1),
                memory_line(ours),
                memory_line(ours_gz),
                f"  (download-then-convert peak RSS: {peak_text(dtc)})",
            ]
    print("\nratios (median / median):")
    print("\n".join(summary))


if __name__ == "__main__":
    main()
