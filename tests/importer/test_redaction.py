"""No presigned signature or URL password in anything a failed import leaves behind:
the termination message, ``--json`` output and logs, exception text included."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.fixtures.httpserver import HttpServer
from tests.importer.test_entrypoints import ROOTDISK, free_port, pod_env, run_pod

SIGNATURE = "SIGxSECRETx4f1c2a"
PASSWORD = "PWxSECRETx9e8d"


def _urls(base: str) -> list[str]:
    return [
        f"{base}/bucket/disk.qcow2?X-Amz-Credential=AKIA%2F1&X-Amz-Signature={SIGNATURE}",
        f"{base.replace('://', f'://user:{PASSWORD}@')}/disk.qcow2",
    ]


def _assert_clean(*texts: str) -> None:
    for text in texts:
        assert SIGNATURE not in text and PASSWORD not in text, text


@pytest.mark.parametrize("case", ["refused", "not-found"])
def test_pod_failure_leaks_no_secret(http_server: HttpServer, tmp_path: Path,
                                     case: str) -> None:
    base = f"http://127.0.0.1:{free_port()}" if case == "refused" else http_server.url
    for url in _urls(base):
        env = pod_env(tmp_path, IMPORTER_ENDPOINT=url, IMPORTER_RETRY_ATTEMPTS="2")
        done = run_pod(env)
        assert done.returncode in (1, 2), done.stderr
        termination = (tmp_path / "termination-log").read_text()
        assert json.loads(termination)["reason"] in ("TransferFailed", "NotFound")
        _assert_clean(termination, done.stdout, done.stderr)
        assert "127.0.0.1" in termination  # redacted, not dropped: the host still shows


def test_cli_json_failure_leaks_no_secret(tmp_path: Path) -> None:
    for url in _urls(f"http://127.0.0.1:{free_port()}"):
        done = subprocess.run([str(ROOTDISK), "-v", "import", url, str(tmp_path / "d.img"),
                               "--json", "--retries", "2"],
                              capture_output=True, text=True, timeout=120, check=False)
        assert done.returncode == 1, done.stderr
        assert json.loads(done.stdout)["reason"] == "TransferFailed"
        assert "Max retries exceeded" in done.stdout  # the client's own text is kept...
        _assert_clean(done.stdout, done.stderr)  # ...without the query or the password


@pytest.mark.parametrize("bad", ["\r\n", "\n", "\t", "\x7f"])
def test_control_characters_in_the_url_are_invalid_config(tmp_path: Path, bad: str) -> None:
    url = f"http://127.0.0.1:{free_port()}/disk.img{bad}FORGED 2026 INFO importer: ok"
    done = run_pod(pod_env(tmp_path, IMPORTER_ENDPOINT=url))
    assert done.returncode == 2
    message = json.loads((tmp_path / "termination-log").read_text())
    assert message["reason"] == "InvalidConfig"
    assert "IMPORTER_ENDPOINT" in message["message"] and "control character" in message["message"]
    assert "FORGED" not in done.stderr
