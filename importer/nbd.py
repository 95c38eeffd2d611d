"""Serving a remote image over NBD for qemu-img to read while it streams.

nbdkit's curl plugin (C, libcurl) does the serving, in one of two ways:
- straight from the image's URL, for plain HTTP(S): headers, basic auth included, come
  from a 0600 file read by ``header-script`` (never argv); nbdkit's retry filter
  reconnects after drops;
- through a ``RangeProxy`` in the importer's own process, where curl cannot read the
  source itself: S3 (boto3), URLs with secrets in their query or userinfo (presigned),
  servers that refuse HEAD. The proxy reads with the importer's sources, with their
  retries and error reasons, ahead of qemu-img through a block cache.
"""

from __future__ import annotations

import base64
import logging
import re
import shlex
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from importer import children
from importer.config import ImporterConfig, SourceKind
from importer.errors import ImporterError, TransferError
from importer.sources import open_source
from importer.sources.base import Source
from importer.sources.http import USER_AGENT, ca_bundle

if TYPE_CHECKING:
    from importer.rangeproxy import RangeProxy

logger = logging.getLogger(__name__)
START_TIMEOUT = 15.0
READS_LOG = "reads.log"
_READ = re.compile(rb" Read id=\d+ offset=0x[0-9a-f]+ count=0x([0-9a-f]+) \.\.\.$")


def read_counter(log: Path) -> Callable[[], int]:
    """The bytes nbdkit has served (and so its curl plugin fetched), from its log
    filter's file: each call reads only what was appended since the last."""
    total = 0
    position = 0
    pending = b""
    busy = threading.Lock()  # a SIGALRM tick may call in while the main thread does

    def counter() -> int:
        if not busy.acquire(blocking=False):
            return total
        try:
            return _advance()
        finally:
            busy.release()

    def _advance() -> int:
        nonlocal total, position, pending
        try:
            with log.open("rb") as f:
                f.seek(position)
                data = f.read(4 * 1024 * 1024)
        except OSError:
            return total
        position += len(data)
        *lines, pending = (pending + data).split(b"\n")
        pending = pending[-4096:]
        for line in lines:
            match = _READ.search(line)
            if match:
                total += int(match.group(1), 16)
        return total

    return counter


@dataclass(frozen=True)
class Export:
    uri: str
    pid: int
    proxy: RangeProxy | None = None
    reads_log: Path | None = None
    """Direct route: nbdkit's log of the reads it served (what its curl plugin fetched)."""

    def failure(self) -> ImporterError | None:
        """The source's own error behind a failed read, where the proxy saw it."""
        return self.proxy.failure if self.proxy is not None else None


class _StartFailed(Exception):
    pass


