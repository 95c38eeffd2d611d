"""The store holds Secrets: its database, WAL and SHM files are the owner's only."""

from __future__ import annotations

import logging
import os
import stat
from pathlib import Path

import pytest

from localcluster.apiserver.storage.store import Store


def mode(path: Path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


@pytest.fixture
def permissive_umask():
    old = os.umask(0o000)  # the worst case: nothing masked by the caller
    try:
        yield
    finally:
        os.umask(old)


def test_new_store_files_are_0600(tmp_path: Path, permissive_umask: None) -> None:
    db = tmp_path / "store.db"
    store = Store(db)
    try:
        store.put("secrets", "default", "s", {"metadata": {"name": "s"},
                                              "data": {"k": "c2VjcmV0"}}, previous=None)
        for path in (db, Path(f"{db}-wal"), Path(f"{db}-shm")):
            assert path.exists(), path
            assert mode(path) == 0o600, path
    finally:
        store.close()


def test_looser_files_are_tightened_with_a_warning(tmp_path: Path, caplog) -> None:
    db = tmp_path / "store.db"
    Store(db).close()
    for path in (db, Path(f"{db}-wal"), Path(f"{db}-shm")):
        path.touch()
        os.chmod(path, 0o644)
    with caplog.at_level(logging.WARNING, logger="localcluster.apiserver.storage.store"):
        Store(db).close()
    assert mode(db) == 0o600
    for suffix in ("-wal", "-shm"):  # SQLite may remove them at close; if kept, tight
        side = Path(f"{db}{suffix}")
        assert not side.exists() or mode(side) == 0o600
    warned = [r.getMessage() for r in caplog.records]
    assert any(m.startswith(f"{db} was mode 0644: tightened to 0600") for m in warned)
    assert any(f"{db}-wal was mode 0644" in m for m in warned)


def test_a_symlinked_database_is_refused(tmp_path: Path) -> None:
    target = tmp_path / "elsewhere"
    target.write_text("")
    os.chmod(target, 0o644)
    (tmp_path / "store.db").symlink_to(target)
    with pytest.raises(OSError):
        Store(tmp_path / "store.db")
    assert mode(target) == 0o644
