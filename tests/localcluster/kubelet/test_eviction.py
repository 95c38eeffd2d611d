"""Local storage limits, the pure part and the counts: which emptyDirs, containers and
pods are limited (upstream's PodLimits sum), the kubelet's messages, a usage walk that is
bounded and never leaves the directory, and a look at mounts that follows no symlink and
sees nothing of a process that is not the sandbox's."""

from __future__ import annotations

import os
import shutil
import tempfile
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


def _container(name: str, limit: str | None = None, **extra: object) -> dict:
    c: dict = {"name": name, **extra}
    if limit is not None:
        c["resources"] = {"limits": {"ephemeral-storage": limit, "memory": "1Gi"}}
    return c


def test_container_limits_are_the_regular_containers_with_one() -> None:
    pod = {"spec": {"initContainers": [_container("init", "1Gi")],
                    "containers": [_container("a", "4Mi"), _container("b"),
                                   _container("c", "0"), _container("d", "8000000")]}}
    assert eviction.container_limits(pod) == [
        eviction.Limit("a", "4Mi", 4 * MiB, eviction.CONTAINER),
        eviction.Limit("d", "8M", 8_000_000, eviction.CONTAINER)]
    assert not eviction.all_limits({"spec": {"containers": [_container("x")]}})


@pytest.mark.parametrize(("spec", "text", "total"), [
    # the sum over the containers that set one, in the first one's form
    ({"containers": [_container("a", "4Mi"), _container("b"), _container("c", "4Mi")]},
     "8Mi", 8 * MiB),
    ({"containers": [_container("a", "1G"), _container("b", "1Gi")]}, "2073741824",
     10**9 + (1 << 30)),
    # an init container runs alone: at least its own; a sidecar runs beside the others
    ({"initContainers": [_container("i", "16Mi")], "containers": [_container("a", "4Mi")]},
     "16Mi", 16 * MiB),
    ({"initContainers": [_container("s", "2Mi", restartPolicy="Always")],
      "containers": [_container("a", "4Mi")]}, "6Mi", 6 * MiB),
    # the pod's overhead on top
    ({"containers": [_container("a", "4Mi")], "overhead": {"ephemeral-storage": "1Mi"}},
     "5Mi", 5 * MiB),
])
def test_the_pod_limit_adds_up_as_upstreams_podlimits(spec: dict, text: str,
                                                      total: int) -> None:
    assert eviction.pod_limit({"spec": spec}) == eviction.Limit("", text, total, eviction.POD)


def test_no_container_limit_no_pod_limit() -> None:
    assert eviction.pod_limit({"spec": {"containers": [_container("a")],
                                        "overhead": {"ephemeral-storage": "1Mi"}}}) is None
    assert eviction.pod_limit({}) is None


def test_the_message_is_the_kubelets_and_only_over_the_limit() -> None:
    limit = eviction.Limit("scratch", "4Mi", 4 * MiB)
    assert eviction.over(limit, 4 * MiB) is None
    assert eviction.over(limit, 4 * MiB + 4096) == \
        'Usage of EmptyDir volume "scratch" exceeds the limit "4Mi". '
    box = eviction.Limit("box", "4Mi", 4 * MiB, eviction.CONTAINER)
    assert eviction.over(box, 4 * MiB) is None
    assert eviction.over(box, 4 * MiB + 1) == \
        'Container box exceeded its local ephemeral storage limit "4Mi". '
    pod = eviction.Limit("", "8Mi", 8 * MiB, eviction.POD)
    assert eviction.over(pod, 8 * MiB) is None
    assert eviction.over(pod, 8 * MiB + 1) == \
        "Pod ephemeral local storage usage exceeds the total limit of containers 8Mi. "


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


def _tmpfs_or_skip() -> str:
    if not os.path.isdir("/dev/shm") or os.statvfs("/dev/shm").f_blocks == 0:
        pytest.skip("no tmpfs at /dev/shm")
    return "/dev/shm"


def test_mounts_usage_counts_each_file_system_once_and_follows_no_symlink(
        tmp_path: Path) -> None:
    """Looked at through this very process (its parent is the test's parent): the
    directory counts its file system's blocks in use, a symlink to another file system
    (an absolute one would lead out of a sandbox) counts nothing, wherever it sits on
    the path, and a second path on the same file system is not counted twice."""
    shm = Path(tempfile.mkdtemp(dir=_tmpfs_or_skip()))
    try:
        (shm / "f").write_bytes(os.urandom(MiB))  # so that following the link would count
        _check_mounts_usage(tmp_path, shm)
    finally:
        shutil.rmtree(shm)


def _check_mounts_usage(tmp_path: Path, shm: Path) -> None:
    (tmp_path / "link").symlink_to(shm)
    (tmp_path / "real").mkdir()
    (tmp_path / "real" / "up").symlink_to(tmp_path)
    st = os.statvfs(str(tmp_path))
    mine = (st.f_blocks - st.f_bfree) * st.f_frsize
    pid, parent = os.getpid(), os.getppid()
    got = eviction.mounts_usage(pid, parent=parent, paths=[str(tmp_path)])
    assert abs(got - mine) < 64 * MiB  # the disk may change a little in between
    assert eviction.mounts_usage(pid, parent=parent, paths=[str(tmp_path / "link")]) == 0
    assert eviction.mounts_usage(pid, parent=parent,
                                 paths=[str(tmp_path / "real" / "up" / "real")]) == 0
    assert eviction.mounts_usage(pid, parent=parent, paths=[str(tmp_path / "gone")]) == 0
    twice = eviction.mounts_usage(pid, parent=parent,
                                  paths=[str(tmp_path), str(tmp_path / "real")])
    assert abs(twice - mine) < 64 * MiB


def test_mounts_usage_of_a_process_that_is_not_the_sandboxs_is_nothing(
        tmp_path: Path) -> None:
    """A pid whose parent is not the sandbox's bwrap (the sandbox ended and the pid was
    taken by another process) shows nothing, nor does a pid that does not exist."""
    assert eviction.mounts_usage(os.getpid(), parent=os.getpid(), paths=["/"]) == 0
    assert eviction.mounts_usage(2**22 + 7, parent=1, paths=["/"]) == 0
