"""Volume snapshots through the API of a running cluster: taking, restoring, deleting.

The bytes are checked on the volumes themselves (a Filesystem volume's mount dir, a Block
volume's device) and the snapshot store is checked on the file system.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest

import kubeclient
from kubeclient import Client, resources
from localcluster.cluster import Cluster
from localcluster.storage import classes, snapshot_api
from localcluster.storage.snapshot_api import CONTENTS, SNAPSHOT_CLASSES, SNAPSHOTS
from localcluster.storage.snapshot_controller import CRDS
from tests.localcluster.clusterkit import get, needs_root, phase, pvc, running, wait_for, wait_phase

pytestmark = [needs_root, pytest.mark.slow]

MiB = 2**20
SNAP_GROUP = "snapshot.storage.k8s.io"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with running(str(tmp_path_factory.mktemp("snapshots"))) as c:
        yield c


@pytest.fixture
def kube(cluster: Cluster) -> Client:
    assert cluster.kube is not None
    return cluster.kube


def snapshot(name: str, claim: str | None = None, *, cls: str | None = None,
             content: str | None = None) -> dict[str, Any]:
    source = {"persistentVolumeClaimName": claim} if claim else \
        {"volumeSnapshotContentName": content}
    spec: dict[str, Any] = {"source": source}
    if cls:
        spec["volumeSnapshotClassName"] = cls
    return {"apiVersion": f"{SNAP_GROUP}/v1", "kind": "VolumeSnapshot",
            "metadata": {"name": name}, "spec": spec}


def from_snapshot(name: str, snap: str, **kw: Any) -> dict[str, Any]:
    return pvc(name, dataSource={"apiGroup": SNAP_GROUP, "kind": "VolumeSnapshot",
                                 "name": snap}, **kw)


def ready(kube: Client, name: str, timeout: float = 30) -> dict[str, Any]:
    wait_for(lambda: (get(kube, SNAPSHOTS, name).get("status") or {}).get("readyToUse"),
             timeout=timeout, what=f"VolumeSnapshot {name} readyToUse")
    return get(kube, SNAPSHOTS, name)


def snapshot_error(kube: Client, name: str) -> str:
    def message() -> str:
        return str(((get(kube, SNAPSHOTS, name).get("status") or {}).get("error") or {})
                   .get("message") or "")
    return str(wait_for(message, what=f"status.error of VolumeSnapshot {name}"))


def events(kube: Client, name: str) -> list[dict[str, Any]]:
    return [e for e in kube.list(resources.EVENTS, "default")
            if e["involvedObject"]["name"] == name]


def event_with(kube: Client, name: str, text: str) -> dict[str, Any]:
    found = wait_for(lambda: [e for e in events(kube, name) if text in e["message"]],
                     what=f"an event on {name} saying {text!r}")
    return dict(found[0])


def volume_path(kube: Client, claim: str) -> str:
    bound = wait_phase(kube, resources.PVCS, claim, "Bound")
    return str(kube.get(resources.PVS, bound["spec"]["volumeName"])["spec"]["local"]["path"])


def store_files(cluster: Cluster) -> list[str]:
    """Every file of the snapshot store, both pools."""
    root = os.path.join(cluster.data_dir, "storage")
    out = []
    for d in (os.path.join(root, "snapshots"), os.path.join(root, "reflink", "snapshots")):
        if os.path.isdir(d):
            out += [os.path.join(d, f) for f in os.listdir(d)]
    return sorted(out)


def write_file(path: str, data: bytes) -> None:
    with open(path, "wb") as fh:
        fh.write(data)
        os.fsync(fh.fileno())


def read_file(path: str) -> bytes:
    with open(path, "rb") as fh:
        return fh.read()


def write_device(device: str, offset: int, data: bytes) -> None:
    fd = os.open(device, os.O_WRONLY)
    try:
        os.pwrite(fd, data, offset)
        os.fsync(fd)
    finally:
        os.close(fd)


def read_device(device: str, offset: int, size: int) -> bytes:
    fd = os.open(device, os.O_RDONLY)
    try:
        return os.pread(fd, size, offset)
    finally:
        os.close(fd)


def device_size(device: str) -> int:
    fd = os.open(device, os.O_RDONLY)
    try:
        return os.lseek(fd, 0, os.SEEK_END)
    finally:
        os.close(fd)


def test_snapshot_api_and_default_class_installed(kube: Client) -> None:
    names = {c["metadata"]["name"] for c in kube.list(CRDS)}
    assert names >= {f"{p}.{SNAP_GROUP}" for p in
                     ("volumesnapshots", "volumesnapshotcontents", "volumesnapshotclasses")}
    vsclass = kube.get(SNAPSHOT_CLASSES, "local-snapshots")
    assert vsclass["driver"] == classes.PROVISIONER == "local.localcluster.rootdisk.io"
    assert vsclass["deletionPolicy"] == "Delete"
    assert vsclass["metadata"]["annotations"][snapshot_api.DEFAULT_SNAPSHOT_CLASS] == "true"


def test_schema_refuses_a_snapshot_with_two_sources(kube: Client) -> None:
    bad = snapshot("two", "a")
    bad["spec"]["source"]["volumeSnapshotContentName"] = "b"
    with pytest.raises(kubeclient.KubeError) as err:
        kube.create(SNAPSHOTS, bad, "default")
    assert err.value.status == 422
    assert "exactly one of" in str(err.value)


def test_filesystem_snapshot_on_reflink_is_point_in_time(kube: Client, cluster: Cluster) -> None:
    kube.create(resources.PVCS, pvc("fs-src", sc="local-reflink", size="64Mi"), "default")
    src = volume_path(kube, "fs-src")
    write_file(os.path.join(src, "data"), b"before" * 1000)
    kube.create(SNAPSHOTS, snapshot("fs-snap", "fs-src"), "default")
    snap = ready(kube, "fs-snap")
    uid = snap["metadata"]["uid"]
    status = snap["status"]
    assert status["boundVolumeSnapshotContentName"] == f"snapcontent-{uid}"
    assert status["restoreSize"] == "64Mi"
    assert status["creationTime"].endswith("Z") and "error" not in status
    assert snap["spec"]["volumeSnapshotClassName"] == "local-snapshots"  # the default, set
    assert snapshot_api.SNAPSHOT_FINALIZER in snap["metadata"]["finalizers"]
    content = kube.get(CONTENTS, f"snapcontent-{uid}")
    assert content["spec"]["volumeSnapshotRef"]["uid"] == uid
    assert content["spec"]["sourceVolumeMode"] == "Filesystem"
    assert content["spec"]["deletionPolicy"] == "Delete"
    assert content["status"]["restoreSize"] == 64 * MiB
    assert content["status"]["readyToUse"] is True
    assert isinstance(content["status"]["creationTime"], int)
    # In the reflink pool, next to the volumes.
    image = os.path.join(cluster.data_dir, "storage", "reflink", "snapshots",
                         f"snapcontent-{uid}.img")
    assert os.path.getsize(image) == 64 * MiB

    write_file(os.path.join(src, "data"), b"after!" * 1000)
    kube.create(resources.PVCS, from_snapshot("fs-restored", "fs-snap", sc="local-reflink",
                                           size="64Mi"), "default")
    restored = volume_path(kube, "fs-restored")
    assert read_file(os.path.join(restored, "data")) == b"before" * 1000
    assert read_file(os.path.join(src, "data")) == b"after!" * 1000
    event_with(kube, "fs-restored", "restored from VolumeSnapshot fs-snap")

    # Into a larger claim of another class: a sparse copy, the filesystem grown.
    kube.create(resources.PVCS, from_snapshot("fs-larger", "fs-snap", sc="local-immediate",
                                           size="128Mi"), "default")
    larger = volume_path(kube, "fs-larger")
    assert read_file(os.path.join(larger, "data")) == b"before" * 1000
    assert get(kube, resources.PVCS, "fs-larger")["status"]["capacity"]["storage"] == "128Mi"
    st = os.statvfs(larger)
    assert st.f_blocks * st.f_frsize > 120 * MiB


def test_restore_refuses_a_smaller_claim_and_another_mode(kube: Client) -> None:
    kube.create(resources.PVCS, pvc("small-src", sc="local-immediate", size="64Mi"), "default")
    wait_phase(kube, resources.PVCS, "small-src", "Bound")
    kube.create(SNAPSHOTS, snapshot("small-snap", "small-src"), "default")
    ready(kube, "small-snap")
    kube.create(resources.PVCS, from_snapshot("too-small", "small-snap", sc="local-immediate",
                                           size="32Mi"), "default")
    refused = event_with(kube, "too-small", "requested volume size")
    assert refused["type"] == "Warning"
    assert refused["message"] == (f"requested volume size {32 * MiB} is less than the size "
                                  f"{64 * MiB} for the source snapshot small-snap")
    kube.create(resources.PVCS, from_snapshot("as-block", "small-snap", sc="local-immediate",
                                           mode="Block"), "default")
    refused = event_with(kube, "as-block", "volumeMode")
    assert "volumeMode Block" in refused["message"]
    assert "volumeMode Filesystem" in refused["message"]
    assert phase(kube, resources.PVCS, "too-small") == phase(kube, resources.PVCS, "as-block") \
        == "Pending"


def test_block_snapshot_on_the_standard_pool_is_a_sparse_copy(kube: Client,
                                                              cluster: Cluster) -> None:
    kube.create(resources.PVCS, pvc("blk-src", sc="local-immediate", mode="Block", size="64Mi"),
                "default")
    device = volume_path(kube, "blk-src")
    write_device(device, 0, b"head" * 1024)
    write_device(device, 40 * MiB, b"tail" * 1024)
    kube.create(SNAPSHOTS, snapshot("blk-snap", "blk-src"), "default")
    snap = ready(kube, "blk-snap")
    assert snap["status"]["restoreSize"] == "64Mi"
    content = kube.get(CONTENTS, snap["status"]["boundVolumeSnapshotContentName"])
    assert content["spec"]["sourceVolumeMode"] == "Block"
    image = os.path.join(cluster.data_dir, "storage", "snapshots",
                         f"{content['metadata']['name']}.img")
    st = os.stat(image)
    assert st.st_size == 64 * MiB
    assert st.st_blocks * 512 < 4 * MiB, "the snapshot of a mostly empty volume is sparse"

    write_device(device, 0, b"HEAD" * 1024)
    kube.create(resources.PVCS, from_snapshot("blk-restored", "blk-snap", sc="local-immediate",
                                           mode="Block", size="96Mi"), "default")
    restored = volume_path(kube, "blk-restored")
    assert device_size(restored) == 96 * MiB
    assert read_device(restored, 0, 4096) == b"head" * 1024
    assert read_device(restored, 40 * MiB, 4096) == b"tail" * 1024
    assert read_device(device, 0, 4096) == b"HEAD" * 1024


def test_restore_waits_for_a_missing_snapshot_then_binds(kube: Client) -> None:
    kube.create(resources.PVCS, from_snapshot("early", "later", sc="local-immediate"),
                "default")
    waiting = event_with(kube, "early", "waiting for VolumeSnapshot default/later")
    assert waiting["type"] == "Normal" and waiting["reason"] == "WaitingForSnapshot"
    assert phase(kube, resources.PVCS, "early") == "Pending"
    kube.create(resources.PVCS, pvc("later-src", sc="local-immediate"), "default")
    write_file(os.path.join(volume_path(kube, "later-src"), "f"), b"late")
    kube.create(SNAPSHOTS, snapshot("later", "later-src"), "default")
    assert read_file(os.path.join(volume_path(kube, "early"), "f")) == b"late"


def test_refusals_show_in_status_and_events_and_retry(kube: Client) -> None:
    kube.create(SNAPSHOTS, snapshot("no-claim", "not-yet"), "default")
    assert snapshot_error(kube, "no-claim") == \
        "the source PersistentVolumeClaim default/not-yet does not exist"
    assert event_with(kube, "no-claim", "does not exist")["type"] == "Warning"
    assert not get(kube, SNAPSHOTS, "no-claim")["status"]["readyToUse"]

    kube.create(SNAPSHOTS, snapshot("no-class", "not-yet", cls="missing"), "default")
    kube.create(SNAPSHOTS, snapshot("pre", content="handmade"), "default")
    assert "not supported" in snapshot_error(kube, "pre")
    # Nothing was made for the refused snapshots.
    assert not [c for c in kube.list(CONTENTS)
                if c["spec"]["volumeSnapshotRef"]["name"] in ("no-claim", "no-class", "pre")]

    kube.create(resources.PVCS, pvc("not-yet", sc="local-immediate"), "default")
    ready(kube, "no-claim")  # retried once the claim is Bound; the error is gone
    assert "error" not in get(kube, SNAPSHOTS, "no-claim")["status"]
    wait_for(lambda: snapshot_error(kube, "no-class") ==
             "VolumeSnapshotClass 'missing' does not exist", what="the class refusal")


def test_delete_removes_content_and_stored_image(kube: Client, cluster: Cluster) -> None:
    kube.create(resources.PVCS, pvc("del-src", sc="local-reflink"), "default")
    wait_phase(kube, resources.PVCS, "del-src", "Bound")
    kube.create(SNAPSHOTS, snapshot("del-snap", "del-src"), "default")
    content = ready(kube, "del-snap")["status"]["boundVolumeSnapshotContentName"]
    mine = [f for f in store_files(cluster) if os.path.basename(f).startswith(content)]
    assert len(mine) == 2  # the image and its record
    others = [f for f in store_files(cluster) if f not in mine]
    kube.delete(SNAPSHOTS, "del-snap", "default")
    wait_for(lambda: kube.get_or_none(SNAPSHOTS, "del-snap", "default") is None,
             what="VolumeSnapshot gone")
    wait_for(lambda: kube.get_or_none(CONTENTS, content) is None, what="content gone")
    assert store_files(cluster) == others


def test_retain_keeps_content_and_image(kube: Client, cluster: Cluster) -> None:
    keep = snapshot_api.snapshot_class()
    keep["metadata"] = {"name": "keep"}
    keep["deletionPolicy"] = "Retain"
    kube.create(SNAPSHOT_CLASSES, keep)
    kube.create(resources.PVCS, pvc("ret-src", sc="local-immediate"), "default")
    wait_phase(kube, resources.PVCS, "ret-src", "Bound")
    kube.create(SNAPSHOTS, snapshot("ret-snap", "ret-src", cls="keep"), "default")
    content = ready(kube, "ret-snap")["status"]["boundVolumeSnapshotContentName"]
    image = os.path.join(cluster.data_dir, "storage", "snapshots", content + ".img")
    kube.delete(SNAPSHOTS, "ret-snap", "default")
    wait_for(lambda: kube.get_or_none(SNAPSHOTS, "ret-snap", "default") is None,
             what="VolumeSnapshot gone")
    assert kube.get(CONTENTS, content)["spec"]["deletionPolicy"] == "Retain"
    assert os.path.exists(image)
    # As upstream: to free it, switch the content to Delete and delete it.
    kube.patch(CONTENTS, content, {"spec": {"deletionPolicy": "Delete"}})
    kube.delete(CONTENTS, content)
    wait_for(lambda: kube.get_or_none(CONTENTS, content) is None, what="content gone")
    assert not os.path.exists(image)


def test_snapshot_outlives_its_source_claim(kube: Client) -> None:
    kube.create(resources.PVCS, pvc("gone-src", sc="local-reflink"), "default")
    write_file(os.path.join(volume_path(kube, "gone-src"), "f"), b"kept")
    volume = get(kube, resources.PVCS, "gone-src")["spec"]["volumeName"]
    kube.create(SNAPSHOTS, snapshot("gone-snap", "gone-src"), "default")
    ready(kube, "gone-snap")
    kube.delete(resources.PVCS, "gone-src", "default")
    wait_for(lambda: kube.get_or_none(resources.PVS, volume) is None, what="source PV deleted")
    kube.create(resources.PVCS, from_snapshot("orphan", "gone-snap", sc="local-reflink"),
                "default")
    assert read_file(os.path.join(volume_path(kube, "orphan"), "f")) == b"kept"
    assert get(kube, SNAPSHOTS, "gone-snap")["status"]["readyToUse"] is True


def test_snapshots_survive_a_restart(tmp_path: Any) -> None:
    data_dir = str(tmp_path)
    with running(data_dir) as first:
        kube = first.kube
        assert kube is not None
        kube.create(resources.PVCS, pvc("src", sc="local-reflink"), "default")
        write_file(os.path.join(volume_path(kube, "src"), "f"), b"then")
        kube.create(SNAPSHOTS, snapshot("snap", "src"), "default")
        ready(kube, "snap")
        crds = {c["metadata"]["name"]: c["metadata"]["resourceVersion"]
                for c in kube.list(CRDS)}
    with running(data_dir) as second:
        kube = second.kube
        assert kube is not None
        # Installed once: a restart leaves the CRDs as they are.
        assert {c["metadata"]["name"]: c["metadata"]["resourceVersion"]
                for c in kube.list(CRDS)} == crds
        kube.create(resources.PVCS, from_snapshot("back", "snap", sc="local-reflink"), "default")
        assert read_file(os.path.join(volume_path(kube, "back"), "f")) == b"then"
