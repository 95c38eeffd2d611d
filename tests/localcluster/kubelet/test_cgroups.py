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


def test_pod_pids_cgroup_on_this_machine() -> None:
    """A pod cgroup with pids.max, joined by a container with and without limits; gone
    once empty. Real cgroups; skipped where there is no pids controller."""
    tag = uuid.uuid4().hex[:8]
    mgr = CgroupManager(prefix=f"localcluster-test-{tag}")
    if mgr.pids_version == 0:
        pytest.skip("no pids cgroup controller here")
    try:
        assert mgr.pod("p1", -1) is None and mgr.pod("p1", None) is None  # no limit
        pod = mgr.pod("p1", 32)
        assert pod is not None and pod.path == mgr.pod_path("p1")
        with open(os.path.join(pod.path, "pids.max")) as fh:
            assert fh.read().strip() == "32"
        plain = mgr.create("p1-a-0", Limits(), pod=pod)
        limited = mgr.create("p1-b-0", Limits(memory=64 * 2**20), pod=pod)
        assert plain is not None and limited is not None
        for cg in (plain, limited):  # every procs file it joins is in the pod's cgroup
            assert any(f.startswith(pod.path + "/") for f in cg.procs_files)
        plain.remove()
        limited.remove()
        pod.remove()
        assert not os.path.exists(pod.path)
    finally:
        mgr.cleanup(remove_parent=True)


def test_v2_pod_cgroup_parents_its_containers(tmp_path) -> None:
    """The cgroup v2 layout, on a directory tree standing in for /sys/fs/cgroup (a mock:
    this machine's hierarchy is v1): containers are made under the pod's cgroup, limits
    or not, since v2 keeps processes in leaves only."""
    (tmp_path / "cgroup.controllers").write_text("cpu memory pids\n")
    mgr = CgroupManager(prefix="lc", root=str(tmp_path))
    assert (mgr.version, mgr.pids_version) == (2, 2)
    pod = mgr.pod("u1", 100)
    assert pod is not None and pod.path == str(tmp_path / "lc" / "podu1")
    assert (tmp_path / "lc" / "podu1" / "pids.max").read_text() == "100"
    assert "+pids" in (tmp_path / "lc" / "cgroup.subtree_control").read_text()
    plain = mgr.create("u1-main-0", Limits(), pod=pod)
    assert plain is not None and plain.dirs == [str(tmp_path / "lc" / "podu1" / "u1-main-0")]
    limited = mgr.create("u1-side-0", Limits(memory=2**20), pod=pod)
    assert limited is not None
    assert (tmp_path / "lc" / "podu1" / "u1-side-0" / "memory.max").read_text() == str(2**20)
    assert mgr.create("nopod", Limits()) is None  # no pod limit, no limits: no cgroup
