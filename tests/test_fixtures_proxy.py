"""The test forward proxy relays plain HTTP and tunnels HTTPS, and the traffic is visible."""

from __future__ import annotations

import base64
import os
import shutil
import subprocess
from pathlib import Path

import pytest
import requests

from tests.fixtures.httpserver import HttpServer
from tests.fixtures.images import ImageFactory
from tests.fixtures.proxy import ProxyServer

DATA = bytes(range(256)) * 1024


def _clean_env(**extra: str) -> dict[str, str]:
    """The environment without any inherited proxy settings, plus ``extra``."""
    env = {k: v for k, v in os.environ.items() if "proxy" not in k.lower()}
    env.update(extra)
    return env


@pytest.fixture
def served(http_server: HttpServer, tmp_path: Path) -> str:
    (tmp_path / "d.img").write_bytes(DATA)
    return http_server.publish(tmp_path / "d.img")


def test_plain_http_goes_through_the_proxy(
    http_proxy: ProxyServer, http_server: HttpServer, served: str
) -> None:
    proxies = {"http": http_proxy.url}
    part = requests.get(served, headers={"Range": "bytes=10-19"}, proxies=proxies, timeout=10)
    assert (part.status_code, part.content) == (206, DATA[10:20])
    assert requests.head(served, proxies=proxies, timeout=10).headers["Content-Length"] == str(
        len(DATA)
    )
    assert requests.get(served, proxies=proxies, timeout=10).content == DATA
    assert [(r.method, r.target, r.status) for r in http_proxy.requests] == [
        ("GET", served, 200),
        ("HEAD", served, 200),
        ("GET", served, 200),
    ]
    assert [r.range for r in http_server.requests] == ["bytes=10-19", None, None]


def test_https_is_tunnelled(
    http_proxy: ProxyServer, https_server: HttpServer, tmp_path: Path
) -> None:
    (tmp_path / "d.img").write_bytes(DATA)
    url = https_server.publish(tmp_path / "d.img")
    assert https_server.cert_dir is not None
    resp = requests.get(
        url,
        proxies={"https": http_proxy.url},
        verify=str(https_server.cert_dir / "ca.pem"),
        timeout=10,
    )
    assert resp.content == DATA
    assert [(r.method, r.target) for r in http_proxy.requests] == [
        ("CONNECT", f"127.0.0.1:{https_server.port}")
    ]


def test_proxy_auth(http_server: HttpServer, served: str) -> None:
    with ProxyServer(auth=("pxuser", "pxpass")) as proxy:
        denied = requests.get(served, proxies={"http": proxy.url}, timeout=10)
        assert denied.status_code == 407
        assert denied.headers["Proxy-Authenticate"].startswith("Basic")
        authed = proxy.url.replace("http://", "http://pxuser:pxpass@")
        assert requests.get(served, proxies={"http": authed}, timeout=10).content == DATA
        assert [r.status for r in proxy.requests] == [407, 200]
        expected = "Basic " + base64.b64encode(b"pxuser:pxpass").decode()
        assert proxy.requests[1].header("proxy-authorization") == expected
    assert "Proxy-Authorization" not in http_server.requests[-1].headers  # not forwarded


def test_bad_targets(http_proxy: ProxyServer) -> None:
    with pytest.raises(requests.exceptions.ProxyError):
        requests.get("https://127.0.0.1:1/x", proxies={"https": http_proxy.url}, timeout=10)
    statuses = [r.status for r in http_proxy.requests]
    assert statuses and set(statuses) == {502}


def test_curl_uses_http_proxy_from_the_environment(
    http_proxy: ProxyServer, served: str, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    env = _clean_env(http_proxy=http_proxy.url)
    subprocess.run(["curl", "-sSf", "-o", str(out), served], env=env, check=True, timeout=30)
    assert out.read_bytes() == DATA
    assert [r.target for r in http_proxy.requests] == [served]
    bypass = _clean_env(http_proxy=http_proxy.url, no_proxy="127.0.0.1")
    subprocess.run(["curl", "-sSf", "-o", str(out), served], env=bypass, check=True, timeout=30)
    assert len(http_proxy.requests) == 1  # no_proxy honoured: not proxied


@pytest.mark.skipif(shutil.which("nbdkit") is None, reason="nbdkit not installed")
def test_nbdkit_curl_honours_http_proxy(
    http_proxy: ProxyServer, http_server: HttpServer, images: ImageFactory
) -> None:
    image = images.get("qcow2")
    url = http_server.publish(image.path)
    proc = subprocess.run(
        ["nbdkit", "-r", "-U", "-", "curl", f"url={url}",
         "--run", 'qemu-img info --output=json -f qcow2 "$uri"'],
        capture_output=True, text=True, timeout=60, check=False,
        env=_clean_env(http_proxy=http_proxy.url),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert http_proxy.requests, "nbdkit's curl plugin did not use http_proxy"
    assert all(r.target == url for r in http_proxy.requests)
