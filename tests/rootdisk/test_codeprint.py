"""The code fingerprint `rootdisk up` records and `make demo` compares (see
test_demo_start for the comparison): it changes with what runs in the cluster (a
package's source, a manifest) and with nothing else (tests, docs, byte-code caches)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from rootdisk import codeprint


def tree(root: Path) -> Path:
    for rel, text in {"importer/__init__.py": "", "importer/run.py": "x = 1\n",
                      "rootdisk/demo.py": "y = 2\n", "manifests/deploy/cdi.yaml": "a: 1\n",
                      "tests/test_x.py": "t = 0\n", "docs/a.md": "doc\n",
                      "importer/__pycache__/run.cpython-311.pyc": "cached"}.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


@pytest.mark.parametrize("change, counts", [
    ("importer/run.py", True), ("rootdisk/demo.py", True),
    ("manifests/deploy/cdi.yaml", True), ("vm/new.py", True),
    ("tests/test_x.py", False), ("docs/a.md", False),
    ("importer/__pycache__/run.cpython-311.pyc", False), ("importer/notes.txt", False),
])
def test_the_fingerprint_follows_what_runs_in_the_cluster(tmp_path: Path, change: str,
                                                          counts: bool) -> None:
    root = tree(tmp_path)
    before = codeprint.fingerprint(root)
    assert codeprint.fingerprint(root) == before  # the same tree, the same print
    path = root / change
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(path.read_text() + "# changed\n" if path.exists() else "new\n")
    assert (codeprint.fingerprint(root) != before) == counts


def test_a_file_moved_between_packages_changes_the_fingerprint(tmp_path: Path) -> None:
    root = tree(tmp_path)
    before = codeprint.fingerprint(root)
    (root / "vm").mkdir()
    (root / "importer/run.py").rename(root / "vm/run.py")
    assert codeprint.fingerprint(root) != before


def test_other_manifests_give_another_fingerprint(tmp_path: Path) -> None:
    root = tree(tmp_path / "checkout")
    other = tmp_path / "mine"
    (other / "deploy").mkdir(parents=True)
    (other / "deploy/cdi.yaml").write_text("a: 2\n")
    assert codeprint.fingerprint(root, other) != codeprint.fingerprint(root)


def test_record_and_read_back(tmp_path: Path) -> None:
    assert codeprint.recorded(str(tmp_path)) is None
    codeprint.record(str(tmp_path), "ab" * 32)
    assert codeprint.recorded(str(tmp_path)) == "ab" * 32
    mode = stat.S_IMODE(os.stat(tmp_path / codeprint.FILE).st_mode)
    assert mode == 0o600
    assert sorted(p.name for p in tmp_path.iterdir()) == [codeprint.FILE]  # no leftovers


def test_the_checkout_is_where_the_packages_are() -> None:
    root = codeprint.checkout()
    assert all((root / name / "__init__.py").is_file() for name in codeprint.PACKAGES)

