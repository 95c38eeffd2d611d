"""The upload server against hostile or broken request bodies, as a real process on
loopback (real TLS, the proxy's client certificate, real qemu-img): each test sends what
an attacker (or a broken client) would, and looks at what happened to the answer, the
disk, the files around the volume and the server's readiness for the next upload.

Claims: a malformed multipart body is answered 400 naming it, and the processor it
started has ended before another upload is taken (that upload's disk is never wiped by
the first one's late failure); a form without its closing boundary is no upload; a
client that goes silent is ended after the read timeout and the server is free again; a
body with ``Content-Encoding: gzip`` is taken as sent (a gzip image), never inflated
under the sender's Content-Length; an archive whose symlink chain escapes the volume on
interpreters without the CVE-2025-4517 fix is refused naming the member, nothing is
created outside, and an archive with relative symlinks inside its own tree is extracted.
"""

from __future__ import annotations

import gzip
import io
import os
import socket
import ssl
import tarfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fixtures.images import ImageFactory, compare
from tests.importer.test_uploadserver import Server, serving

READ_TIMEOUT = 3


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Server]:
    yield from serving(tmp_path, read_timeout=READ_TIMEOUT)


def _tls(server: Server, timeout: float = 30) -> ssl.SSLSocket:
    ctx = ssl.create_default_context(cafile=str(server.tls / "ca.crt"))
    ctx.load_cert_chain(*server.client)
    raw = socket.create_connection(("127.0.0.1", server.port), timeout=timeout)
    return ctx.wrap_socket(raw, server_hostname="127.0.0.1")


def _answer(tls: ssl.SSLSocket) -> bytes:
    """Everything the server sends until it closes the connection."""
    data = b""
    while True:
        try:
            got = tls.recv(65536)
        except (ConnectionResetError, ssl.SSLError):
            return data
        if not got:
            return data
        data += got


def _wait_busy_released(server: Server, data: bytes) -> None:
    """A good upload, as soon as the server takes it (bounded): it must succeed."""
    deadline = time.monotonic() + 30
    resp = server.post("/v1beta1/upload", data)
    while resp.status_code == 503 and time.monotonic() < deadline:
        time.sleep(0.2)
        resp = server.post("/v1beta1/upload", data)
    assert resp.status_code == 200, resp.text


def test_a_malformed_form_is_refused_and_its_processor_ends_before_the_next_upload(
        server: Server, images: ImageFactory) -> None:
    """multipart/mixed whose part says Content-Length shorter than its data: aiohttp
    raises ValueError mid-body. Before, that skipped the abort: the server took a second
    upload at once, which succeeded, and the first processor's read timeout later wiped
    the second upload's disk."""
    data = b"\x01" * (3 * 1024 * 1024)
    body = (b'--B\r\nContent-Disposition: form-data; name="file"\r\n'
            + f"Content-Length: {len(data) - 10}\r\n\r\n".encode()
            + data + b"\r\n--B--\r\n")
    resp = server.post("/v1beta1/upload-form", body,
                       headers={"Content-Type": "multipart/mixed; boundary=B"})
    assert resp.status_code == 400, resp.text
    assert "multipart body is malformed" in resp.text
    good = images.get("raw")
    started = time.monotonic()
    _wait_busy_released(server, good.path.read_bytes())
    assert time.monotonic() - started < 20
    assert server.wait() == 0  # the process ends only once every processor thread has
    time.sleep(READ_TIMEOUT + 1)
    assert server.dest.exists(), "the second upload's disk was wiped"
    assert compare(good.expected, server.dest)
    assert server.termination_message()["reason"] == "Completed"


def test_a_form_without_its_closing_boundary_is_no_upload(
        server: Server, images: ImageFactory) -> None:
    """The file field ends at a boundary, but the form never closes (``--B--``): the body
    was cut short, not whole. Before, it was written and the server ended Completed."""
    data = b"\x01" * (1024 * 1024)
    body = b'--B\r\nContent-Disposition: form-data; name="file"\r\n\r\n' + data + b"\r\n--B\r\n"
    resp = server.post("/v1beta1/upload-form", body,
                       headers={"Content-Type": "multipart/form-data; boundary=B"})
    assert resp.status_code == 400, resp.text
    assert "closing boundary" in resp.text or "malformed" in resp.text
    assert server.proc.poll() is None
    assert not server.dest.exists()
    # a whole form still works
    good = images.get("raw")
    whole = (b'--B\r\nContent-Disposition: form-data; name="file"\r\n\r\n'
             + good.path.read_bytes() + b"\r\n--B--\r\n")
    resp = server.post("/v1beta1/upload-form", whole,
                       headers={"Content-Type": "multipart/form-data; boundary=B"})
    assert resp.status_code == 200, resp.text
    assert server.wait() == 0
    assert compare(good.expected, server.dest)


