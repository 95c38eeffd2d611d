"""The real qemu-guest-agent (Debian's ``qemu-ga``) listening on a unix socket on the
host, so the launcher's agent client is tested against the real protocol without a guest.

The agent then reports this host (its OS, hostname, filesystems, interfaces). Everything
that would act on the host is blocked (``--block-rpcs``): shutdown, suspend, fsfreeze,
setting time/passwords/keys/vcpus/memory, files and exec. A blocked command is listed by
guest-info as disabled, so this agent is one without ``guest-shutdown``.
"""

from __future__ import annotations

import contextlib
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

QEMU_GA = "/usr/sbin/qemu-ga"
BLOCKED = (
    "guest-shutdown", "guest-suspend-disk", "guest-suspend-ram", "guest-suspend-hybrid",
    "guest-fsfreeze-freeze", "guest-fsfreeze-freeze-list", "guest-fsfreeze-thaw",
    "guest-fstrim", "guest-set-time", "guest-set-user-password", "guest-set-vcpus",
    "guest-set-memory-blocks", "guest-file-open", "guest-file-close", "guest-file-read",
    "guest-file-write", "guest-file-seek", "guest-file-flush", "guest-exec",
    "guest-exec-status", "guest-ssh-add-authorized-keys", "guest-ssh-remove-authorized-keys",
)


@contextlib.contextmanager
def real_agent(unblock: tuple[str, ...] = ()) -> Iterator[Path]:
    """The socket path of a running qemu-ga (removed with its directory afterwards);
    ``unblock`` lifts some of the blocks (the probe tests run only true/false/sleep)."""
    if not shutil.which(QEMU_GA):
        pytest.fail("qemu-ga is not installed (Debian package qemu-guest-agent)")
    base = Path(tempfile.mkdtemp(prefix="qga-", dir="/tmp"))  # short: a unix socket path
    sock = base / "org.qemu.guest_agent.0"
    proc = subprocess.Popen(
        [QEMU_GA, "-m", "unix-listen", "-p", str(sock), "-f", str(base / "pid"),
         "-t", str(base), "-b", ",".join(b for b in BLOCKED if b not in unblock)],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 10
        while not sock.exists():
            if proc.poll() is not None or time.monotonic() > deadline:
                err = proc.stderr.read() if proc.stderr else b""
                pytest.fail(f"qemu-ga did not listen on {sock}: {err[-500:]!r}")
            time.sleep(0.02)
        yield sock
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
        if proc.stderr:
            proc.stderr.close()
        shutil.rmtree(base, ignore_errors=True)
