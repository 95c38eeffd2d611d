"""tests/fixtures/parallel.py on a small suite of its own, run by a real pytest with the
xdist workers as ``make test`` runs them: a module's tests all run on one worker (its
module-scoped fixture starts once), the modules of a group run on one worker, and the
measured longest modules come first, then e2e, then slow, then the rest; a third worker
starts once the heavy modules are done."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def makefile_args(workers: int = 2) -> list[str]:
    """The arguments ``make test`` gives pytest with ``workers`` workers (``make -n``)."""
    out = subprocess.run(["make", "-s", "-n", "pytest", f"PYTEST_WORKERS={workers}"], cwd=ROOT,
                         capture_output=True, text=True, timeout=60, check=True).stdout
    line = next(x for x in out.splitlines() if x.startswith(".venv/bin/pytest "))
    return line.split()[1:]
RECORD = """
import os
from pathlib import Path

import pytest

import pytest


@pytest.fixture(scope="module")
def started(tmp_path_factory):
    out = Path(os.environ["RECORD_DIR"]) / "starts"
    with out.open("a") as f:
        f.write(__name__ + "\\n")


@pytest.mark.parametrize("n", range(8))
def test_n(n, started, request):
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    with (Path(os.environ["RECORD_DIR"]) / worker).open("a") as f:
        f.write(request.node.nodeid + "\\n")
"""
def suite(tmp_path: Path, groups: str = '{"test_b.py": "g", "test_d.py": "g"}') -> Path:
    root = tmp_path / "suite"
    root.mkdir()
    (root / "conftest.py").write_text(
        'pytest_plugins = ["tests.fixtures.parallel"]\n'
        "def pytest_configure(config):\n"
        "    from tests.fixtures import parallel\n"
        '    parallel.LONGEST_FIRST = ("test_b.py",)\n'
        f'    parallel.GROUPS = {groups}\n'
        '    config.addinivalue_line("markers", "e2e: e2e")\n'
        '    config.addinivalue_line("markers", "slow: slow")\n')
    (root / "test_a.py").write_text(RECORD)
    (root / "test_b.py").write_text(RECORD)
    (root / "test_c.py").write_text("import pytest\npytestmark = pytest.mark.slow\n" + RECORD)
    (root / "test_d.py").write_text("import pytest\npytestmark = pytest.mark.e2e\n" + RECORD)
    return root


def run(root: Path, record: Path, *args: str) -> subprocess.CompletedProcess[str]:
    record.mkdir()
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--rootdir",
         str(root), "-c", "/dev/null", *args, str(root)],
        capture_output=True, text=True, timeout=120, check=False, cwd=root,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT), "RECORD_DIR": str(record)})


def test_a_module_and_a_group_stay_on_one_worker(tmp_path: Path) -> None:
    root = suite(tmp_path)
    out = run(root, tmp_path / "rec", *makefile_args())
    assert out.returncode == 0, out.stdout + out.stderr
    ran = {w.name: w.read_text().split() for w in (tmp_path / "rec").iterdir()
           if w.name.startswith("gw")}
    assert len(ran) == 2 and all(ran.values()), ran  # both workers had work
    where: dict[str, set[str]] = {}
    for worker, ids in ran.items():
        for nodeid in ids:
            where.setdefault(nodeid.split("::")[0], set()).add(worker)
    assert set(where) == {"test_a.py", "test_b.py", "test_c.py", "test_d.py"}
    assert all(len(workers) == 1 for workers in where.values()), where
    # the first two modules in the order: each would start on a worker of its own,
    # but they are one group
    assert where["test_b.py"] == where["test_d.py"], where
    starts = (tmp_path / "rec" / "starts").read_text().split()
    assert sorted(starts) == ["test_a", "test_b", "test_c", "test_d"]  # once each


def collected_modules(out: subprocess.CompletedProcess[str]) -> list[str]:
    assert out.returncode == 0, out.stdout + out.stderr
    modules: list[str] = []
    for line in out.stdout.splitlines():
        module = line.split("::")[0]
        if "::" in line and (not modules or modules[-1] != module):
            modules.append(module)
    return modules


def test_the_order_is_measured_then_e2e_then_slow_then_the_rest(tmp_path: Path) -> None:
    root = suite(tmp_path)  # its conftest names test_b.py as measured
    out = run(root, tmp_path / "rec", "--collect-only")
    assert collected_modules(out) == ["test_b.py", "test_d.py", "test_c.py", "test_a.py"]


def test_a_group_starts_where_its_first_module_would_and_keeps_its_own_order(
        tmp_path: Path) -> None:
    # test_b.py is measured (first), test_d.py e2e, test_c.py slow: the group (c, then b,
    # as GROUPS lists them) starts first, in its own order; test_d.py and test_a.py follow
    root = suite(tmp_path, groups='{"test_c.py": "g", "test_b.py": "g"}')
    out = run(root, tmp_path / "rec", "--collect-only")
    assert collected_modules(out) == ["test_c.py", "test_b.py", "test_d.py", "test_a.py"]



TIMED = """
import os
import time
from pathlib import Path

import pytest

import pytest


@pytest.mark.parametrize("n", range(4))
def test_n(n, request):
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    start = time.time()
    time.sleep(float(os.environ.get("TEST_SECONDS", "0.3")))
    with (Path(os.environ["RECORD_DIR"]) / "times").open("a") as f:
        f.write(f"{worker} {request.node.nodeid} {start} {time.time()}\\n")
"""


def test_a_late_worker_starts_once_the_heavy_modules_are_done(tmp_path: Path) -> None:
    """With three workers, the third runs nothing while a test of a HEAVY module is left
    (here test_h1.py and test_h2.py, each on a worker of its own), then takes its share."""
    root = tmp_path / "suite"
    root.mkdir()
    (root / "conftest.py").write_text(
        'pytest_plugins = ["tests.fixtures.parallel"]\n'
        "def pytest_configure(config):\n"
        "    from tests.fixtures import parallel\n"
        '    parallel.LONGEST_FIRST = ("test_h1.py", "test_h2.py")\n'
        '    parallel.HEAVY = ("test_h1.py", "test_h2.py")\n'
        "    parallel.GROUPS = {}\n")
    for name in ("test_h1.py", "test_h2.py", *(f"test_l{i}.py" for i in range(8))):
        (root / name).write_text(TIMED)
    record = tmp_path / "rec"
    out = run(root, record, *makefile_args(3))
    assert out.returncode == 0, out.stdout + out.stderr
    rows = [line.split() for line in (record / "times").read_text().splitlines()]
    heavy_end = max(float(end) for _, nodeid, _, end in rows if "test_h" in nodeid)
    late = [float(start) for worker, _, start, _ in rows if worker == "gw2"]
    assert late, rows  # the third worker had work
    assert min(late) >= heavy_end, (min(late), heavy_end)


def test_heavy_names_the_modules_marked_cloud_guest(request: pytest.FixtureRequest) -> None:
    """Among the modules this session collected (all of them in `make test`)."""
    from tests.fixtures import parallel
    marked = {item.nodeid.split("::")[0] for item in request.session.items
              if item.get_closest_marker("cloud_guest") is not None}
    collected = {item.nodeid.split("::")[0] for item in request.session.items}
    assert marked == set(parallel.HEAVY) & collected, (marked, parallel.HEAVY)
