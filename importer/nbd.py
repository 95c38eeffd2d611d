"""Serving a remote image over NBD for qemu-img to read while it streams.

Two backends, the fast one first:
- nbdkit's curl plugin (C, libcurl) for plain HTTP(S) URLs; headers, basic auth
  included, come from a 0600 file read by ``header-script`` (never argv); nbdkit's retry
  filter reconnects after drops. It needs the server to answer HEAD, so where nbdkit
  cannot open the URL (presigned URLs sign GET only) the importer falls back to
- ``nbd_plugin`` in nbdkit's Python: the importer's own sources (requests, boto3) doing
  ranged reads through a read-ahead block cache. Always used for S3 and for URLs that
  carry secrets in their query or userinfo. It is given this project's and this
  environment's import paths; the source's configuration travels in its environment.
"""

from __future__ import annotations

import base64
import json
import logging
import os
import shlex
import socket
import subprocess
import sys
import sysconfig
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from importer.config import ImporterConfig, SourceKind, source_env
from importer.errors import ImporterError, TransferError, from_reason
from importer.sources.http import USER_AGENT, ca_bundle

logger = logging.getLogger(__name__)
PLUGIN = Path(__file__).with_name("nbd_plugin.py")
PROJECT_ROOT = PLUGIN.parent.parent
START_TIMEOUT = 15.0
ERRORS_FILE = "nbd-error.json"


@dataclass(frozen=True)
class Export:
    uri: str
    errors: Path
    log: Path

    def failure(self) -> ImporterError | None:
        """What the plugin recorded, as the importer error it was."""
        try:
            data = json.loads(self.errors.read_text())
        except (FileNotFoundError, json.JSONDecodeError):
            return None
        return from_reason(str(data.get("reason")), str(data.get("message", "")))


def _python_path() -> str:
    paths = [str(PROJECT_ROOT), sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]]
    paths += [p for p in sys.path if p.endswith("site-packages")]
    return os.pathsep.join(dict.fromkeys(paths))


@contextmanager
def export(config: ImporterConfig, *, size: int, workdir: Path) -> Iterator[Export]:
    """An NBD export of the source, by the fastest backend that can open it."""
    curl = _curl_argv(config, workdir)
    if curl is not None:
        try:
            with _serve(curl, dict(os.environ), workdir, "curl") as result:
                _check_opens(result, size)
                yield result
                return
        except _StartFailed as err:
            logger.info("nbdkit curl cannot open the URL (%s); using the ranged-read plugin",
                        err)
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "PYTHONPATH": _python_path(),
        "ROOTDISK_NBD_SIZE": str(size),
        "ROOTDISK_NBD_ERRORS": str(workdir / ERRORS_FILE),
        # Blocks of megabytes come and go: keep glibc from parking them in per-thread
        # arenas (a fixed mmap threshold returns each freed block to the system).
        "MALLOC_ARENA_MAX": "2",
        "MALLOC_MMAP_THRESHOLD_": str(512 * 1024),
        **{k: v for k, v in os.environ.items() if k.lower().endswith("_proxy")},
        **source_env(config),
    }
    try:
        with _serve(["--threads", "4", "python", str(PLUGIN)], env, workdir, "python") as result:
            yield result
    except _StartFailed as err:
        raise ImporterError(f"nbdkit could not serve the image: {err}") from err


class _StartFailed(Exception):
    pass


def _check_opens(export: Export, size: int) -> None:
    """nbdkit curl opens the URL only when a client connects: connect once, and see that
    it serves the size the importer probed."""
    done = subprocess.run(["nbdinfo", "--size", export.uri], capture_output=True, text=True,
                          timeout=60, check=False)
    if done.returncode != 0:
        raise _StartFailed(done.stderr.strip()[-300:] or export.log.read_text()[-300:])
    if int(done.stdout.strip() or -1) != size:
        raise _StartFailed(f"served {done.stdout.strip()} bytes, expected {size}")


def _curl_argv(config: ImporterConfig, workdir: Path) -> list[str] | None:
    """nbdkit curl arguments, or None where the URL must not be on a command line."""
    if config.source is not SourceKind.HTTP:
        return None
    parts = urlsplit(config.endpoint)
    if parts.query or parts.username or parts.password:
        return None
    headers = [f"User-Agent: {USER_AGENT}"]
    if config.access_key_id or config.secret_key:
        token = f"{config.access_key_id or ''}:{config.secret_key or ''}".encode()
        headers.append(f"Authorization: Basic {base64.b64encode(token).decode()}")
    headers += [f"{name}: {value}" for name, value in config.extra_headers]
    header_file = workdir / "headers"
    header_file.touch(mode=0o600)
    header_file.write_text("\n".join(headers) + "\n")
    argv = ["--filter=retry", "curl", f"url={config.endpoint}",
            f"header-script=cat {shlex.quote(str(header_file))}",
            "protocols=http,https", "timeout=60",
            f"retries={config.retry_attempts - 1}",
            f"retry-delay={max(1, round(config.retry_delay))}"]  # whole seconds, at least 1
    if config.insecure_tls:
        argv.append("sslverify=false")
    elif config.cert_dir is not None:
        bundle = workdir / "ca-bundle.pem"
        with ca_bundle(config.cert_dir) as tmp:
            tmp.seek(0)
            bundle.write_bytes(tmp.read())
        argv.append(f"cainfo={bundle}")
    return argv


@contextmanager
def _serve(plugin_argv: list[str], env: dict[str, str], workdir: Path,
           name: str) -> Iterator[Export]:
    sock = workdir / f"nbd-{name}.sock"
    result = Export(f"nbd+unix:///?socket={sock}", workdir / ERRORS_FILE,
                    workdir / f"nbdkit-{name}.log")
    argv = ["nbdkit", "--exit-with-parent", "--foreground", "--readonly",
            "--unix", str(sock), *plugin_argv]
    with result.log.open("wb") as log:
        proc = subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        _wait_for(sock, proc, result.log)
        yield result
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _wait_for(sock: Path, proc: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise _StartFailed(log.read_text(errors="replace").strip()[-300:])
        if sock.exists():
            with socket.socket(socket.AF_UNIX) as probe:
                try:
                    probe.connect(str(sock))
                    return
                except OSError:
                    pass
        time.sleep(0.02)
    raise TransferError("nbdkit did not start serving in time")
