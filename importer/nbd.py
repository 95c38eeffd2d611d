"""Serving a remote image over NBD for qemu-img to read while it streams.

Served one of two ways:
- by nbdkit's curl plugin (C, libcurl) straight from the image's URL, for plain HTTP(S):
  headers, basic auth included, come from a 0600 file read by ``header-script`` (never
  argv); nbdkit's retry filter reconnects after drops;
- by a ``RangeProxy`` in the importer's own process (an NBD server on a unix socket in
  the import's private directory), where curl cannot read the source itself or one
  connection is too slow: S3 (boto3), URLs with secrets in their query or userinfo
  (presigned), servers that refuse HEAD, parallel ranges. It reads with the importer's
  sources, with their retries and error reasons, ahead of qemu-img through a block
  cache.

Either way the export is pinned to the object the probe saw:
- qemu-img sees the image's head (the bytes the importer sniffed and checked for backing
  files, data files and external extents) from the probe's own copy, never fetched
  again: the export is given to qemu-img under a small local qcow2 overlay whose first
  cluster holds that copy (``Export.image``, a ``json:`` node: the overlay, with the NBD
  export as its backing, named in the command, not in any header); every other read
  goes through to the export at the size qemu-img asked for;
- every answer is the probed object: the direct route sends the probe's validators as
  preconditions (``If-Match``, ``If-Unmodified-Since``: a server that honours them
  answers 412 once the object changed), and the processor checks the object again after
  the conversion and after any failure; the proxy's sources check every answer.
"""

from __future__ import annotations

import base64
import json
import logging
import os
import re
import shlex
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from importer import beside, children, heaps, plan, qemu_img
from importer.config import ImporterConfig
from importer.errors import ImporterError, TransferError
from importer.formats import HEAD_BYTES
from importer.sources.base import USER_AGENT, Probe, Source, Validators
from pki.bundle import dir_bundle
from sizes import MIB
from vocab import sources

if TYPE_CHECKING:
    from importer.rangeproxy import RangeProxy

logger = logging.getLogger(__name__)
START_TIMEOUT = 15.0
"""Seconds nbdkit has to listen on its socket once started."""
START_TIMEOUT_VARIABLE = "ROOTDISK_NBDKIT_START_TIMEOUT"
"""Seconds in place of ``START_TIMEOUT`` (read by :func:`_start_timeout` alone): set by
tests whose fake nbdkit never listens, so that they wait a second, not fifteen."""

SUN_PATH_MAX = 107
"""Bytes a UNIX socket path may have (``sun_path`` less its NUL): nbdkit refuses more."""
_SOCKET_ROOM = 48
"""What goes after the base directory: the private work directory and the socket's name."""


def workdir_parent(tmpdir: str | None = None) -> str | None:
    """Where an import's private work directory (nbdkit's socket) goes: the temporary
    directory ($TMPDIR), unless its path is so long that the socket's would pass
    ``sun_path``; then /tmp (the private directory made there is 0700 all the same)."""
    base = tmpdir if tmpdir is not None else tempfile.gettempdir()
    if len(os.fsencode(base)) + _SOCKET_ROOM <= SUN_PATH_MAX:
        return None
    return "/tmp"  # noqa: S108 - a 0700 directory of its own is made there

PIN_CLUSTER = HEAD_BYTES  # the overlay's cluster: exactly the probed head
_PROXY = ("http_proxy", "https_proxy", "all_proxy", "no_proxy")
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
    pid: int | None
    """nbdkit's; None where the importer serves the export itself (``proxy``)."""
    proxy: RangeProxy | None = None
    reads_log: Path | None = None
    """Direct route: nbdkit's log of the reads it served (what its curl plugin fetched)."""
    pinned: Path | None = None
    """The overlay holding the probe's copy of the head (see :func:`pinned_image`)."""

    @property
    def image(self) -> str:
        """What qemu-img opens: the export under its pinned head, else the export."""
        return pinned_image(self.pinned, self.uri) if self.pinned else self.uri

    def failure(self) -> ImporterError | None:
        """The source's own error behind a failed read, where the proxy saw it."""
        return self.proxy.failure if self.proxy is not None else None


def pinned_image(overlay: Path, uri: str) -> str:
    """A ``json:`` block node: the qcow2 ``overlay`` (its first cluster is the probe's
    head, nothing else is allocated) over the raw NBD export ``uri``; the backing is named
    here, by the importer, so no header decides it."""
    return "json:" + json.dumps({
        "driver": "qcow2", "file": {"driver": "file", "filename": str(overlay)},
        "backing": {"driver": "raw", "file": qemu_img.nbd_node(uri)}})


class _StartFailed(Exception):
    pass


