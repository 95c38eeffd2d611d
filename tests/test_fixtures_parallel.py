"""tests/fixtures/parallel.py on a small suite of its own, run by a real pytest with two
xdist workers as ``make test`` runs them: a module's tests all run on one worker (its
module-scoped fixture starts once), the modules of a group run on one worker, and the
measured longest modules come first, then e2e, then slow, then the rest."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def makefile_args() -> list[str]:
    """The arguments ``make test`` gives pytest with two workers (from ``make -n``)."""
    out = subprocess.run(["make", "-s", "-n", "pytest", "PYTEST_WORKERS=2"], cwd=ROOT,
                         capture_output=True, text=True, timeout=60, check=True).stdout
    line = next(x for x in out.splitlines() if x.startswith(".venv/bin/pytest "))
    return line.split()[1:]
RECORD = """
import os
from pathlib import Path

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

