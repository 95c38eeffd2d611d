"""The test HTTP(S) server answers like a real Range-capable server and each fault works."""

from __future__ import annotations

import http.client
import shutil
import ssl
import subprocess
import sys
import time
from pathlib import Path

import pytest
import requests

from tests.fixtures.httpserver import Faults, HttpServer, TokenBucket, parse_range
from tests.fixtures.images import ImageFactory
from tests.fixtures.tls import CA_BUNDLE_NAME

DATA = bytes(range(256)) * 4096  # 1 MiB, every offset distinguishable


@pytest.fixture
def served(http_server: HttpServer, tmp_path: Path) -> tuple[HttpServer, str]:
    path = tmp_path / "disk.img"
    path.write_bytes(DATA)
    return http_server, http_server.publish(path)


def _get(server: HttpServer, path: str, headers: dict[str, str] | None = None) -> bytes:
    """A raw GET that surfaces a cut body as http.client.IncompleteRead."""
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
    try:
        conn.request("GET", path, headers=headers or {})
        return conn.getresponse().read()
    finally:
        conn.close()


@pytest.mark.parametrize(
    ("header", "size", "expected"),
    [
        ("bytes=0-9", 100, (0, 10)),
        ("bytes=90-", 100, (90, 100)),
        ("bytes=-10", 100, (90, 100)),
        ("bytes=95-200", 100, (95, 100)),
        ("bytes=-500", 100, (0, 100)),
        ("bytes=5-2", 100, None),  # invalid: ignored, whole body
        ("items=0-1", 100, None),
        ("bytes=0-1,5-6", 100, None),  # multiple ranges: not supported, whole body
    ],
)
def test_parse_range(header: str, size: int, expected: tuple[int, int] | None) -> None:
    assert parse_range(header, size) == expected


@pytest.mark.parametrize("header", ["bytes=100-", "bytes=100-200", "bytes=-0"])
def test_parse_range_unsatisfiable(header: str) -> None:
    with pytest.raises(ValueError):
        parse_range(header, 100)


def test_token_bucket_rejects_bad_rate() -> None:
    with pytest.raises(ValueError, match="rate must be > 0"):
        TokenBucket(0)


@pytest.mark.parametrize("faults", [None, Faults(rate=10**9)], ids=["sendfile", "streaming"])
def test_head_get_and_ranges(served: tuple[HttpServer, str], faults: Faults | None) -> None:
    server, url = served
    if faults:
        server.set_faults("disk.img", faults)
    head = requests.head(url, timeout=10)
    assert head.status_code == 200
    assert head.headers["Content-Length"] == str(len(DATA))
    assert head.headers["Accept-Ranges"] == "bytes"
    assert requests.get(url, timeout=10).content == DATA
    part = requests.get(url, headers={"Range": "bytes=1000-1999"}, timeout=10)
    assert part.status_code == 206
    assert part.headers["Content-Range"] == f"bytes 1000-1999/{len(DATA)}"
    assert part.content == DATA[1000:2000]
    tail = requests.get(url, headers={"Range": "bytes=-16"}, timeout=10)
    assert (tail.status_code, tail.content) == (206, DATA[-16:])
    bad = requests.get(url, headers={"Range": f"bytes={len(DATA)}-"}, timeout=10)
    assert bad.status_code == 416
    assert bad.headers["Content-Range"] == f"bytes */{len(DATA)}"


def test_missing_file_is_404_and_root_cannot_be_escaped(http_server: HttpServer) -> None:
    assert requests.get(http_server.url_for("nope.img"), timeout=10).status_code == 404
    assert _get_status(http_server, "/../../etc/passwd") == 404
    assert _get_status(http_server, "/%2e%2e/%2e%2e/etc/passwd") == 404


def _get_status(server: HttpServer, path: str) -> int:
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
    try:
        conn.request("GET", path)
        resp = conn.getresponse()
        resp.read()
        return resp.status
    finally:
        conn.close()


def test_files_in_root_are_served(http_server: HttpServer) -> None:
    (http_server.root / "sub").mkdir()
    (http_server.root / "sub" / "a.img").write_bytes(b"abc")
    assert requests.get(http_server.url_for("sub/a.img"), timeout=10).content == b"abc"


def test_drop_after_n_bytes_for_first_k_requests(served: tuple[HttpServer, str]) -> None:
    server, _ = served
    server.set_faults("disk.img", Faults(drop_after=100_000, drop_times=2))
    for _ in range(2):
        with pytest.raises(http.client.IncompleteRead) as e:
            _get(server, "/disk.img")
        assert len(e.value.partial) == 100_000
    assert _get(server, "/disk.img") == DATA
    gets = server.requests_for("disk.img", "GET")
    assert [r.sent for r in gets] == [100_000, 100_000, len(DATA)]


