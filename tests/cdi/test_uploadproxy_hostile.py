"""The upload proxy against hostile clients: the proxy's aiohttp app on a loopback
socket, with the server options ``main`` uses, reading a real API server, forwarding to
a real upload server process (TLS with the client certificate from the Secret, the
server's certificate checked for ``cdi-upload-<PVC'>.<ns>.svc``).

Claims: uploads waiting for a claim that never becomes ready hold no thread (and only
so many wait at once), so every other tenant is answered at once; a client that goes
silent mid-body is ended (408) and the upload server is free for the next upload; an
upload server that never answers the TLS handshake is given up on (503) in bounded
time; a body with ``Content-Encoding: gzip`` is passed on byte for byte (a gzip image),
as upstream's ReverseProxy does, never inflated under its compressed Content-Length.
"""

from __future__ import annotations

import asyncio
import base64
import datetime as dt
import gzip
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
import requests
from aiohttp import web

from cdi import uploadproxy, uploadtoken
from kubeclient import Client
from kubeclient.resources import CONFIGMAPS, PVCS, SECRETS
from localcluster.looptransports import abort_open_transports
from pki import certs
from tests.cdi.conftest import cdi_client
from tests.fixtures.images import ImageFactory, compare
from tests.fixtures.ports import free_port
from vocab import cdi as api

NS = "rootdisk"
TENANT = "tenant"
PRIME = "prime-disk"
SERVICE = f"cdi-upload-{PRIME}"


class Cluster:
    """The API objects the proxy reads, and the token key."""

    def __init__(self, kube: Client, tmp: Path) -> None:
        self.kube = kube
        self.key, public = uploadtoken.make_key()
        kube.create(CONFIGMAPS, {"apiVersion": "v1", "kind": "ConfigMap",
                                 "metadata": {"name": uploadproxy.SIGNING_CONFIGMAP,
                                              "namespace": NS},
                                 "data": {"public.pem": public.decode()}})
        now = dt.datetime.now(dt.UTC)
        self.ca = certs.make_ca(name="upload CA", now=now)
        client = certs.issue(ca=self.ca, common_name="cdi-uploadproxy", now=now)
        kube.create(SECRETS, {"apiVersion": "v1", "kind": "Secret",
                              "metadata": {"name": uploadproxy.CLIENT_SECRET, "namespace": NS},
                              "data": {"ca.crt": _b64(self.ca.cert_pem),
                                       "tls.crt": _b64(client.cert_pem),
                                       "tls.key": _b64(client.key_pem)}})
        self.tmp = tmp

    def token(self, name: str, namespace: str = TENANT) -> str:
        return uploadtoken.issue(key_pem=self.key, namespace=namespace, name=name,
                                 now=int(time.time()))

    def claim(self, name: str, *, prime: str | None = None, ready: bool = False) -> None:
        anns = {api.PVC_PRIME: prime} if prime else {}
        if ready:
            anns[api.POD_READY] = "true"
        self.kube.create(PVCS, {
            "apiVersion": "v1", "kind": "PersistentVolumeClaim",
            "metadata": {"name": name, "namespace": TENANT, "annotations": anns},
            "spec": {"accessModes": ["ReadWriteOnce"],
                     "resources": {"requests": {"storage": "64Mi"}},
                     "dataSourceRef": {"apiGroup": api.GROUP, "kind": "VolumeUploadSource",
                                       "name": f"upload-{name}"}}})

    def endpoint(self, service: str, port: int) -> None:
        self.kube.create(uploadproxy.ENDPOINTS, {
            "apiVersion": "v1", "kind": "Endpoints",
            "metadata": {"name": service, "namespace": TENANT},
            "subsets": [{"addresses": [{"ip": "127.0.0.1"}], "ports": [{"port": port}]}]})


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


