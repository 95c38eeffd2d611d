"""tests/fixtures/prefetch.py in a small suite of its own, run by a real pytest: the
cloud guest's build starts once collection ends, only when a selected test is marked
``cloud_guest``, only in one process (the first xdist worker), never for a collection
only. (The build itself is replaced by one that leaves a file: what is checked is when
it starts; the real build is rootdisk.cloudguest's, tested in tests/rootdisk.)"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CONFTEST = '''
import os
import threading
from pathlib import Path

import pytest

pytest_plugins = ["tests.fixtures.prefetch"]


def pytest_configure(config):
    from tests.fixtures import prefetch
    config.addinivalue_line("markers", "cloud_guest: boots the cloud guest")
    prefetch.build = lambda: (Path(os.environ["RECORD_DIR"]) / "built").write_text("")


@pytest.hookimpl(trylast=True)
def pytest_collection_finish(session):
    for thread in threading.enumerate():
        if thread.name == "cloud-guest-prefetch":
            thread.join(30)
    (Path(os.environ["RECORD_DIR"]) / "collected").write_text("")
'''


def run(tmp_path: Path, *args: str, worker: str | None = None) -> bool:
    """Whether the build started in a run of the small suite with ``args``."""
    root, record = tmp_path / "suite", tmp_path / "rec"
    root.mkdir()
    record.mkdir()
    (root / "conftest.py").write_text(CONFTEST)
    (root / "test_guest.py").write_text(
        "import pytest\npytestmark = pytest.mark.cloud_guest\ndef test_boots(): pass\n")
    (root / "test_plain.py").write_text("def test_plain(): pass\n")
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT), "RECORD_DIR": str(record)}
    if worker:
        env["PYTEST_XDIST_WORKER"] = worker
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist",
         "--rootdir", str(root), "-c", "/dev/null", *args],
        capture_output=True, text=True, timeout=120, check=False, cwd=root, env=env)
    assert out.returncode == 0, out.stdout + out.stderr
    assert (record / "collected").exists(), out.stdout
    return (record / "built").exists()


@pytest.mark.parametrize(("args", "worker", "built"), [
    ((), None, True),  # a marked test selected: one process, the build starts
    ((), "gw0", True),  # the first xdist worker
    ((), "gw1", False),  # any other worker leaves it to gw0
    (("-m", "not cloud_guest"), None, False),  # the marked test deselected
    (("test_plain.py",), None, False),  # no marked test among those collected
    (("--collect-only",), None, False),  # nothing will run
])
def test_the_build_starts_only_where_a_selected_test_needs_it(
        tmp_path: Path, args: tuple[str, ...], worker: str | None, built: bool) -> None:
    assert run(tmp_path, *args, worker=worker) is built


def test_the_suite_loads_the_plugin(request: pytest.FixtureRequest) -> None:
    assert request.config.pluginmanager.has_plugin("tests.fixtures.prefetch")
