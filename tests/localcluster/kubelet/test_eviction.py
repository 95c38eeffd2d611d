"""emptyDir sizeLimit, the pure part and the walk: which volumes are limited, the
kubelet's message, and a usage count that is bounded and never leaves the directory."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from localcluster.kubelet import eviction

MiB = 1 << 20


def _pod(*volumes: dict) -> dict:
    return {"spec": {"volumes": list(volumes)}}


def test_only_emptydirs_with_a_size_limit_are_limited() -> None:
    got = eviction.limits(_pod(
        {"name": "a", "emptyDir": {"sizeLimit": "16Mi"}},
        {"name": "b", "emptyDir": {}},
        {"name": "c", "emptyDir": {"medium": "Memory", "sizeLimit": "1Gi"}},
        {"name": "d", "configMap": {"name": "x"}},
        {"name": "e", "emptyDir": {"sizeLimit": "not a size"}}))
    assert got == [eviction.Limit("a", "16Mi", 16 * MiB), eviction.Limit("c", "1Gi", 1 << 30)]
    assert eviction.limits({}) == []


def test_the_message_is_the_kubelets_and_only_over_the_limit() -> None:
    limit = eviction.Limit("scratch", "4Mi", 4 * MiB)
    assert eviction.over(limit, 4 * MiB) is None
    assert eviction.over(limit, 4 * MiB + 4096) == \
        'Usage of EmptyDir volume "scratch" exceeds the limit "4Mi". '


def test_usage_counts_nested_files_and_not_what_symlinks_point_to(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.write_bytes(os.urandom(8 * MiB))
    vol = tmp_path / "vol"
    (vol / "a" / "b").mkdir(parents=True)
    (vol / "a" / "b" / "f").write_bytes(os.urandom(2 * MiB))
    (vol / "g").write_bytes(os.urandom(MiB))
    (vol / "link").symlink_to(outside)
    (vol / "dirlink").symlink_to(tmp_path)
    used = eviction.usage(str(vol), stop_above=1 << 40)
    assert 3 * MiB <= used < 4 * MiB


def test_usage_stops_once_over_and_after_max_entries(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    vol = tmp_path / "vol"
    vol.mkdir()
    for i in range(50):
        (vol / f"f{i}").write_bytes(b"\x01" * 8192)
    assert eviction.usage(str(vol), stop_above=1 << 40) >= 50 * 8192
    assert eviction.usage(str(vol), stop_above=8192 * 3) <= 8192 * 5
    monkeypatch.setattr(eviction, "MAX_ENTRIES", 10)
    assert eviction.usage(str(vol), stop_above=1 << 40) <= 8192 * 11


def test_a_missing_directory_counts_nothing(tmp_path: Path) -> None:
    assert eviction.usage(str(tmp_path / "gone"), stop_above=0) == 0
