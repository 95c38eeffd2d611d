"""Serving a remote image over NBD for qemu-img to read while it streams.

nbdkit's curl plugin (C) serves NBD; what it reads is always the importer's own loopback
``RangeProxy``, never the source's URL. The proxy reads with the importer's sources
(their retries, error reasons, and their check that every answer is the object the probe
saw: same validators, same size), ahead of qemu-img through a block cache, and it serves
the image's head (the bytes the importer sniffed and checked for backing files, data
files and external extents) from the probe's own copy. So whatever a server sends later,
qemu-img only ever sees the header the importer checked, and every byte comes from the
one object the probe pinned, or the import fails with ``SourceChanged``.

No credentials on any command line: the proxy's URL holds only a random token.
"""

from __future__ import annotations

import logging
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from importer import children
from importer.errors import ImporterError, TransferError
from importer.rangeproxy import RangeProxy
from importer.sources.base import Source

logger = logging.getLogger(__name__)
START_TIMEOUT = 15.0
_PROXY = ("http_proxy", "https_proxy", "all_proxy", "no_proxy")


@dataclass(frozen=True)
class Export:
    uri: str
    pid: int
    proxy: RangeProxy | None = None

    def failure(self) -> ImporterError | None:
        """The source's own error behind a failed read, where the proxy saw it."""
        return self.proxy.failure if self.proxy is not None else None


class _StartFailed(Exception):
    pass


@contextmanager
def export(source: Source, *, size: int, head: bytes, workdir: Path,
           on_fetch: Callable[[int], None] | None = None) -> Iterator[Export]:
    """An NBD export of the probed object: nbdkit curl on the importer's range endpoint,
    which serves ``head`` (the probe's bytes) as the object's first bytes."""
    fetch, close_sources = _fetcher(source, on_fetch)
    try:
        with RangeProxy(fetch, size=size, head=head) as proxy:
            argv = ["--filter=retry", "curl", f"url={proxy.url}", "timeout=300",
                    "retries=2", "retry-delay=1"]
            try:
                with _serve(argv, workdir, "proxy") as (uri, pid):
                    yield Export(uri, pid, proxy)
            except _StartFailed as err:
                raise ImporterError(f"nbdkit could not serve the image: {err}") from err
    finally:
        close_sources()


def _fetcher(source: Source, on_fetch: Callable[[int], None] | None = None,
             ) -> tuple[Callable[[int, int], bytes], Callable[[], None]]:
    """``read_range`` callable from any thread: each thread reads through its own fork of
    the probed source (the source itself where it is thread-safe)."""
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


def _log_tail(log: Path, size: int = 300) -> str:
    """The end of nbdkit's log (read from its end: the log may be large)."""
    with log.open("rb") as f:
        f.seek(max(0, log.stat().st_size - size))
        return f.read().decode(errors="replace").strip()


@contextmanager
def _serve(plugin_argv: list[str], workdir: Path, name: str) -> Iterator[tuple[str, int]]:
    """nbdkit serving on a unix socket: (its NBD URI, its pid)."""
    sock = workdir / f"nbd-{name}.sock"
    log_path = workdir / f"nbdkit-{name}.log"
    argv = ["nbdkit", "--exit-with-parent", "--foreground", "--readonly",
            "--unix", str(sock), *plugin_argv]
    # Its only URL is the proxy on loopback: a proxy from the environment would not reach it.
    env = {k: v for k, v in children.child_environment().items() if k.lower() not in _PROXY}
    with log_path.open("wb") as log:
        proc = children.spawn(argv, stdin=subprocess.DEVNULL, env=env,
                              stdout=log, stderr=subprocess.STDOUT)
    try:
        _wait_for(sock, proc, log_path)
        yield f"nbd+unix:///?socket={sock}", proc.pid
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