class _StartTimedOut(TransferError):
    """nbdkit runs but did not listen in time: a transfer failure (retried)."""


@contextmanager
def export(source: Source, config: ImporterConfig, *, probe: Probe, workdir: Path,
           on_fetch: Callable[[int], None] | None = None) -> Iterator[Export]:
    """An NBD export of the probed object: nbdkit curl on its URL where it can, else the
    importer's own (``RangeProxy``). Either way its first bytes are ``probe.head``."""
    assert probe.size is not None
    size, head = probe.size, probe.head[:probe.size]
    # The head's overlay (two short qemu-img runs) is made while the export starts, on either
    # route: each waits on its own children, and the transfer starts that much sooner
    # (bench/import_http.py, bench/import_s3.py). Waited for even on a failure (not
    # beside.pool): it writes into ``workdir``, which is removed right after (a
    # SourceChanged from the first read raced it: ENOTEMPTY).
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="pin-head") as side:
        pinning = side.submit(_pin_head, head, size, workdir)
        direct = _direct_argv(config, workdir, probe.validators)
        parallel = False
        if direct is not None:
            one, two = _server_rates(source, size, on_fetch or (lambda _: None))
            parallel = plan.parallel_ranges(one=one, two=two)
            if parallel:
                assert two is not None
                logger.info("one connection reads %.1f MiB/s, two at once %.1f MiB/s: the"
                            " image is read as ranges side by side", one / MIB, two / MIB)
                direct = None
        if direct is not None:
            try:
                with _serve(direct, workdir, "direct") as (uri, log, pid):
                    _check_opens(uri, size, log)
                    yield Export(uri, pid, reads_log=workdir / READS_LOG,
                                 pinned=pinning.result())
                    return
            except _StartFailed as err:
                logger.info("nbdkit curl cannot open the URL (%s); serving it through the"
                            " importer", err)
        from importer import rangeproxy  # its NBD server: only this route needs it

        fetch, close_sources = _fetcher(source, on_fetch)
        shape = rangeproxy.MANY_SMALL if parallel else rangeproxy.FEW_LARGE
        try:
            with rangeproxy.RangeProxy(fetch, size=size, shape=shape,
                                       socket_path=workdir / "nbd-proxy.sock") as proxy:
                yield Export(proxy.uri, None, proxy, pinned=pinning.result())
        finally:
            close_sources()


def _pin_head(head: bytes, size: int, workdir: Path) -> Path:
    """A qcow2 overlay of ``size`` bytes whose first cluster holds ``head`` (the probe's
    copy, at most one cluster: ``formats.HEAD_BYTES``); its backing is named only when
    qemu-img opens it (:func:`pinned_image`)."""
    copy = workdir / "head"
    copy.touch(mode=0o600)
    copy.write_bytes(head[:PIN_CLUSTER])
    return qemu_img.head_overlay(workdir / "pinned-head.qcow2", size=size, head=copy,
                                 cluster=PIN_CLUSTER)


