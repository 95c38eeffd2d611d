"""The upload server (``python -m importer.uploadserver``) as a real process on loopback:
real TLS with client certificates, real qemu-img, the images of tests/fixtures.

Claims: a qcow2 and a raw upload end as the same disk, sparse; only the proxy's client
certificate is let in (none, or another name: 401, nothing written); a volume too small
is refused from the image header (TooSmall, nothing kept, the server ready for another
upload, as upstream's); a client that goes away mid-upload leaves no disk and the server
ready for another try.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import socket
import ssl
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from pki import certs
from tests.fixtures.images import ImageFactory, MiB, allocated_bytes, compare
from tests.fixtures.ports import free_port

CLIENT = "cdi-uploadproxy"


class Server:
    def __init__(self, tmp: Path, *, size: str = "64Mi",
                 env: dict[str, str] | None = None, cwd: Path | None = None) -> None:
        """``cwd``: the checkout whose server runs (bench/_ab_upload_server.py compares two)."""
        now = dt.datetime.now(dt.UTC)
        self.ca = certs.make_ca(name="upload test CA", now=now)
        serving = certs.issue(ca=self.ca, common_name="cdi-upload-x", ips=("127.0.0.1",),
                              now=now)
        self.tls = tmp / "tls"
        self.tls.mkdir()
        (self.tls / "tls.crt").write_bytes(serving.cert_pem)
        (self.tls / "tls.key").write_bytes(serving.key_pem)
        (self.tls / "ca.crt").write_bytes(self.ca.cert_pem)
        self.client = self._client_files(tmp, CLIENT)
        self.dest = tmp / "data" / "disk.img"
        self.dest.parent.mkdir()
        self.scratch = tmp / "scratch"
        self.scratch.mkdir()
        self.termination = tmp / "termination-log"
        self.port = free_port()
        self.url = f"https://127.0.0.1:{self.port}"
        env = {**os.environ, "UPLOAD_TLS_DIR": str(self.tls), "POD_IP": "127.0.0.1",
               "UPLOAD_PORT": str(self.port), "IMPORTER_DESTINATION": str(self.dest),
               "IMPORTER_IMAGE_SIZE": size, "FILESYSTEM_OVERHEAD": "0",
               "UPLOAD_SCRATCH_DIR": str(self.scratch),
               "IMPORTER_TERMINATION_LOG": str(self.termination), **(env or {})}
        self.proc = subprocess.Popen([sys.executable, "-m", "importer.uploadserver"], env=env,
                                     cwd=cwd)
        deadline = time.monotonic() + 30
        while True:
            try:
                requests.get(f"{self.url}/healthz", verify=str(self.tls / "ca.crt"), timeout=2)
                break
            except requests.ConnectionError:
                assert self.proc.poll() is None, "upload server exited"
                assert time.monotonic() < deadline, "upload server did not start"
                time.sleep(0.1)

    def raw_tls(self, *, timeout: float = 30) -> ssl.SSLSocket:
        """A TLS connection to the server with the proxy's client certificate, for a
        test that writes the request itself (a body cut off, a header that lies)."""
        ctx = ssl.create_default_context(cafile=str(self.tls / "ca.crt"))
        ctx.load_cert_chain(*self.client)
        raw = socket.create_connection(("127.0.0.1", self.port), timeout=timeout)
        return ctx.wrap_socket(raw, server_hostname="127.0.0.1")

    def _client_files(self, tmp: Path, name: str, ca: certs.KeyPair | None = None,
                      ) -> tuple[str, str]:
        pair = certs.issue(ca=ca or self.ca, common_name=name,
                           now=dt.datetime.now(dt.UTC))
        cert, key = tmp / f"{name}.crt", tmp / f"{name}.key"
        cert.write_bytes(pair.cert_pem)
        key.write_bytes(pair.key_pem)
        return str(cert), str(key)

    def post(self, path: str, data: object, *, cert: tuple[str, str] | None = None,
             **kw: object) -> requests.Response:
        return requests.post(f"{self.url}{path}", data=data, cert=cert or self.client,
                             verify=str(self.tls / "ca.crt"), timeout=120, **kw)  # type: ignore[arg-type]

    def wait(self) -> int:
        return self.proc.wait(timeout=60)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(timeout=30)

    def termination_message(self) -> dict[str, object]:
        return json.loads(self.termination.read_text())  # type: ignore[no-any-return]


def serving(tmp_path: Path, *, read_timeout: float | None = None) -> Iterator[Server]:
    """A started server (with the importer's read timeout when given), stopped after."""
    env = {"IMPORTER_READ_TIMEOUT": f"{read_timeout:g}"} if read_timeout is not None else None
    s = Server(tmp_path, env=env)
    yield s
    s.stop()


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Server]:
    yield from serving(tmp_path)


