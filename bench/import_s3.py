"""Benchmark: rootdisk's S3 import against boto3's own download (and convert).

Why it exists: upstream CDI downloads S3 objects with one GetObject and, for qcow2,
converts from a scratch volume afterwards; rootdisk converts while it reads ranges. This
prints whether that beats boto3's tuned, multi-threaded ``download_file`` (+ ``qemu-img
convert`` for qcow2), side by side in one run (see bench/README.md).

    python bench/import_s3.py [--size 1G] [--runs 3]

Against a SeaweedFS server on loopback (auth enforced), started for the run:
- qcow2: ``rootdisk import s3://...`` vs ``download_file`` then ``qemu-img convert``;
  also ``rootdisk import`` of a presigned URL of the same object (HTTP, HEAD refused),
  and ``download_file`` of the qcow2 alone: what a pipeline reading at boto3's own speed,
  its convert hidden entirely, would take (the ratio's floor on this machine, printed);
- raw: ``rootdisk import s3://...`` vs ``download_file``.
"""

from __future__ import annotations

import argparse
import os
import shlex
import shutil
import sys
import tempfile
import time
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
)

from tests.fixtures.s3server import REGION, S3Server

BOTO3_DOWNLOAD = """
import sys, boto3
from botocore.config import Config
endpoint, bucket, key, dest = sys.argv[1:5]
s3 = boto3.client("s3", endpoint_url=endpoint, region_name=sys.argv[5],
                  config=Config(s3={"addressing_style": "path"}))
s3.download_file(bucket, key, dest)
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", default="1G", help="virtual size of the image (default 1G)")
    parser.add_argument("--runs", type=int, default=3, help="runs per case (median; >= 3)")
    parser.add_argument("--workdir", type=Path, default=DEFAULT_WORKDIR)
    parser.add_argument("--data-ratio", type=float, default=0.5)
    args = parser.parse_args()
    require_tools("qemu-img", "nbdkit")
    size = parse_size(args.size)
    images = prepare_images(args.workdir, size, data_ratio=args.data_ratio)
    out = args.workdir / "out"
    out.mkdir(exist_ok=True)
    dest, scratch = out / "disk.img", out / "scratch.img"

    with tempfile.TemporaryDirectory(dir=args.workdir, prefix="s3-") as tmp:
        server = S3Server(Path(tmp))
        server.start()
        try:
            bucket = "bench"
            server.create_bucket(bucket)
            start = time.monotonic()
            for image in (images.qcow2, images.raw):
                server.put_file(bucket, image.name, image)
            print(
                f"uploaded {images.qcow2.name} ({human(images.qcow2.stat().st_size)}) and "
                f"{images.raw.name} ({human(size)}) to SeaweedFS in "
                f"{time.monotonic() - start:.1f} s; {args.runs} runs per case",
                flush=True,
            )
            secret = server.write_secret_file(Path(tmp) / "secret")
            env = {
                **os.environ,
                "AWS_ACCESS_KEY_ID": server.access_key,
                "AWS_SECRET_ACCESS_KEY": server.secret_key,
            }
            s3_flags = ["--s3-endpoint", server.endpoint, "--secret-file", str(secret)]

            def ours(label: str, url: str, flags: list[str]) -> Case:
                return Case(
                    label,
                    [*rootdisk_argv(), "import", url, str(dest), *flags],
                    outputs=[dest],
                    memory=True,
                )

            def boto3_download(key: str, to: Path) -> str:
                argv = [sys.executable, "-c", BOTO3_DOWNLOAD.strip()]
                argv += [server.endpoint, bucket, key, str(to), REGION]
                return shlex.join(argv)

            def boto3_case(label: str, key: str, to: Path) -> Case:
                return Case(label, boto3_download(key, to), outputs=[to], memory=True, env=env)

            q_ours = ours(
                "rootdisk import s3:// (qcow2)", server.url(bucket, images.qcow2.name), s3_flags
            )
            q_presigned = ours(
                "rootdisk import presigned URL (qcow2)",
                server.presigned_url(bucket, images.qcow2.name, expires=6 * 3600),
                [],
            )
            q_boto = Case(
                "boto3 download_file; qemu-img convert",
                f"{boto3_download(images.qcow2.name, scratch)} && "
                f"qemu-img convert -f qcow2 -O raw {shlex.quote(str(scratch))} "
                f"{shlex.quote(str(dest))}",
                outputs=[scratch, dest],
                memory=True,
                env=env,
            )
            q_download = boto3_case("boto3 download_file (qcow2, no convert)",
                                    images.qcow2.name, scratch)
            r_ours = ours(
                "rootdisk import s3:// (raw)", server.url(bucket, images.raw.name), s3_flags
            )
            r_boto = boto3_case("boto3 download_file (raw)", images.raw.name, dest)
            cases = [q_ours, q_boto, q_presigned, q_download, r_ours, r_boto]
            run_interleaved(cases, args.runs)
            print_cases(f"S3 (SeaweedFS on loopback): medians of {args.runs}", cases)
            print("\nratios (median / median):")
            print(
                ratio_line("rootdisk / boto3 download_file + convert (qcow2)", q_ours, q_boto, 0.8)
            )
            print(
                ratio_line(
                    "rootdisk presigned URL / boto3 + convert (qcow2)", q_presigned, q_boto, None
                )
            )
            print(ratio_line("boto3 download_file alone / + convert (qcow2: the floor)",
                             q_download, q_boto, None))
            print(ratio_line("rootdisk / boto3 download_file alone (qcow2)", q_ours, q_download,
                             None))
            print(ratio_line("rootdisk / boto3 download_file (raw)", r_ours, r_boto, 1.0))
            print(memory_line(q_ours))
            print(memory_line(r_ours))
            print(f"  (boto3 download_file + convert peak RSS: {peak_text(q_boto)})")
        finally:
            server.stop(grace=0.5)
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