class UploadServer:
    """``python -m importer.uploadserver`` for PVC' ``PRIME``, its certificate for the
    Service's names."""

    def __init__(self, cluster: Cluster, tmp: Path, port: int) -> None:
        now = dt.datetime.now(dt.UTC)
        serving = certs.issue(ca=cluster.ca, common_name=SERVICE,
                              dns_names=certs.service_names(SERVICE, TENANT),
                              ips=("127.0.0.1",), now=now)
        tls = tmp / "server-tls"
        tls.mkdir()
        (tls / "tls.crt").write_bytes(serving.cert_pem)
        (tls / "tls.key").write_bytes(serving.key_pem)
        (tls / "ca.crt").write_bytes(cluster.ca.cert_pem)
        self.dest = tmp / "data" / "disk.img"
        self.dest.parent.mkdir()
        (tmp / "scratch").mkdir()
        env = {**os.environ, "UPLOAD_TLS_DIR": str(tls), "POD_IP": "127.0.0.1",
               "UPLOAD_PORT": str(port), "IMPORTER_DESTINATION": str(self.dest),
               "IMPORTER_IMAGE_SIZE": "64Mi", "FILESYSTEM_OVERHEAD": "0",
               "UPLOAD_SCRATCH_DIR": str(tmp / "scratch"),
               "IMPORTER_TERMINATION_LOG": str(tmp / "termination-log")}
        self.proc = subprocess.Popen([sys.executable, "-m", "importer.uploadserver"], env=env)
        deadline = time.monotonic() + 30
        while True:
            try:
                requests.get(f"https://127.0.0.1:{port}/healthz", verify=str(tls / "ca.crt"),
                             timeout=2)
                break
            except requests.ConnectionError:
                assert self.proc.poll() is None, "upload server exited"
                assert time.monotonic() < deadline, "upload server did not start"
                time.sleep(0.1)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(timeout=30)


class Proxy:
    """The proxy's app on its own event loop and thread, on a loopback port."""

    def __init__(self, kube: Client, **options: Any) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.app = uploadproxy.UploadProxy(kube, NS, **options).app()
        self.runner = web.AppRunner(self.app, access_log=None, **uploadproxy.SERVER_OPTIONS)
        self.port = free_port()

        async def start() -> None:
            await self.runner.setup()
            await web.TCPSite(self.runner, "127.0.0.1", self.port).start()

        asyncio.run_coroutine_threadsafe(start(), self.loop).result(10)
        self.url = f"http://127.0.0.1:{self.port}"

    def post(self, token: str, data: object = b"x", **kw: Any) -> requests.Response:
        headers = {"Authorization": f"Bearer {token}", **kw.pop("headers", {})}
        return requests.post(f"{self.url}/v1beta1/upload", data=data, headers=headers,
                             timeout=kw.pop("timeout", 60), **kw)

    def stop(self) -> None:
        async def stop() -> None:
            await self.runner.cleanup()
            await abort_open_transports()  # the loop is this proxy's alone

        asyncio.run_coroutine_threadsafe(stop(), self.loop).result(30)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    with cdi_client(tmp_path / "api", crds=(), served="/api/v1/namespaces",
                    namespaces=(NS, TENANT)) as kube:
        yield Cluster(kube, tmp_path)


@pytest.fixture
def server(cluster: Cluster, tmp_path: Path) -> Iterator[tuple[UploadServer, int]]:
    port = free_port()
    cluster.claim("disk", prime=PRIME, ready=True)
    cluster.endpoint(SERVICE, port)
    s = UploadServer(cluster, tmp_path, port)
    yield s, port
    s.stop()


def _timed(fn: Any, *args: Any, **kw: Any) -> tuple[requests.Response, float]:
    started = time.monotonic()
    resp = fn(*args, **kw)
    return resp, time.monotonic() - started


