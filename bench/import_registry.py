"""Benchmark: rootdisk's registry import against ``skopeo copy`` + extract + convert.

Why it exists: upstream CDI imports a containerDisk by copying the layer's ``disk/`` file
to scratch, then converting it; by hand one pulls the image with ``skopeo copy``,
unpacks the layer and converts. rootdisk streams the file out of the layer as it arrives
(raw straight into the disk; qcow2 through one scratch file). This prints the ratio,
side by side in one run (see bench/README.md).

    python bench/import_registry.py [--size 1G] [--runs 3]

Against a Distribution registry on loopback (TLS from a test CA, Basic auth), started
for the run, holding one-layer gzip containerDisk images:
- qcow2: ``rootdisk import docker://…`` vs ``skopeo copy`` to a dir, ``tar -x`` of the
  layer, ``qemu-img convert -O raw``;
- raw: ``rootdisk import docker://…`` vs ``skopeo copy`` + ``tar -x``.
"""

from __future__ import annotations

import argparse
import base64
import json
import shlex
import shutil
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

from tests.fixtures.registry import Pushed, RegistryServer, push_disk

GOAL = 0.8
"""Issue 28: the import ÷ skopeo copy + convert."""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", default="1G", help="virtual size of the image (default 1G)")
    parser.add_argument("--runs", type=int, default=3, help="runs per case (median; >= 3)")
    parser.add_argument("--workdir", type=Path, default=DEFAULT_WORKDIR)
    parser.add_argument("--data-ratio", type=float, default=0.5)
    args = parser.parse_args()
    require_tools("qemu-img", "skopeo", "docker-registry")
    size = parse_size(args.size)
    images = prepare_images(args.workdir, size, data_ratio=args.data_ratio)
    out = args.workdir / "out"
    out.mkdir(exist_ok=True)
    dest = out / "disk.img"

    with tempfile.TemporaryDirectory(dir=args.workdir, prefix="registry-") as tmp_text, \
            RegistryServer(Path(tmp_text) / "registry") as registry:
        tmp = Path(tmp_text)
        start = time.monotonic()
        pushed = {
            "qcow2": push_disk(registry, "bench/disk", "qcow2", images.qcow2, tmp / "w",
                               name="disk.qcow2"),
            "raw": push_disk(registry, "bench/disk", "raw", images.raw, tmp / "w",
                             name="disk.img"),
        }
        shutil.rmtree(tmp / "w")
        print(f"pushed {images.qcow2.name} ({human(images.qcow2.stat().st_size)}) and"
              f" {images.raw.name} ({human(size)}) as gzip layers in"
              f" {time.monotonic() - start:.1f} s; {args.runs} runs per case", flush=True)
        creds = registry.credentials
        assert creds is not None
        secret = tmp / "secret"
        secret.write_text(f"accessKeyId: {creds.username}\nsecretKey: {creds.password}\n")
        secret.chmod(0o600)
        certs = tmp / "certs"  # skopeo wants *.crt; rootdisk takes any file in the dir
        certs.mkdir()
        shutil.copy(str(registry.verify), certs / "ca.crt")
        authfile = tmp / "auth.json"
        token = base64.b64encode(f"{creds.username}:{creds.password}".encode()).decode()
        authfile.write_text(json.dumps({"auths": {registry.host: {"auth": token}}}))
        authfile.chmod(0o600)

        def ours(kind: str) -> Case:
            return Case(f"rootdisk import docker:// ({kind})",
                        [*rootdisk_argv(), "import", registry.url("bench/disk", kind),
                         str(dest), "--secret-file", str(secret), "--cert-dir", str(certs)],
                        outputs=[dest])

        def by_hand(kind: str, image: Pushed, convert: bool) -> Case:
            pulled = out / f"skopeo-{kind}"
            pulled.mkdir(exist_ok=True)
            unpacked = out / f"unpacked-{kind}"
            (unpacked / "disk").mkdir(parents=True, exist_ok=True)
            layer = pulled / image.layers[0].digest.split(":", 1)[1]
            name = "disk.qcow2" if convert else "disk.img"
            line = (f"skopeo copy --quiet --src-authfile {shlex.quote(str(authfile))}"
                    f" --src-cert-dir {shlex.quote(str(certs))}"
                    f" {shlex.quote(registry.url('bench/disk', kind))}"
                    f" dir:{shlex.quote(str(pulled))}"
                    f" && tar -xzf {shlex.quote(str(layer))} -C {shlex.quote(str(unpacked))}"
                    f" disk/{name}")
            extracted = unpacked / "disk" / name
            outputs = [layer, pulled / "manifest.json", pulled / "version", extracted]
            config = image.manifest.get("config", {}).get("digest", "sha256:x")
            outputs.append(pulled / config.split(":", 1)[1])
            if convert:
                line += (f" && qemu-img convert -f qcow2 -O raw {shlex.quote(str(extracted))}"
                         f" {shlex.quote(str(dest))}")
                outputs.append(dest)
                label = "skopeo copy; tar -x; qemu-img convert (qcow2)"
            else:
                label = "skopeo copy; tar -x (raw)"
            return Case(label, line, outputs=outputs)

        q_ours, q_hand = ours("qcow2"), by_hand("qcow2", pushed["qcow2"], convert=True)
        r_ours, r_hand = ours("raw"), by_hand("raw", pushed["raw"], convert=False)
        cases = [q_ours, q_hand, r_ours, r_hand]
        run_interleaved(cases, args.runs)
        print_cases(f"registry (Distribution on loopback, TLS + auth): medians of {args.runs}",
                    cases)
        print("\nratios (median / median):")
        print(ratio_line("rootdisk / skopeo copy + tar + convert (qcow2)", q_ours, q_hand, GOAL))
        print(ratio_line("rootdisk / skopeo copy + tar (raw)", r_ours, r_hand, GOAL))
        print(memory_line(q_ours))
        print(memory_line(r_ours))
        print(f"  (skopeo + tar + convert peak RSS: {peak_text(q_hand)})")


if __name__ == "__main__":
    main()
