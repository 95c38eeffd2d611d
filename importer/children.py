"""The importer's child processes (qemu-img, nbdkit, nbdinfo): started so that they can
neither outlive the importer nor make it hold their output.

- Each child runs under ``setpriv --pdeathsig KILL`` (the kernel kills it when the
  importer dies, SIGKILL included) in a process group of its own (so stopping it stops
  whatever it started, and a terminal's Ctrl-C reaches only the importer, which stops
  its children itself). No ``preexec_fn``: nothing runs between fork and exec.
- Every live child is registered; ``stop_all`` (the SIGTERM path) stops them all.
- ``run_bounded`` keeps at most a fixed number of bytes of a child's output: a corrupt
  image can make ``qemu-img check`` print hundreds of megabytes of errors, and the
  importer must not collect them. Past the limit the child is stopped.
"""

from __future__ import annotations

import contextlib
import logging
import os
import selectors
import signal
import subprocess
import threading
import time
from collections import deque
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import IO, Any

from vocab import podenv

logger = logging.getLogger(__name__)

PDEATHSIG = ("setpriv", "--pdeathsig", "KILL", "--")
STOP_GRACE = 5.0

_live: set[subprocess.Popen[bytes]] = set()
_lock = threading.Lock()


# The importer's own credentials, as upstream passes them: no child needs them (nbdkit
# gets headers from a 0600 file), and a child's environment is readable in /proc.
_SECRET_VARIABLES = (podenv.ACCESS_KEY_ID, podenv.SECRET_KEY, "AWS_ACCESS_KEY_ID",
                     "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN")
_SECRET_PREFIXES = (podenv.EXTRA_HEADER_PREFIX,)


def child_environment() -> dict[str, str]:
    """The importer's environment without its credentials."""
    return {k: v for k, v in os.environ.items()
            if k not in _SECRET_VARIABLES and not k.startswith(_SECRET_PREFIXES)}


def spawn(argv: Sequence[str], **kwargs: Any) -> subprocess.Popen[bytes]:
    """Start ``argv`` as a registered child in its own process group, with the
    importer's environment less its credentials."""
    kwargs.setdefault("env", child_environment())
    proc: subprocess.Popen[bytes] = subprocess.Popen(
        [*PDEATHSIG, *argv], process_group=0, **kwargs)
    with _lock:
        _live.add(proc)
    return proc


def stop(proc: subprocess.Popen[bytes], *, grace: float = STOP_GRACE) -> None:
    """Stop a child and its process group: SIGTERM, then SIGKILL after ``grace``."""
    try:
        if proc.poll() is None:
            _signal_group(proc, signal.SIGTERM)
            try:
                proc.wait(timeout=grace)
            except subprocess.TimeoutExpired:
                _signal_group(proc, signal.SIGKILL)
                proc.wait()
    finally:
        with _lock:
            _live.discard(proc)


def stop_all() -> None:
    """Stop every live child (on SIGTERM: before the importer exits)."""
    with _lock:
        procs = list(_live)
    for proc in procs:
        stop(proc, grace=1.0)


def live() -> list[int]:
    """Process ids of the registered children (for tests and logs)."""
    with _lock:
        return sorted(p.pid for p in _live)


@contextlib.contextmanager
def running(argv: Sequence[str], **kwargs: Any) -> Iterator[subprocess.Popen[bytes]]:
    """A child for the length of a ``with`` block, stopped however the block ends."""
    proc = spawn(argv, **kwargs)
    try:
        yield proc
    finally:
        for stream in (proc.stdout, proc.stderr, proc.stdin):
            if stream is not None:
                with contextlib.suppress(OSError):
                    stream.close()
        stop(proc)


def _signal_group(proc: subprocess.Popen[bytes], sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, sig)


@dataclass(frozen=True)
class Finished:
    returncode: int
    stdout: bytes
    """At most the stdout limit."""
    stderr_tail: bytes
    """The last bytes of stderr (the error message is at the end)."""
    overflow: str | None = None
    """"stdout" or "stderr" when that stream passed its limit and the child was stopped."""
    timed_out: bool = False


class _Tail:
    """The last ``size`` bytes written, and the count of all of them."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.parts: deque[bytes] = deque()
        self.kept = 0
        self.total = 0

    def add(self, data: bytes) -> None:
        self.parts.append(data)
        self.kept += len(data)
        self.total += len(data)
        while self.kept - len(self.parts[0]) >= self.size:
            self.kept -= len(self.parts.popleft())

    def value(self) -> bytes:
        return b"".join(self.parts)[-self.size:]


class TailReader:
    """The last bytes of a stream, read to its end on a thread of its own."""

    def __init__(self, stream: IO[bytes], size: int) -> None:
        self._tail = _Tail(size)
        self._stream = stream
        self._thread = threading.Thread(target=self._read, name="child-output", daemon=True)
        self._thread.start()

    def _read(self) -> None:
        with contextlib.suppress(OSError, ValueError):
            while data := os.read(self._stream.fileno(), 64 * 1024):
                self._tail.add(data)

    def result(self, timeout: float = 10.0) -> bytes:
        self._thread.join(timeout)
        return self._tail.value()


def drain_tail(stream: IO[bytes], size: int = 16 * 1024) -> TailReader:
    """Read ``stream`` to its end in the background, keeping only its last ``size``
    bytes (a child's stderr, whose message is at the end)."""
    return TailReader(stream, size)


def run_bounded(argv: Sequence[str], *, timeout: float, stdout_limit: int = 1 << 20,
                stderr_limit: int = 4 << 20, tail: int = 16 * 1024) -> Finished:
    """Run ``argv`` to its end, keeping at most ``stdout_limit`` bytes of its stdout and
    the last ``tail`` bytes of its stderr; a child that writes more than a limit, or runs
    past ``timeout``, is stopped (``Finished.overflow``/``timed_out`` say so)."""
    with running(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                 stderr=subprocess.PIPE) as proc:
        assert proc.stdout is not None and proc.stderr is not None
        out = bytearray()
        err = _Tail(tail)
        overflow: str | None = None
        deadline = time.monotonic() + timeout
        streams: dict[int, str] = {proc.stdout.fileno(): "stdout",
                                   proc.stderr.fileno(): "stderr"}
        with selectors.DefaultSelector() as selector:
            for fd in streams:
                selector.register(fd, selectors.EVENT_READ)
            while streams and overflow is None:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                for key, _ in selector.select(timeout=min(left, 1.0)):
                    fd = key.fd
                    data = os.read(fd, 64 * 1024)
                    name = streams[fd]
                    if not data:
                        selector.unregister(fd)
                        del streams[fd]
                    elif name == "stdout":
                        out += data
                        if len(out) > stdout_limit:
                            overflow = "stdout"
                    else:
                        err.add(data)
                        if err.total > stderr_limit:
                            overflow = "stderr"
        timed_out = bool(streams) and overflow is None
        if overflow is None and not timed_out:
            try:
                code = proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                timed_out = True
                code = -1
        else:
            code = -1
    return Finished(code, bytes(out[:stdout_limit]), err.value(), overflow, timed_out)