def test_drop_counts_from_the_start_of_the_range(served: tuple[HttpServer, str]) -> None:
    server, _ = served
    server.set_faults("disk.img", Faults(drop_after=10, drop_times=None))
    with pytest.raises(http.client.IncompleteRead) as e:
        _get(server, "/disk.img", {"Range": "bytes=500-999"})
    assert e.value.partial == DATA[500:510]


def test_stall_goes_silent_then_drops(served: tuple[HttpServer, str]) -> None:
    server, _ = served
    server.set_faults("disk.img", Faults(stall_after=1000, stall_seconds=5))
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=0.5)
    try:
        conn.request("GET", "/disk.img")
        resp = conn.getresponse()
        assert resp.read(1000) == DATA[:1000]
        with pytest.raises(TimeoutError):
            resp.read(1)  # nothing more comes: a client read timeout must fire
    finally:
        conn.close()
    assert _get(server, "/disk.img") == DATA  # stall_times=1: the next GET is whole


def test_short_stall_then_drop(served: tuple[HttpServer, str]) -> None:
    server, _ = served
    server.set_faults("disk.img", Faults(stall_after=10, stall_seconds=0.2, stall_times=None))
    start = time.monotonic()
    with pytest.raises(http.client.IncompleteRead) as e:
        _get(server, "/disk.img")
    assert e.value.partial == DATA[:10]
    assert time.monotonic() - start >= 0.2


def test_status_k_times_with_retry_after(served: tuple[HttpServer, str]) -> None:
    server, url = served
    server.set_faults("disk.img", Faults(status=503, status_times=2, retry_after=3))
    for _ in range(2):
        resp = requests.get(url, timeout=10)
        assert resp.status_code == 503
        assert resp.headers["Retry-After"] == "3"
    assert requests.get(url, timeout=10).content == DATA
    assert [r.status for r in server.requests_for("disk.img")] == [503, 503, 200]


def test_permanent_status(served: tuple[HttpServer, str]) -> None:
    server, url = served
    server.set_faults("disk.img", Faults(status=404))
    assert [requests.get(url, timeout=10).status_code for _ in range(3)] == [404] * 3
    assert requests.head(url, timeout=10).status_code == 404
    server.clear_faults("disk.img")
    assert requests.get(url, timeout=10).status_code == 200


def test_basic_auth_and_required_header(served: tuple[HttpServer, str]) -> None:
    server, url = served
    server.set_faults(
        "disk.img",
        Faults(basic_auth=("alice", "s3cret"), required_headers=(("X-Token", "t0k"),)),
    )
    anonymous = requests.get(url, timeout=10)
    assert anonymous.status_code == 401
    assert anonymous.headers["WWW-Authenticate"].startswith("Basic")
    assert requests.get(url, auth=("alice", "wrong"), timeout=10).status_code == 401
    assert requests.get(url, auth=("alice", "s3cret"), timeout=10).status_code == 401
    ok = requests.get(url, auth=("alice", "s3cret"), headers={"X-Token": "t0k"}, timeout=10)
    assert (ok.status_code, ok.content) == (200, DATA)
    assert server.requests[-1].headers["x-token"] == "t0k"


def test_throttle_paces_the_body(served: tuple[HttpServer, str]) -> None:
    server, url = served
    server.set_faults("disk.img", Faults(rate=4 * len(DATA)))  # 1 MiB at 4 MiB/s: 0.25 s
    start = time.monotonic()
    assert requests.get(url, timeout=10).content == DATA
    elapsed = time.monotonic() - start
    assert 0.18 < elapsed < 0.6, elapsed


def test_no_range_support(served: tuple[HttpServer, str]) -> None:
    server, url = served
    server.set_faults("disk.img", Faults(no_range=True))
    assert "Accept-Ranges" not in requests.head(url, timeout=10).headers
    resp = requests.get(url, headers={"Range": "bytes=0-9"}, timeout=10)
    assert (resp.status_code, resp.content) == (200, DATA)
    assert "Content-Range" not in resp.headers


def test_no_content_length_is_chunked(served: tuple[HttpServer, str]) -> None:
    server, url = served
    server.set_faults("disk.img", Faults(no_length=True))
    resp = requests.get(url, timeout=10)
    assert resp.headers.get("Transfer-Encoding") == "chunked"
    assert "Content-Length" not in resp.headers
    assert resp.content == DATA
    assert "Content-Length" not in requests.head(url, timeout=10).headers


def test_head_not_allowed(served: tuple[HttpServer, str]) -> None:
    server, url = served
    server.set_faults("disk.img", Faults(no_head=True))
    assert requests.head(url, timeout=10).status_code == 405
    assert requests.get(url, headers={"Range": "bytes=0-3"}, timeout=10).content == DATA[:4]