@pytest.mark.parametrize("name", ["qcow2", "raw", "raw.gz"])
def test_upload_converts_on_arrival(server: Server, images: ImageFactory, name: str) -> None:
    image = images.get(name)
    with image.path.open("rb") as fh:
        resp = server.post("/v1beta1/upload", fh)
    assert resp.status_code == 200, resp.text
    assert server.wait() == 0
    assert compare(image.expected, server.dest)
    assert allocated_bytes(server.dest) < server.dest.stat().st_size  # holes kept
    term = server.termination_message()
    assert term["reason"] == "Completed"
    assert term["format"] == ("qcow2" if name == "qcow2" else "raw")
    # qcow2: kept whole in scratch as it arrived, then converted from there; raw: piped
    assert term["route"] == ("scratch-convert" if name == "qcow2" else "stream")
    # the qcow2's scratch file: now gone
    assert list(server.scratch.iterdir()) == []


def test_async_upload_answers_then_writes(server: Server, images: ImageFactory) -> None:
    image = images.get("qcow2")
    resp = server.post("/v1beta1/upload-async", image.path.read_bytes())
    assert resp.status_code == 200, resp.text
    assert server.wait() == 0
    assert compare(image.expected, server.dest)  # the scratch file outlived the answer
    assert list(server.scratch.iterdir()) == []


def test_form_upload(server: Server, images: ImageFactory) -> None:
    image = images.get("qcow2")
    with image.path.open("rb") as fh:
        resp = requests.post(f"{server.url}/v1beta1/upload-form", files={"file": fh},
                             cert=server.client, verify=str(server.tls / "ca.crt"),
                             timeout=120)
    assert resp.status_code == 200, resp.text
    assert server.wait() == 0
    assert compare(image.expected, server.dest)


def test_only_the_proxy_client_certificate_is_let_in(server: Server, tmp_path: Path,
                                                     images: ImageFactory) -> None:
    data = images.get("raw").path.read_bytes()
    resp = requests.post(f"{server.url}/v1beta1/upload", data=data,
                         verify=str(server.tls / "ca.crt"), timeout=30)
    assert resp.status_code == 401
    other = server._client_files(tmp_path, "somebody-else")
    assert server.post("/v1beta1/upload", data, cert=other).status_code == 401
    foreign_ca = certs.make_ca(name="foreign", now=dt.datetime.now(dt.UTC))
    foreign = server._client_files(tmp_path, CLIENT, ca=foreign_ca)
    with pytest.raises(requests.exceptions.SSLError):
        server.post("/v1beta1/upload", data, cert=foreign)
    assert not server.dest.exists()
    assert server.proc.poll() is None  # still waiting for the real upload


def test_too_small_is_refused_from_the_header_and_another_upload_may_follow(
        tmp_path: Path, images: ImageFactory) -> None:
    """As upstream's upload server: a failed upload is answered, nothing of it is kept,
    and the server waits for the next one (the DataVolume stays UploadReady)."""
    server = Server(tmp_path, size="16Mi")
    try:
        image = images.oversized_qcow2(1 << 30)
        resp = server.post("/v1beta1/upload", image.path.read_bytes())
        assert resp.status_code == 400
        assert "TooSmall" in resp.text and "virtual size 1073741824" in resp.text
        assert not server.dest.exists()
        assert not list(server.scratch.iterdir())
        time.sleep(0.5)
        assert server.proc.poll() is None  # still there for the next try
        fitting = images.get("raw")
        assert fitting.path.stat().st_size <= 16 * 2**20
        resp = server.post("/v1beta1/upload", fitting.path.read_bytes())
        assert resp.status_code == 200, resp.text
        assert server.wait() == 0
        assert server.termination_message()["reason"] == "Completed"
        assert compare(fitting.expected, server.dest)
    finally:
        server.stop()


