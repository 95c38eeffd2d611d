"""Serving a remote image over NBD (nbdkit + ``nbd_plugin``) for qemu-img to read.

The plugin runs in nbdkit's own Python, so it is given this project's and this
environment's import paths; the source's configuration travels in its environment.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import sysconfig
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from importer.config import ImporterConfig, source_env
from importer.errors import ImporterError, TransferError, from_reason

PLUGIN = Path(__file__).with_name("nbd_plugin.py")
PROJECT_ROOT = PLUGIN.parent.parent
START_TIMEOUT = 15.0


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
    sock = workdir / "nbd.sock"
    result = Export(f"nbd+unix:///?socket={sock}", workdir / "nbd-error.json",
                    workdir / "nbdkit.log")
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "PYTHONPATH": _python_path(),
        "ROOTDISK_NBD_SIZE": str(size),
        "ROOTDISK_NBD_ERRORS": str(result.errors),
        **{k: v for k, v in os.environ.items() if k.lower().endswith("_proxy")},
        **source_env(config),
    }
    argv = ["nbdkit", "--exit-with-parent", "--foreground", "--readonly",
            "--unix", str(sock), "--threads", "8", "python", str(PLUGIN)]
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
            raise ImporterError(f"nbdkit exited at start: {log.read_text()[-500:]}")
        if sock.exists():
            with socket.socket(socket.AF_UNIX) as probe:
                try:
                    probe.connect(str(sock))
                    return
                except OSError:
                    pass
        time.sleep(0.02)
    raise TransferError("nbdkit did not start serving in time")
