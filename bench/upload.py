"""Benchmark: uploading a qcow2 on `rootdisk up` against `curl -T` of the same file.

Why it exists: an upload should cost about what moving its bytes costs. Printed,
measured in one run, runs interleaved (the order alternates):

- ``rootdisk image-upload dv NAME --no-create`` of the benchmark qcow2 (1 GiB virtual,
  half data) into a DataVolume already UploadReady: the token request, the stream over
  TLS through the upload proxy to the upload server, qemu-img converting it as it
  arrives, and the wait until the DataVolume is Succeeded (rebind included);
- ``curl -T`` of the same file to a plain HTTP server on loopback that writes the body
  to a file (aiohttp, as the upload server; no TLS, no conversion);

then both again over a throttled link (``--rate``, default 1 Gbit/s: a relay paces the
bytes sent, to the plain server and to the upload proxy alike), where an upload meets a
network rather than two CPU cores (goal <= 1.1). On loopback the goal (<= 1.3) is against
``curl -T`` over HTTPS to the same kind of server (one TLS hop); the upload makes two, so
the same ``curl -T`` through ``socat``'s TLS relay (two hops, both in C: what the proxy's
hop costs at best on these cores) is printed too when socat is installed. For where the
time goes, the upload server alone (``python -m importer.uploadserver`` on loopback, the
same TLS with a client certificate, no proxy, no cluster, no rebind), fed by the same
``requests`` stream.

    python bench/upload.py [--size 1G] [--runs 3] [--rate 125000000]

Needs root (localcluster's loop devices and mounts), like `rootdisk up`.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime
import os
import shutil
import socket
import ssl
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from _common import DEFAULT_WORKDIR, human, parse_size, prepare_images, rootdisk_argv
from aiohttp import web

from kubeclient import resources
from localcluster.cluster import Cluster, Options
from pki import certs
from rootdisk.images import IMAGES
from tests.e2e import kit
from tests.fixtures.httpserver import TokenBucket
from tests.fixtures.ports import free_port

A = "cdi.kubevirt.io/"


class PlainServer:
    """PUT/POST body → a file, on loopback (the `curl -T` baseline): plain HTTP, or HTTPS
    with a throwaway CA when ``tls_dir`` is given (its ``ca.crt`` is what curl trusts)."""

    def __init__(self, directory: Path, tls_dir: Path | None = None) -> None:
        self.directory = directory
        self.tls_dir = tls_dir
        self.ssl_context: ssl.SSLContext | None = None
        if tls_dir is not None:
            now = datetime.datetime.now(datetime.UTC)
            ca = certs.make_ca(name="bench CA", now=now)
            leaf = certs.issue(ca=ca, common_name="127.0.0.1", ips=("127.0.0.1",), now=now)
            (tls_dir / "ca.crt").write_bytes(ca.cert_pem)
            self.ssl_context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
            self.ssl_context.load_cert_chain(*certs.write_pair(str(tls_dir), leaf.cert_pem,
                                                               leaf.key_pem))
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.ready = threading.Event()
        self.runner: web.AppRunner | None = None

    async def receive(self, request: web.Request) -> web.Response:
        fd = os.open(self.directory / "received", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            async for chunk in request.content.iter_chunked(1 << 20):
                os.write(fd, chunk)
            os.fsync(fd)
        finally:
            os.close(fd)
        return web.Response(text="ok\n")

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self.receive)
        self.runner = web.AppRunner(app, access_log=None)
        self.loop.run_until_complete(self.runner.setup())
        site = web.TCPSite(self.runner, "127.0.0.1", self.port, ssl_context=self.ssl_context)
        self.loop.run_until_complete(site.start())
        self.ready.set()
        self.loop.run_forever()

    def __enter__(self) -> PlainServer:
        self.thread.start()
        self.ready.wait(30)
        return self

    def __exit__(self, *_: object) -> None:
        async def stop() -> None:
            assert self.runner is not None
            await self.runner.cleanup()
        asyncio.run_coroutine_threadsafe(stop(), self.loop).result(30)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(30)


class ThrottledRelay:
    """A TCP relay on ``host`` to ``target``, the upload direction paced to ``rate``
    bytes/s (one link shared by every connection, the test image server's token bucket),
    the answers unpaced: a 1 Gbit/s link in front of a server, for curl and image-upload
    alike. Listening on the target's own address keeps a certificate for it valid."""

    def __init__(self, target: tuple[str, int], *, host: str, rate: int) -> None:
        self.target, self.host = target, host
        self.bucket = TokenBucket(rate)
        self.loop = asyncio.new_event_loop()
        self.ready = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.port = 0

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, *,
                    paced: bool) -> None:
        try:
            while data := await reader.read(256 * 1024):
                if paced:
                    await self.bucket.take(len(data))
                writer.write(data)
                await writer.drain()
        except OSError:
            pass
        finally:
            writer.close()

    async def _handle(self, reader: asyncio.StreamReader,
                      writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection(*self.target)
        await asyncio.gather(self._pipe(reader, up_writer, paced=True),
                             self._pipe(up_reader, writer, paced=False))

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        server = self.loop.run_until_complete(
            asyncio.start_server(self._handle, self.host, 0))
        self.port = server.sockets[0].getsockname()[1]
        self.ready.set()
        self.loop.run_forever()

    def __enter__(self) -> ThrottledRelay:
        self.thread.start()
        if not self.ready.wait(30):
            raise RuntimeError("the throttled relay did not start")
        return self

    def __exit__(self, *_: object) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(30)


class SocatRelay:
    """``socat``'s TLS relay in front of an HTTPS ``PlainServer``: it ends the client's TLS
    session and opens its own to the server (checking the server's certificate), as the
    upload proxy does, with the server's own certificate (good for 127.0.0.1) and 1 MiB
    buffers. The two-hop reference in C."""

    def __init__(self, server: PlainServer) -> None:
        assert server.tls_dir is not None
        self.tls_dir = server.tls_dir
        self.port = free_port()
        tls = self.tls_dir
        self.argv = ["socat", "-b", str(1 << 20),
                     f"OPENSSL-LISTEN:{self.port},bind=127.0.0.1,reuseaddr,fork,verify=0,"
                     f"cert={tls / 'tls.crt'},key={tls / 'tls.key'}",
                     f"OPENSSL:127.0.0.1:{server.port},cafile={tls / 'ca.crt'}"]
        self.process: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> SocatRelay:
        self.process = subprocess.Popen(self.argv)
        deadline = time.monotonic() + 30
        trust = ssl.create_default_context(cafile=str(self.tls_dir / "ca.crt"))
        while True:
            try:  # a whole handshake: socat logs a bare connect as an error
                with socket.create_connection(("127.0.0.1", self.port), timeout=1) as raw, \
                        trust.wrap_socket(raw, server_hostname="127.0.0.1"):
                    return self
            except OSError:
                if self.process.poll() is not None or time.monotonic() > deadline:
                    self.__exit__()
                    raise RuntimeError(f"socat did not listen: {self.argv}") from None
                time.sleep(0.05)

    def __exit__(self, *_: object) -> None:
        if self.process is not None:
            self.process.terminate()
            self.process.wait(30)


def proxy_endpoint(kube: object) -> tuple[str, int]:
    eps = kube.get(resources.ENDPOINTS, "cdi-uploadproxy", kit.OPERATOR_NS)  # type: ignore[attr-defined]
    subset = eps["subsets"][0]
    return subset["addresses"][0]["ip"], int(subset["ports"][0]["port"])


def run_curl(image: Path, server: PlainServer, *, port: int | None = None) -> float:
    tls = ["--cacert", str(server.tls_dir / "ca.crt")] if server.tls_dir else []
    scheme = "https" if server.tls_dir else "http"
    subprocess.run(["sync"], check=True)
    start = time.monotonic()
    subprocess.run(["curl", "-sS", "-f", "-o", "/dev/null", *tls, "-T", str(image),
                    f"{scheme}://127.0.0.1:{port or server.port}/upload"], check=True)
    took = time.monotonic() - start
    (server.directory / "received").unlink()
    return took


def run_upload(image: Path, kube: object, cluster: Cluster, ns: str, name: str,
               size: str, proxy_url: str | None = None) -> float:
    kube.create(kit.DVS, kit.datavolume(  # type: ignore[attr-defined]
        name, {"upload": {}}, size=size,
        annotations={A + "storage.bind.immediate.requested": ""}), ns)
    status = kit.wait_dv(kube, ns, name, ("UploadReady", "Failed"), timeout=600)  # type: ignore[arg-type]
    if status.get("phase") != "UploadReady":
        raise RuntimeError(f"DataVolume {name}: {status}")
    subprocess.run(["sync"], check=True)
    start = time.monotonic()
    via = ["--uploadproxy-url", proxy_url] if proxy_url else []
    done = subprocess.run([*rootdisk_argv(), "image-upload", "dv", name, "--no-create",
                           "--image-path", str(image), "-n", ns, "--kubeconfig",
                           cluster.kubeconfig, *via], stderr=subprocess.PIPE, text=True)
    took = time.monotonic() - start
    if done.returncode != 0:
        raise RuntimeError(f"image-upload failed: {done.stderr[-2000:]}")
    return took


def run_server_alone(image: Path, workdir: Path, size: str) -> float:
    from tests.importer.test_uploadserver import Server

    with tempfile.TemporaryDirectory(prefix="alone-", dir=workdir) as d:
        server = Server(Path(d), size=size)
        try:
            class Body:
                def __init__(self) -> None:
                    self.fh = image.open("rb")

                def __len__(self) -> int:
                    return image.stat().st_size

                def read(self, _n: int = -1) -> bytes:
                    return self.fh.read(1 << 20)

            subprocess.run(["sync"], check=True)
            start = time.monotonic()
            resp = server.post("/v1beta1/upload", Body())
            took = time.monotonic() - start
            if resp.status_code != 200 or server.wait() != 0:
                raise RuntimeError(f"upload server alone: {resp.status_code} {resp.text}")
            return took
        finally:
            server.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", default="1G", help="virtual size of the qcow2")
    parser.add_argument("--runs", type=int, default=3, help="runs per case (median)")
    parser.add_argument("--workdir", type=Path, default=DEFAULT_WORKDIR)
    parser.add_argument("--rate", type=int, default=125_000_000,
                        help="bytes/s of the throttled link (0: no throttled runs)")
    args = parser.parse_args()
    size = parse_size(args.size)
    images = prepare_images(args.workdir, size)
    claim_size = f"{(size * 5 // 4) // 2**20}Mi"
    with tempfile.TemporaryDirectory(prefix="upload-bench-", dir=args.workdir) as tmp:
        cluster = Cluster(str(Path(tmp) / "cluster"),
                          Options(images=IMAGES, manifests=kit.MANIFESTS))
        cluster.start()
        try:
            kube = kit.cluster_kube(cluster)
            kit.wait_operator_ready(kube)
            ns = kit.namespace(kube, "bench")
            sink, tls_sink = Path(tmp) / "sink", Path(tmp) / "tls-sink"
            sink.mkdir()
            tls_sink.mkdir()
            ups: list[float] = []
            curls: list[float] = []
            tls_curls: list[float] = []
            relayed: list[float] = []
            alone: list[float] = []
            with contextlib.ExitStack() as stack:
                server = stack.enter_context(PlainServer(sink))
                tls_server = stack.enter_context(PlainServer(tls_sink, tls_sink))
                relay = (stack.enter_context(SocatRelay(tls_server))
                         if shutil.which("socat") else None)
                for i in range(args.runs):
                    def up(i: int = i) -> None:
                        ups.append(run_upload(images.qcow2, kube, cluster, ns,
                                              f"up-{i}", claim_size))

                    def cu() -> None:
                        curls.append(run_curl(images.qcow2, server))
                        tls_curls.append(run_curl(images.qcow2, tls_server))
                        if relay is not None:
                            relayed.append(run_curl(images.qcow2, tls_server,
                                                    port=relay.port))

                    def al() -> None:
                        alone.append(run_server_alone(images.qcow2, Path(tmp), claim_size))
                    for fn in ((up, cu, al) if i % 2 == 0 else (al, cu, up)):
                        fn()
            q = images.qcow2.stat().st_size
            print(f"upload of a {human(size)} qcow2 ({human(q)} file), median of {args.runs}:")
            tls_med = statistics.median(tls_curls)
            print(runs_line("curl -T to a plain server", curls))
            print(runs_line("curl -T over HTTPS (one TLS hop)", tls_curls))
            if relayed:
                print(runs_line("curl -T over HTTPS via socat (two hops)", relayed,
                                tls_med, "one hop"))
            else:
                print("  (socat is not installed: no two-hop reference)")
            print(runs_line("upload server alone", alone, tls_med, "one hop"))
            print(runs_line("rootdisk image-upload", ups, tls_med,
                            "one hop; goal <= 1.3"))
            if relayed:
                print(f"  rootdisk image-upload / curl -T via socat (two hops):"
                      f" {statistics.median(ups) / statistics.median(relayed):.2f}")
            if args.rate:
                throttled(args, images.qcow2, kube, cluster, ns, claim_size, Path(tmp))
        finally:
            cluster.stop()


def throttled(args: argparse.Namespace, image: Path, kube: object, cluster: Cluster, ns: str,
              claim_size: str, tmp: Path) -> None:
    """The same two cases over a link of ``--rate`` bytes/s: a relay paces what curl and
    image-upload send (image-upload to the upload proxy, at the proxy's own address so
    its certificate is checked as usual)."""
    sink = tmp / "sink-throttled"
    sink.mkdir()
    ups: list[float] = []
    curls: list[float] = []
    proxy = proxy_endpoint(kube)
    with PlainServer(sink) as server, \
            ThrottledRelay(("127.0.0.1", server.port), host="127.0.0.1",
                           rate=args.rate) as curl_link, \
            ThrottledRelay(proxy, host=proxy[0], rate=args.rate) as proxy_link:
        url = f"https://{proxy[0]}:{proxy_link.port}"
        for i in range(args.runs):
            def up(i: int = i) -> None:
                ups.append(run_upload(image, kube, cluster, ns, f"slow-{i}", claim_size,
                                      proxy_url=url))

            def cu() -> None:
                curls.append(run_curl(image, server, port=curl_link.port))
            for fn in ((up, cu) if i % 2 == 0 else (cu, up)):
                fn()
    print(f"over a link of {args.rate * 8 / 1e9:g} Gbit/s (a relay paces the upload"
          f" direction), median of {args.runs}:")
    print(runs_line("curl -T to a plain server", curls))
    print(runs_line("rootdisk image-upload", ups, statistics.median(curls),
                    "curl -T; goal <= 1.1"))


def runs_line(label: str, runs: list[float], reference: float | None = None,
              against: str = "") -> str:
    """A case's median and runs, and its ratio to ``reference`` seconds when given."""
    med = statistics.median(runs)
    ratio = f"   ratio {med / reference:.2f} ({against})" if reference else ""
    return (f"  {label:<42} {med:7.2f} s   (runs {', '.join(f'{t:.2f}' for t in runs)})"
            f"{ratio}")


if __name__ == "__main__":
    sys.exit(main())
