"""kubectl for the tests: the ``kubectl`` apt package (v1.32), which ``make setup``
installs. Where it is missing the kubectl tests are skipped on a developer's machine but
fail in CI (``CI`` set), so that a missing install step cannot pass as green."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

KUBECTL = shutil.which("kubectl")
IN_CI = bool(os.environ.get("CI"))

needs_kubectl = pytest.mark.skipif(
    KUBECTL is None and not IN_CI,
    reason="kubectl is not installed here (`make setup` installs the kubectl apt package)")


def kubectl_path() -> str:
    """The kubectl binary; fails the test (CI) when it is not installed."""
    if KUBECTL is None:
        pytest.fail("kubectl is not installed: `make setup` installs the kubectl apt "
                    "package, and CI runs the kubectl tests")
    return KUBECTL


Run = Callable[..., "subprocess.CompletedProcess[str]"]


def runner(kubeconfig: Path, home: Path, *, timeout: float = 60) -> Run:
    """``run(*args)``: kubectl with ``kubeconfig``, its cache under ``home``, bounded."""
    env = {**os.environ, "KUBECONFIG": str(kubeconfig), "HOME": str(home)}

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([kubectl_path(), *args], env=env, capture_output=True,
                              text=True, timeout=timeout, check=False)
    return run