@pytest.mark.parametrize("name", ["raw", "qcow2"])  # piped, spooled
def test_client_gone_mid_upload_leaves_nothing_and_a_retry_works(
        server: Server, images: ImageFactory, name: str) -> None:
    image = images.get(name)
    data = image.path.read_bytes()
    with server.raw_tls() as tls:
        tls.sendall(b"POST /v1beta1/upload HTTP/1.1\r\nHost: x\r\n"
                    + f"Content-Length: {len(data)}\r\n\r\n".encode())
        tls.sendall(data[: len(data) // 2])
        time.sleep(0.5)
    deadline = time.monotonic() + 60
    # the partial disk wiped, the spooled part (qcow2) removed
    while (server.dest.exists() and server.dest.stat().st_blocks) or \
            list(server.scratch.iterdir()):
        assert time.monotonic() < deadline, "the partial upload was not cleaned up"
        time.sleep(0.1)
    assert server.proc.poll() is None
    resp = server.post("/v1beta1/upload", data)
    while resp.status_code == 503 and time.monotonic() < deadline:  # still winding down
        time.sleep(0.2)
        resp = server.post("/v1beta1/upload", data)
    assert resp.status_code == 200, resp.text
    assert server.wait() == 0
    assert compare(image.expected, server.dest)


def test_a_qcow2_larger_than_the_scratch_space_is_refused_unread(
        server: Server, images: ImageFactory) -> None:
    head = images.get("qcow2").path.read_bytes()[:65536]
    with server.raw_tls() as tls:
        tls.sendall(b"POST /v1beta1/upload HTTP/1.1\r\nHost: x\r\n"
                    b"Content-Length: 1000000000000000\r\n\r\n" + head)
        answer = tls.recv(4096)
    assert answer.startswith(b"HTTP/1.1 413"), answer
    assert list(server.scratch.iterdir()) == []
    assert server.proc.poll() is None


def test_a_qcow2_larger_than_the_claim_is_refused_unread_though_the_disk_has_room(
        server: Server, images: ImageFactory) -> None:
    """The scratch emptyDir's size limit is the claim's request (64Mi here). The node's
    disk has far more room, and nothing on localcluster enforces the limit: the server
    does, before it spools a byte."""
    free = os.statvfs(server.scratch).f_bavail * os.statvfs(server.scratch).f_frsize
    declared = 65 * MiB
    assert declared < free
    head = images.get("qcow2").path.read_bytes()[:65536]
    with server.raw_tls(timeout=10) as tls:
        tls.sendall(b"POST /v1beta1/upload HTTP/1.1\r\nHost: x\r\n"
                    b"Content-Length: %d\r\n\r\n" % declared + head)
        answer = tls.recv(4096)
    assert answer.startswith(b"HTTP/1.1 413"), answer
    assert f"({64 * MiB} bytes)".encode() in answer, answer
    assert list(server.scratch.iterdir()) == []
    assert server.proc.poll() is None


def _rfc3339(when: dt.datetime) -> str:
    return when.strftime("%Y-%m-%dT%H:%M:%SZ")


def test_an_idle_server_ends_at_its_deadline_for_a_new_certificate(tmp_path: Path) -> None:
    """Upstream's DEADLINE: no upload by then → exit 0 with deadlinePassed (the populator
    replaces the pod and its certificate), nothing written."""
    soon = (dt.datetime.now(dt.UTC) + dt.timedelta(seconds=3)).replace(microsecond=0)
    server = Server(tmp_path, env={"DEADLINE": _rfc3339(soon)})
    try:
        assert server.wait() == 0
    finally:
        server.stop()
    assert dt.datetime.now(dt.UTC) >= soon
    term = server.termination_message()
    assert term["reason"] == "DeadlinePassed" and term["deadlinePassed"] is True
    assert not server.dest.exists()


def test_an_upload_under_way_at_the_deadline_is_finished_first(
        tmp_path: Path, images: ImageFactory) -> None:
    image = images.get("qcow2")
    data = image.path.read_bytes()
    soon = (dt.datetime.now(dt.UTC) + dt.timedelta(seconds=4)).replace(microsecond=0)
    server = Server(tmp_path, env={"DEADLINE": _rfc3339(soon)})

    class Slow:  # a known length; half now, the rest after the deadline
        def __init__(self) -> None:
            self.parts = [data[: len(data) // 2], data[len(data) // 2:]]

        def __len__(self) -> int:
            return len(data)

        def read(self, _n: int = -1) -> bytes:
            if len(self.parts) == 1:
                while dt.datetime.now(dt.UTC) < soon + dt.timedelta(seconds=1):
                    time.sleep(0.1)
            return self.parts.pop(0) if self.parts else b""

    try:
        resp = server.post("/v1beta1/upload", Slow())
        assert resp.status_code == 200, resp.text
        assert server.wait() == 0
    finally:
        server.stop()
    term = server.termination_message()
    assert term["reason"] == "Completed" and "deadlinePassed" not in term
    assert compare(image.expected, server.dest)


def test_a_bad_deadline_is_a_configuration_error(tmp_path: Path) -> None:
    server = None
    with pytest.raises(AssertionError, match="exited"):
        server = Server(tmp_path, env={"DEADLINE": "tomorrow"})
    assert server is None
    term = json.loads((tmp_path / "termination-log").read_text())
    assert term["reason"] == "InvalidConfig" and "DEADLINE" in term["message"]