def test_redirects(served: tuple[HttpServer, str], tmp_path: Path) -> None:
    server, url = served
    first = requests.get(server.redirect_url_for("disk.img"), allow_redirects=False, timeout=10)
    assert (first.status_code, first.headers["Location"]) == (302, url)
    assert requests.get(server.redirect_url_for("disk.img"), timeout=10).content == DATA

    other_root = tmp_path / "other"
    other_root.mkdir()
    (other_root / "disk.img").write_bytes(b"other server")
    with HttpServer(other_root) as other:
        server.set_redirect_target(other.url)
        resp = requests.get(server.redirect_url_for("disk.img"), timeout=10)
        assert resp.content == b"other server"
        assert [r.path for r in other.requests] == ["/disk.img"]
        server.set_faults("alias.img", Faults(redirect_to=other.url_for("disk.img")))
        assert requests.get(server.url_for("alias.img"), timeout=10).content == b"other server"


def test_requests_are_recorded(served: tuple[HttpServer, str]) -> None:
    server, url = served
    requests.head(url, headers={"User-Agent": "probe"}, timeout=10)
    requests.get(url, headers={"Range": "bytes=0-0"}, timeout=10)
    seen = server.requests_for("disk.img")
    assert [(r.method, r.range, r.status) for r in seen] == [
        ("HEAD", None, 200),
        ("GET", "bytes=0-0", 206),
    ]
    assert seen[0].headers["user-agent"] == "probe"
    server.clear_requests()
    assert server.requests == []


def test_https_with_the_cert_dir(https_server: HttpServer, tmp_path: Path) -> None:
    path = tmp_path / "disk.img"
    path.write_bytes(DATA)
    url = https_server.publish(path)
    assert url.startswith("https://127.0.0.1:")
    assert https_server.cert_dir is not None
    assert sorted(p.name for p in https_server.cert_dir.iterdir()) == [CA_BUNDLE_NAME]
    ca = https_server.cert_dir / CA_BUNDLE_NAME
    resp = requests.get(url, headers={"Range": "bytes=0-9"}, verify=str(ca), timeout=10)
    assert (resp.status_code, resp.content) == (206, DATA[:10])
    localhost = url.replace("127.0.0.1", "localhost")
    assert requests.head(localhost, verify=str(ca), timeout=10).status_code == 200
    with pytest.raises(requests.exceptions.SSLError):
        requests.get(url, timeout=10)  # system CAs do not know the test CA


def test_https_rejects_a_foreign_ca(https_server: HttpServer, tmp_path: Path) -> None:
    from tests.fixtures.tls import make_tls

    foreign = make_tls(tmp_path / "foreign", common_name="someone else")
    (https_server.root / "x").write_bytes(b"x")
    with pytest.raises(requests.exceptions.SSLError):
        requests.get(https_server.url_for("x"), verify=str(foreign.ca_cert), timeout=10)
    conn = http.client.HTTPSConnection(
        "127.0.0.1", https_server.port, context=foreign.client_context(), timeout=10
    )
    with pytest.raises(ssl.SSLCertVerificationError):
        conn.request("GET", "/x")
    conn.close()


@pytest.mark.skipif(shutil.which("nbdkit") is None, reason="nbdkit not installed")
def test_nbdkit_curl_and_qemu_img_read_through_the_server(
    http_server: HttpServer, images: ImageFactory
) -> None:
    """What the importer does: nbdkit's curl plugin over our Range answers, then qemu-img."""
    image = images.get("qcow2")
    url = http_server.publish(image.path)
    proc = subprocess.run(
        ["nbdkit", "-r", "-U", "-", "curl", f"url={url}",
         "--run", 'qemu-img info --output=json -f qcow2 "$uri"'],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert f'"virtual-size": {image.virtual_size}' in proc.stdout
    assert any(r.range for r in http_server.requests_for("qcow2", "GET"))


def test_server_as_a_process(tmp_path: Path) -> None:
    (tmp_path / "d.img").write_bytes(DATA)
    repo = Path(__file__).resolve().parent.parent
    argv = [sys.executable, "-m", "tests.fixtures.httpserver", str(tmp_path)]
    argv += ["--rate", "d.img=10000000"]
    with subprocess.Popen(
        argv, cwd=repo, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    ) as proc:
        assert proc.stdout is not None and proc.stdin is not None
        url = proc.stdout.readline().strip()
        assert url.startswith("http://127.0.0.1:")
        assert requests.get(f"{url}/d.img", timeout=10).content == DATA
        proc.stdin.close()  # the server stops when its stdin closes
        assert proc.wait(10) == 0


def test_server_process_rejects_a_bad_rate(tmp_path: Path) -> None:
    repo = Path(__file__).resolve().parent.parent
    proc = subprocess.run(
        [sys.executable, "-m", "tests.fixtures.httpserver", str(tmp_path), "--rate", "d.img=fast"],
        cwd=repo, capture_output=True, text=True, timeout=30, stdin=subprocess.DEVNULL, check=False,
    )  # fmt: skip
    assert proc.returncode == 2
    assert "--rate 'd.img=fast': expected NAME=BYTES_PER_S" in proc.stderr
