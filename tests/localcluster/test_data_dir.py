"""The data directory holds Secrets: 0700, tightened at start if looser, store 0600."""

from __future__ import annotations

import logging
import os
import stat
from pathlib import Path

import pytest

from localcluster.cluster import secure_data_dir
from tests.localcluster.clusterkit import needs_root, running


def mode(path: Path | str) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def test_new_data_dir_is_0700(tmp_path: Path) -> None:
    old = os.umask(0)
    try:
        secure_data_dir(str(tmp_path / "a" / "data"))
    finally:
        os.umask(old)
    assert mode(tmp_path / "a" / "data") == 0o700


def test_looser_data_dir_is_tightened_with_a_warning(tmp_path: Path, caplog) -> None:
    d = tmp_path / "data"
    d.mkdir()
    os.chmod(d, 0o755)  # noqa: S103 - the loose mode under test
    with caplog.at_level(logging.WARNING, logger="localcluster.cluster"):
        secure_data_dir(str(d))
    assert mode(d) == 0o700
    assert f"data directory {d} was mode 0755: tightened to 0700" in caplog.text
    caplog.clear()
    secure_data_dir(str(d))  # already right: quiet
    assert "tightened" not in caplog.text


@needs_root
@pytest.mark.slow
def test_cluster_start_tightens_the_data_dir_and_keeps_the_store_private(
        tmp_path: Path, caplog) -> None:
    d = tmp_path / "data"
    d.mkdir()
    os.chmod(d, 0o755)  # noqa: S103 - the loose mode under test
    with caplog.at_level(logging.WARNING), running(str(d)) as cluster:
        assert cluster.kube is not None
        assert mode(d) == 0o700
        for name in ("store.db", "store.db-wal", "store.db-shm"):
            assert mode(d / name) == 0o600, name
    assert "tightened to 0700" in caplog.text
