"""Each cluster keeps its containers' cgroups under a parent of its own: one cluster's
start-up sweep of empty cgroups must not remove a cgroup another cluster has just made
for a container that has not joined it yet (seen as "cgroup join failed" when test
clusters ran side by side). Real cgroups; skipped where they cannot be made."""

from __future__ import annotations

import os
import uuid

import pytest

from localcluster.kubelet.cgroups import CgroupManager, Limits
from localcluster.kubelet.node import cgroup_prefix


def test_prefix_is_per_data_dir(tmp_path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    assert cgroup_prefix(str(a)) != cgroup_prefix(str(b))
    assert cgroup_prefix(str(a)) == cgroup_prefix(str(tmp_path / "x" / ".." / "a"))
    assert cgroup_prefix(str(a)).startswith("localcluster-")


def test_one_clusters_sweep_leaves_anothers_cgroups() -> None:
    tag = uuid.uuid4().hex[:8]
    mine = CgroupManager(prefix=f"localcluster-test-{tag}-a")
    theirs = CgroupManager(prefix=f"localcluster-test-{tag}-b")
    if mine.version == 0:
        pytest.skip("no writable cgroup hierarchy here")
    made = theirs.create("pod-c", Limits(memory=64 * 2**20))
    assert made is not None
    try:
        mine.cleanup(remove_parent=True)  # another cluster starting up, or stopping
        assert all(os.path.isdir(d) for d in made.dirs)
    finally:
        theirs.cleanup(remove_parent=True)
    assert not any(os.path.exists(d) for d in made.dirs)
    assert not any(os.path.exists(os.path.dirname(d)) for d in made.dirs)