@pytest.mark.parametrize("name", ["raw", "qcow2"])  # piped, spooled
def test_a_silent_client_is_ended_after_the_read_timeout(
        server: Server, images: ImageFactory, name: str) -> None:
    """64 KiB and then silence, the connection left open: the server answers 400 and
    closes the connection once no byte came for its read timeout, and is free again.
    Before, the handler waited for ever and the server stayed busy (503)."""
    image = images.get(name)
    data = image.path.read_bytes()
    with _tls(server) as tls:
        tls.sendall(f"POST /v1beta1/upload HTTP/1.1\r\nHost: x\r\nContent-Length:"
                    f" {len(data)}\r\n\r\n".encode() + data[:65536])
        started = time.monotonic()
        answer = _answer(tls)  # the server closes the connection after its answer
        waited = time.monotonic() - started
    assert answer.startswith(b"HTTP/1.1 400"), answer
    assert b"no upload data for 3 s" in answer, answer
    assert READ_TIMEOUT - 0.5 < waited < READ_TIMEOUT + 10, waited
    started = time.monotonic()
    _wait_busy_released(server, data)
    assert time.monotonic() - started < 15
    assert server.wait() == 0
    assert compare(image.expected, server.dest)


def test_a_gzip_content_encoding_is_taken_as_sent(server: Server,
                                                  images: ImageFactory) -> None:
    """``Content-Encoding: gzip`` with the compressed length: the bytes are a gzip image
    (the processor unpacks it), not inflated by aiohttp under a Content-Length that no
    longer matches (before: 400, "upload ended after … bytes")."""
    image = images.get("raw")
    packed = gzip.compress(image.path.read_bytes(), compresslevel=1)
    resp = server.post("/v1beta1/upload", packed, headers={"Content-Encoding": "gzip"})
    assert resp.status_code == 200, resp.text
    assert server.wait() == 0
    assert compare(image.expected, server.dest)


def _tarpoc() -> bytes:
    """The reviewer's CVE-2025-4517 archive: symlinks chained until the resolved path
    passes PATH_MAX (where os.path.realpath stops resolving, so the data filter sees a
    path inside), then a link up through the chain and a file written through it."""
    buf = io.BytesIO()
    comp = "d" * 247
    steps = "abcdefghijklmnop"
    path = ""
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for i in steps:
            a = tarfile.TarInfo(os.path.join(path, comp))
            a.type = tarfile.DIRTYPE
            tar.addfile(a)
            b = tarfile.TarInfo(os.path.join(path, i))
            b.type = tarfile.SYMTYPE
            b.linkname = comp
            tar.addfile(b)
            path = os.path.join(path, comp)
        linkpath = os.path.join(*steps, "l" * 254)
        link = tarfile.TarInfo(linkpath)
        link.type = tarfile.SYMTYPE
        link.linkname = "../" * len(steps)
        tar.addfile(link)
        e = tarfile.TarInfo("escape")
        e.type = tarfile.SYMTYPE
        e.linkname = linkpath + "/../"
        tar.addfile(e)
        payload = b"written outside the volume\n"
        f = tarfile.TarInfo("escape/pwned")
        f.size = len(payload)
        tar.addfile(f, io.BytesIO(payload))
    return buf.getvalue()


def _legit_tar() -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        d = tarfile.TarInfo("./etc")
        d.type = tarfile.DIRTYPE
        tar.addfile(d)
        payload = b"hello\n"
        f = tarfile.TarInfo("./etc/motd.real")
        f.size = len(payload)
        tar.addfile(f, io.BytesIO(payload))
        for name, target, kind in (("etc/motd", "motd.real", tarfile.SYMTYPE),
                                   ("motd", "etc/motd.real", tarfile.SYMTYPE),
                                   ("etc/motd.copy", "etc/motd.real", tarfile.LNKTYPE)):
            m = tarfile.TarInfo(name)
            m.type = kind
            m.linkname = target
            tar.addfile(m)
    return buf.getvalue()


def test_an_archive_escaping_through_a_symlink_chain_is_refused(tmp_path: Path) -> None:
    server = Server(tmp_path, env={"IMPORTER_CONTENTTYPE": "archive",
                                   "IMPORTER_READ_TIMEOUT": str(READ_TIMEOUT)})
    volume = server.dest.parent
    try:
        resp = server.post("/v1beta1/upload-archive", _tarpoc())
        assert resp.status_code == 400, resp.text
        assert "InvalidImage" in resp.text and "tar member 'a/" in resp.text, resp.text
        assert "'..'" in resp.text
        assert not (tmp_path / "pwned").exists()
        assert [p for p in tmp_path.rglob("pwned")] == []
        assert list(volume.iterdir()) == []  # what was extracted before is gone
        assert server.proc.poll() is None  # ready for another upload
        resp = server.post("/v1beta1/upload-archive", _legit_tar())
        assert resp.status_code == 200, resp.text
        assert server.wait() == 0
    finally:
        server.stop()
    assert (volume / "etc" / "motd").is_symlink()
    assert os.readlink(volume / "etc" / "motd") == "motd.real"
    assert (volume / "etc" / "motd").read_bytes() == b"hello\n"
    assert (volume / "motd").read_bytes() == b"hello\n"
    assert (volume / "etc" / "motd.copy").stat().st_ino == \
        (volume / "etc" / "motd.real").stat().st_ino