def _server_rates(source: Source, size: int,
                  counted: Callable[[int], None]) -> tuple[float, float | None]:
    """The bytes/s one connection reads from the middle of the image and, where that is
    slow (``plan.PARALLEL_BELOW``) and the image large, the bytes/s two connections read
    at once (see ``plan.parallel_ranges``).

    The first read is also a check: nbdkit's curl plugin takes a 206 at its word, the
    importer's own reader checks Content-Range, so one read away from byte 0 shows a
    server (or cache) that answers every range from the start before qemu-img reads
    through it. Every byte read is ``counted`` as fetched."""
    large = size >= 8 * plan.RATE_SAMPLE  # a small image is over before ranges could pay
    at = min(size // 2, max(0, size - 4096)) // 512 * 512
    length = min(plan.RATE_SAMPLE if large else 4096, size - at)
    started = time.monotonic()
    source.read_range(at, length)
    one = length / max(time.monotonic() - started, 1e-6)
    counted(length)
    if one >= plan.PARALLEL_BELOW or not large:
        return one, None
    heaps.hand_back_large_frees()  # the two reads below, and the blocks after them
    readers = [source.fork(), source.fork()]  # a connection each
    try:
        with beside.pool(2, "rate") as pair:
            started = time.monotonic()
            reads = [pair.submit(reader.read_range, offset, length) for reader, offset
                     in zip(readers, (at - length, at + length), strict=True)]
            for read in reads:
                read.result()
            two = 2 * length / max(time.monotonic() - started, 1e-6)
            counted(2 * length)
    finally:
        for reader in readers:
            if reader is not source:
                reader.close()
    return one, two


def _fetcher(source: Source, on_fetch: Callable[[int], None] | None = None,
             ) -> tuple[Callable[[int, int], bytes], Callable[[], None]]:
    """``read_range`` callable from any thread: each thread reads through its own fork of
    the probed source (the source itself where it is thread-safe), so every answer is
    checked against the probe's validators and size."""
    local = threading.local()
    forks: list[Source] = []
    lock = threading.Lock()

    def fetch(start: int, length: int) -> bytes:
        own: Source | None = getattr(local, "source", None)
        if own is None:
            own = local.source = source.fork()
            if own is not source:
                with lock:
                    forks.append(own)
        data = own.read_range(start, length)
        if on_fetch is not None:
            on_fetch(len(data))
        return data

    def close() -> None:
        for each in forks:
            each.close()

    return fetch, close


def _direct_argv(config: ImporterConfig, workdir: Path,
                 validators: Validators) -> list[str] | None:
    """nbdkit curl arguments for the URL itself, or None where it must not be on a
    command line (a query may hold a signature, userinfo a password) or is not HTTP.
    The probe's validators go with every request as preconditions."""
    if config.source != sources.HTTP:
        return None
    parts = urlsplit(config.endpoint)
    if parts.query or parts.username or parts.password:
        return None
    headers = [f"User-Agent: {USER_AGENT}"]
    if config.access_key_id or config.secret_key:
        token = f"{config.access_key_id or ''}:{config.secret_key or ''}".encode()
        headers.append(f"Authorization: Basic {base64.b64encode(token).decode()}")
    headers += [f"{name}: {value}" for name, value in config.extra_headers]
    if validators.etag is not None:
        headers.append(f"If-Match: {validators.etag}")
    if validators.last_modified is not None:
        headers.append(f"If-Unmodified-Since: {validators.last_modified}")
    if any("\r" in h or "\n" in h for h in headers):
        raise ImporterError("a header for the image's server holds a line break")
    header_file = workdir / "headers"
    header_file.touch(mode=0o600)
    header_file.write_text("\n".join(headers) + "\n")
    argv = ["--filter=log", "--filter=retry", "curl",
            f"logfile={workdir / READS_LOG}",
            f"url={config.endpoint}",
            f"header-script={_header_script(header_file)}",
            "protocols=http,https", "timeout=60",
            f"retries={config.retry_attempts - 1}",
            f"retry-delay={max(1, round(config.retry_delay))}"]  # whole seconds, at least 1
    if config.insecure_tls:
        argv.append("sslverify=false")
    elif config.cert_dir is not None:
        bundle = workdir / "ca-bundle.pem"
        with dir_bundle(config.cert_dir) as tmp:
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
def _serve(plugin_argv: list[str], workdir: Path, name: str) -> Iterator[tuple[str, Path, int]]:
    """nbdkit serving read-only on a unix socket in ``workdir`` (private to this import):
    (its NBD URI, its log file, its pid)."""
    sock = workdir / f"nbd-{name}.sock"
    log_path = workdir / f"nbdkit-{name}.log"
    argv = ["nbdkit", "--exit-with-parent", "--foreground", "--readonly",
            "--unix", str(sock), *plugin_argv]
    # Only the direct route reads a URL: it keeps the environment's proxies, as the
    # importer's own requests do; the arriving upload's plugin reads a local file.
    env = {k: v for k, v in children.child_environment().items()
           if name == "direct" or k.lower() not in _PROXY}
    with log_path.open("wb") as log:
        proc = children.spawn(argv, stdin=subprocess.DEVNULL, env=env,
                              stdout=log, stderr=subprocess.STDOUT)
    try:
        _wait_for(sock, proc, log_path)
        yield f"nbd+unix:///?socket={sock}", log_path, proc.pid
    finally:
        children.stop(proc, grace=10)


def _start_timeout() -> float:
    """``START_TIMEOUT``, or the seconds ``START_TIMEOUT_VARIABLE`` gives."""
    given = os.environ.get(START_TIMEOUT_VARIABLE)
    if given is None:
        return START_TIMEOUT
    try:
        seconds = float(given)
    except ValueError:
        seconds = 0.0
    if not 0 < seconds < float("inf"):
        logger.warning("%s=%r is not a number of seconds: %g s it is",
                       START_TIMEOUT_VARIABLE, given, START_TIMEOUT)
        return START_TIMEOUT
    return seconds


def _wait_for(sock: Path, proc: subprocess.Popen[bytes], log: Path) -> None:
    timeout = _start_timeout()
    deadline = time.monotonic() + timeout
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
        time.sleep(0.005)  # nbdkit is up in ~20 ms: a coarse poll would add half a step
    raise _StartTimedOut(f"nbdkit did not start serving in {timeout:g} s")