def test_uploads_waiting_for_a_claim_never_starve_the_others(
        cluster: Cluster, server: tuple[UploadServer, int], images: ImageFactory) -> None:
    """A tenant's claim that never gets ready (no PVC'), and 40 uploads into it at once:
    more than the event loop's thread pool (cpu + 4). Before, each held a thread for the
    whole wait, and every other upload queued behind them (a bad token waited seconds
    for its 401)."""
    cluster.claim("stuck")
    proxy = Proxy(cluster.kube, ready_wait=4.0, server_port=server[1])
    try:
        stuck = cluster.token("stuck")
        with ThreadPoolExecutor(40) as pool:
            waiting = [pool.submit(_timed, proxy.post, stuck) for _ in range(40)]
            time.sleep(0.5)
            bad, bad_took = _timed(proxy.post, "garbage.garbage.garbage")
            missing, missing_took = _timed(proxy.post, cluster.token("missing"))
            image = images.get("raw")
            good, good_took = _timed(proxy.post, cluster.token("disk"),
                                     image.path.read_bytes())
            answers = [f.result() for f in waiting]
        assert bad.status_code == 401 and bad_took < 1.5, (bad.status_code, bad_took)
        assert missing.status_code == 503 and "doesn't exist" in missing.text
        assert missing_took < 1.5, missing_took
        assert good.status_code == 200, good.text
        assert good_took < 15, good_took
        assert compare(image.expected, server[0].dest)
        assert all(r.status_code == 503 for r, _ in answers)
        waited = [t for r, t in answers if "too many uploads" not in r.text]
        at_once = [t for r, t in answers if "too many uploads" in r.text]
        # the ones let in waited for the claim (up to ready_wait), the others not at all
        assert 1 <= len(waited) <= uploadproxy.WAITING_PER_NAMESPACE, len(waited)
        assert all(3.0 < t < 10 for t in waited), waited
        assert all(t < 2.0 for t in at_once), at_once
    finally:
        proxy.stop()


def test_a_silent_client_is_ended_and_the_upload_server_is_free_again(
        cluster: Cluster, server: tuple[UploadServer, int], images: ImageFactory) -> None:
    """64 KiB then silence, the connection open. The upload server's own read timeout
    is its default 60 s; the proxy's idle limit (2 s here) ends it first: 408, the
    connection closed, the server free. Before, the proxy waited for ever."""
    proxy = Proxy(cluster.kube, body_idle=2.0, server_port=server[1])
    image = images.get("raw")
    data = image.path.read_bytes()
    try:
        with socket.create_connection(("127.0.0.1", proxy.port), timeout=20) as raw:
            raw.sendall(f"POST /v1beta1/upload HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer"
                        f" {cluster.token('disk')}\r\nContent-Length: {len(data)}\r\n\r\n"
                        .encode() + data[:65536])
            started = time.monotonic()
            answer = b""
            while chunk := raw.recv(65536):  # until the proxy closes the connection
                answer += chunk
            took = time.monotonic() - started
        assert answer.startswith(b"HTTP/1.1 408"), answer
        assert 1.5 < took < 10, took
        deadline = time.monotonic() + 30
        resp = proxy.post(cluster.token("disk"), data)
        while resp.status_code == 503 and time.monotonic() < deadline:  # winding down
            time.sleep(0.2)
            resp = proxy.post(cluster.token("disk"), data)
        assert resp.status_code == 200, resp.text
        assert time.monotonic() - started < 20
        assert compare(image.expected, server[0].dest)
    finally:
        proxy.stop()


def test_an_upload_server_that_never_answers_the_handshake_is_given_up_on(
        cluster: Cluster) -> None:
    """The claim's endpoint accepts TCP connections and says nothing (no TLS
    handshake): 503 after the connect timeout (2 s here). Before, there was none."""
    with socket.socket() as mute:
        mute.bind(("127.0.0.1", 0))
        mute.listen(16)
        port = mute.getsockname()[1]
        cluster.claim("mute", prime="prime-mute", ready=True)
        cluster.endpoint("cdi-upload-prime-mute", port)
        proxy = Proxy(cluster.kube, connect_timeout=2.0, pool_wait=4.0, server_port=port)
        try:
            resp, took = _timed(proxy.post, cluster.token("mute"), b"x" * 1024, timeout=20)
        finally:
            proxy.stop()
    assert resp.status_code == 503, resp.text
    assert "could not be reached in time" in resp.text
    assert 1.5 < took < 10, took


def test_a_gzip_content_encoding_is_passed_on_as_sent(
        cluster: Cluster, server: tuple[UploadServer, int], images: ImageFactory) -> None:
    """Before, the proxy's server inflated the body and forwarded the inflated bytes
    under the compressed Content-Length: a cut or hung upload."""
    proxy = Proxy(cluster.kube, server_port=server[1])
    image = images.get("raw")
    packed = gzip.compress(image.path.read_bytes(), compresslevel=1)
    try:
        resp = proxy.post(cluster.token("disk"), packed, headers={"Content-Encoding": "gzip"})
    finally:
        proxy.stop()
    assert resp.status_code == 200, resp.text
    assert server[0].proc.wait(timeout=60) == 0
    assert compare(image.expected, server[0].dest)
