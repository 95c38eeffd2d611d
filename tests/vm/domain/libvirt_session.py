"""A session-mode ``libvirtd`` run as uid 107 in the pod sandbox, for ``defineXML`` checks.

Why it exists: a rendered domain is only right if a real libvirt accepts it (the test:///
driver checks far less). The daemon runs as the launcher's would; the tests connect to
its socket from outside.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from tests.vm.launcher.sandbox import Pod


@contextlib.contextmanager
def session_libvirtd(timeout: float = 60) -> Iterator[str]:
    """Yields the URI of a fresh session libvirtd; stops it and removes its files after."""
    base = Path(tempfile.mkdtemp(prefix="lv-", dir="/tmp"))
    pod = Pod(base)
    home = pod.empty_dir("home", "/var/run/kubevirt-private")
    env = {
        "HOME": "/var/run/kubevirt-private",
        "PATH": "/usr/sbin:/usr/bin",
        "XDG_RUNTIME_DIR": "/var/run/kubevirt-private/run",
        "XDG_CONFIG_HOME": "/var/run/kubevirt-private/config",
        "XDG_CACHE_HOME": "/var/run/kubevirt-private/cache",
    }
    for sub in ("run", "config/libvirt", "cache"):
        d = home / sub
        d.mkdir(parents=True, mode=0o700)
        for p in (d, d.parent):
            os.chown(p, 107, 107)
    (home / "config" / "libvirt" / "qemu.conf").write_text('stdio_handler = "file"\n')
    sock = home / "run" / "libvirt" / "libvirt-sock"
    proc = subprocess.Popen(
        pod.argv(["libvirtd"], env=env),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + timeout
        while not sock.exists():
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("session libvirtd did not start")
            time.sleep(0.05)
        yield f"qemu+unix:///session?socket={sock}"
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
        shutil.rmtree(base, ignore_errors=True)