@contextmanager
def export(source: Source, config: ImporterConfig, *, size: int, workdir: Path,
           on_fetch: Callable[[int], None] | None = None) -> Iterator[Export]:
    """An NBD export of the source: curl on its URL where it can, else on a proxy."""
    direct = _direct_argv(config, workdir)
    if direct is not None:
        # nbdkit's curl plugin takes a 206 at its word; the importer's own reader checks
        # Content-Range. One read away from byte 0 shows a server (or cache) that answers
        # every range from the start before qemu-img reads through it.
        probe_at = min(size // 2, max(0, size - 4096)) // 512 * 512
        source.read_range(probe_at, min(4096, size - probe_at))
        try:
            with _serve(direct, workdir, "direct") as (uri, log, pid):
                _check_opens(uri, size, log)
                yield Export(uri, pid, reads_log=workdir / READS_LOG)
                return
        except _StartFailed as err:
            logger.info("nbdkit curl cannot open the URL (%s); serving it through the"
                        " importer", err)
    from importer.rangeproxy import RangeProxy  # its HTTP server: only this route needs it

    fetch, close_sources = _fetcher(source, config, on_fetch)
    try:
        with RangeProxy(fetch, size=size) as proxy:
            argv = ["--filter=retry", "curl", f"url={proxy.url}", "timeout=300",
                    "retries=2", "retry-delay=1"]
            try:
                with _serve(argv, workdir, "proxy") as (uri, _, pid):
                    yield Export(uri, pid, proxy)
            except _StartFailed as err:
                raise ImporterError(f"nbdkit could not serve the image: {err}") from err
    finally:
        close_sources()


def _fetcher(source: Source, config: ImporterConfig,
             on_fetch: Callable[[int], None] | None = None,
             ) -> tuple[Callable[[int, int], bytes], Callable[[], None]]:
    """``read_range`` callable from any thread: the source itself where it is thread-safe
    (a boto3 client is, and costs ~12 MiB), else one source per thread (requests
    sessions are not thread-safe)."""
    if getattr(source, "thread_safe", False):
        def fetch_shared(start: int, length: int) -> bytes:
            data = source.read_range(start, length)
            if on_fetch is not None:
                on_fetch(len(data))
            return data

        return fetch_shared, lambda: None
    local = threading.local()
    opened: list[Source] = []
    lock = threading.Lock()

    def fetch(start: int, length: int) -> bytes:
        own: Source | None = getattr(local, "source", None)
        if own is None:
            own = local.source = open_source(config)
            with lock:
                opened.append(own)
        data = own.read_range(start, length)
        if on_fetch is not None:
            on_fetch(len(data))
        return data

    def close() -> None:
        for each in opened:
            each.close()

    return fetch, close


def _direct_argv(config: ImporterConfig, workdir: Path) -> list[str] | None:
    """nbdkit curl arguments for the URL itself, or None where it must not be on a
    command line (a query may hold a signature, userinfo a password) or is not HTTP."""
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
    argv = ["--filter=log", "--filter=retry", "curl", f"logfile={workdir / READS_LOG}",
            f"url={config.endpoint}",
            f"header-script={_header_script(header_file)}",
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


def _header_script(header_file: Path) -> str:
    """The script that prints the headers. nbdkit sends a script's stderr to a new
    ``/tmp/errorsXXXXXX`` it never removes; the script removes its own (that file, found
    through its stderr, and only if named so)."""
    return (f"cat {shlex.quote(str(header_file))} && "
            'e=$(readlink /proc/$$/fd/2); case "$e" in /tmp/errors??????) rm -f -- "$e";; esac')


def _check_opens(uri: str, size: int, log: Path) -> None:
    """nbdkit curl opens the URL only when a client connects: connect once, and see that
    it serves the size the importer probed."""
    done = children.run_bounded(["nbdinfo", "--size", uri], timeout=60, stdout_limit=4096)
    stdout = done.stdout.decode(errors="replace").strip()
    if done.returncode != 0:
        stderr = done.stderr_tail.decode(errors="replace").strip()
        raise _StartFailed(stderr[-300:] or _log_tail(log))
    if not stdout.isdigit() or int(stdout) != size:
        raise _StartFailed(f"served {stdout[:40]!r} bytes, expected {size}")


def _log_tail(log: Path, size: int = 300) -> str:
    """The end of nbdkit's log (read from its end: the log may be large)."""
    with log.open("rb") as f:
        f.seek(max(0, log.stat().st_size - size))
        return f.read().decode(errors="replace").strip()


@contextmanager
def _serve(plugin_argv: list[str], workdir: Path,
           name: str) -> Iterator[tuple[str, Path, int]]:
    """nbdkit serving on a unix socket: (its NBD URI, its log file, its pid)."""
    sock = workdir / f"nbd-{name}.sock"
    log_path = workdir / f"nbdkit-{name}.log"
    argv = ["nbdkit", "--exit-with-parent", "--foreground", "--readonly",
            "--unix", str(sock), *plugin_argv]
    with log_path.open("wb") as log:
        proc = children.spawn(argv, stdin=subprocess.DEVNULL,
                              stdout=log, stderr=subprocess.STDOUT)
    try:
        _wait_for(sock, proc, log_path)
        yield f"nbd+unix:///?socket={sock}", log_path, proc.pid
    finally:
        children.stop(proc, grace=10)


def _wait_for(sock: Path, proc: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise _StartFailed(_log_tail(log))
        if sock.exists():
            with socket.socket(socket.AF_UNIX) as probe:
                try:
                    probe.connect(str(sock))
                    return
                except OSError:
                    pass
        time.sleep(0.02)
    raise TransferError("nbdkit did not start serving in time")
