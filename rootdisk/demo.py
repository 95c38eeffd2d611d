"""``make demo``: the main job, end to end, on this machine.

Until the VM path lands this is the import half: it builds a qcow2 image, serves it over
HTTP on loopback (a Range-capable server, as real image hosts are), imports it with
``rootdisk import`` — converted while it streams, no scratch space — and shows what came
out: format, sizes, allocation and checksum.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

MiB = 1024 * 1024


def build_image(workdir: Path) -> Path:
    """A 1 GiB disk with 96 MiB of data (random, so it does not compress away) at its
    start, middle and end, as a compressed qcow2."""
    raw = workdir / "golden.raw"
    with raw.open("wb") as f:
        f.truncate(1024 * MiB)
        for offset, size in ((0, 32 * MiB), (512 * MiB, 48 * MiB), (1008 * MiB, 16 * MiB)):
            f.seek(offset)
            f.write(os.urandom(size))
    qcow2 = workdir / "golden.qcow2"
    subprocess.run(["qemu-img", "convert", "-q", "-c", "-f", "raw", "-O", "qcow2",
                    str(raw), str(qcow2)], check=True)
    return qcow2


@contextmanager
def serve(directory: Path) -> Iterator[str]:
    import asyncio

    from aiohttp import web

    loop = asyncio.new_event_loop()
    app = web.Application()
    app.router.add_static("/", directory)
    runner = web.AppRunner(app, access_log=None)
    loop.run_until_complete(runner.setup())
    site = web.TCPSite(runner, "127.0.0.1", 0)
    loop.run_until_complete(site.start())
    port = runner.addresses[0][1]
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join()
        loop.run_until_complete(runner.cleanup())
        loop.close()


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(4 * MiB):
            digest.update(chunk)
    return digest.hexdigest()


def main() -> int:
    with tempfile.TemporaryDirectory(prefix="rootdisk-demo-") as tmp:
        workdir = Path(tmp)
        print("== building a 1 GiB qcow2 golden image")
        image = build_image(workdir)
        print(f"   {image.name}: {image.stat().st_size / MiB:.1f} MiB on the wire")
        (workdir / "www").mkdir()
        image.rename(workdir / "www" / image.name)
        volume = workdir / "volume"
        volume.mkdir()
        with serve(workdir / "www") as base:
            url = f"{base}/{image.name}"
            print(f"== rootdisk import {url} {volume / 'disk.img'} --size 2Gi")
            done = subprocess.run(
                [str(Path(sys.executable).with_name("rootdisk")), "import", url,
                 str(volume / "disk.img"), "--size", "2Gi", "--json"],
                capture_output=True, text=True, check=False)
        if done.returncode != 0:
            print(done.stdout, done.stderr, file=sys.stderr)
            return done.returncode
        result = json.loads(done.stdout)
        disk = volume / "disk.img"
        info = json.loads(subprocess.run(["qemu-img", "info", "--output=json", "-f", "raw",
                                          str(disk)], capture_output=True, text=True,
                                         check=True).stdout)
        print(f"   route:          {result['route']} ({result['why']})")
        print(f"   source format:  {result['format']}, virtual size "
              f"{result['virtualSize'] / MiB:.0f} MiB")
        print(f"   disk.img:       {info['format']}, {info['virtual-size'] / MiB:.0f} MiB "
              "(grown to the usable size of a 2Gi volume less 6% file system overhead)")
        print(f"   allocated:      {disk.stat().st_blocks * 512 / MiB:.0f} MiB (sparse)")
        print(f"   sha256:         {sha256(disk)}")
        print(f"   took:           {result['seconds']:.2f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
