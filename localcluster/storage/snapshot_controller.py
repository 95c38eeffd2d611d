"""The snapshot controller and the local snapshotter in one, talking to the API server.

One level-triggered pass applies snapshot_decisions.py to what the informers hold: a
VolumeSnapshot of one of this provisioner's claims gets its VolumeSnapshotContent, the
volume's image is copied into the snapshot store (snapshots.py), and both statuses say
so; refusals land in ``status.error`` with a Warning Event; deleted snapshots and contents
release their image according to ``deletionPolicy``. Also installs the snapshot CRDs and
the default VolumeSnapshotClass at start.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from typing import Any

import kubeclient
from kubeclient import Client, KubeError, Obj
from kubeclient.resources import CRDS
from localcluster.kube.events import EventRecorder
from localcluster.kube.informer import Informer, Loop
from localcluster.kube.times import now
from localcluster.storage import classes, snapshot_api
from localcluster.storage import snapshot_decisions as sd
from localcluster.storage.errors import StorageError
from localcluster.storage.snapshot_api import (
    CONTENT_FINALIZER,
    CONTENTS,
    SNAPSHOT_FINALIZER,
    SNAPSHOTS,
)
from localcluster.storage.snapshots import SnapshotStore

logger = logging.getLogger(__name__)

SERVED_WAIT = 10.0
"""Seconds to wait for a CRD just created to be served (this API server: at once)."""


def install_snapshot_api(kube: Client) -> None:
    """The snapshot CRDs (created, or replaced when their spec changed) and the default
    VolumeSnapshotClass (created when missing: an administrator may have edited it)."""
    for crd in snapshot_api.crds():
        current = kube.get_or_none(CRDS, crd["metadata"]["name"])
        if current is None:
            kube.create(CRDS, crd)
        elif current.get("spec") != crd["spec"]:
            crd = {**crd, "metadata": {**crd["metadata"],
                                       "resourceVersion": current["metadata"]["resourceVersion"]}}
            kube.replace(CRDS, crd)
    vsclass = snapshot_api.snapshot_class()
    deadline = time.monotonic() + SERVED_WAIT
    while True:
        try:
            if kube.get_or_none(snapshot_api.SNAPSHOT_CLASSES, snapshot_api.LOCAL_SNAPSHOTS) \
                    is None:
                kube.create(snapshot_api.SNAPSHOT_CLASSES, vsclass)
            return
        except KubeError as err:
            if not kubeclient.is_not_found(err) or time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def _remove(finalizers: list[str], name: str) -> list[str]:
    return [f for f in finalizers if f != name]


class SnapshotController:
    def __init__(self, kube: Client, store: SnapshotStore, *, snapshots: Informer,
                 contents: Informer, snapshot_classes: Informer, claims: Informer,
                 pvs: Informer, storage_classes: Informer) -> None:
        self.kube = kube
        self.store = store
        self.snapshots = snapshots
        self.contents = contents
        self.snapshot_classes = snapshot_classes
        self.claims = claims
        self.pvs = pvs
        self.storage_classes = storage_classes
        self.events = EventRecorder(kube, component="localcluster-snapshotter")
        self.loop = Loop("snapshots", self.reconcile, informers=(
            snapshots, contents, snapshot_classes, claims, pvs, storage_classes))

    def start(self) -> None:
        self.loop.start()

    def stop(self) -> None:
        self.loop.stop()

    def reconcile(self) -> None:
        contents = {c["metadata"]["name"]: c for c in self.contents.list()}
        snapshots = {(s["metadata"]["namespace"], s["metadata"]["name"]): s
                     for s in self.snapshots.list()}
        for key, snapshot in sorted(snapshots.items()):
            try:
                self._sync_snapshot(snapshot, contents)
            except (KubeError, StorageError) as err:
                if kubeclient.is_stale(err):
                    logger.debug("snapshot %s/%s: %s (a newer view is on its way)", *key, err)
                    continue
                logger.warning("snapshot %s/%s: %s", *key, err)
                self._fail(snapshot, str(err))
        snapshots = {(s["metadata"]["namespace"], s["metadata"]["name"]): s
                     for s in self.snapshots.list()}
        for name, content in sorted({c["metadata"]["name"]: c
                                     for c in self.contents.list()}.items()):
            try:
                self._sync_content(content, snapshots)
            except (KubeError, StorageError) as err:
                log = logger.debug if kubeclient.is_stale(err) else logger.warning
                log("snapshot content %s: %s", name, err)

    # -- VolumeSnapshots -------------------------------------------------------------

    def _sync_snapshot(self, snapshot: Obj, contents: Mapping[str, Obj]) -> None:
        plan = sd.snapshot_plan(
            snapshot=snapshot, contents=contents,
            claims={(c["metadata"]["namespace"], c["metadata"]["name"]): c
                    for c in self.claims.list()},
            volumes={pv["metadata"]["name"]: pv for pv in self.pvs.list()},
            storage_classes={sc["metadata"]["name"]: sc for sc in self.storage_classes.list()},
            snapshot_classes={c["metadata"]["name"]: c for c in self.snapshot_classes.list()},
            provisioner=classes.PROVISIONER)
        meta = snapshot["metadata"]
        if isinstance(plan, sd.Nothing):
            logger.debug("snapshot %s/%s: %s", meta["namespace"], meta["name"], plan.reason)
        elif isinstance(plan, sd.Finish):
            self._finish(snapshot, plan)
        elif isinstance(plan, sd.Fail):
            self._fail(snapshot, plan.message)
        elif isinstance(plan, sd.Report):
            self._report(snapshot, plan.status)
        else:
            self._take(snapshot, plan)

    def _patch_snapshot(self, snapshot: Obj, patch: Mapping[str, Any], *,
                        status: bool = False) -> Obj:
        meta = snapshot["metadata"]
        return self.kube.patch(SNAPSHOTS, meta["name"], patch, meta["namespace"],
                               subresource="status" if status else None)

    def _ensure_finalizer(self, snapshot: Obj) -> Obj:
        meta = snapshot["metadata"]
        finalizers = list(meta.get("finalizers") or [])
        if SNAPSHOT_FINALIZER in finalizers:
            return snapshot
        return self._patch_snapshot(snapshot, {"metadata": {
            "finalizers": [*finalizers, SNAPSHOT_FINALIZER],
            "resourceVersion": meta["resourceVersion"]}})

    def _fail(self, snapshot: Obj, message: str) -> None:
        current = snapshot.get("status") or {}
        want = {"readyToUse": False, "error": {"message": message, "time": now()}}
        if not sd.status_differs(current, want):
            return
        self._patch_snapshot(snapshot, {"status": want}, status=True)
        self.events.emit(snapshot, "Warning", "SnapshotCreationFailed", message,
                         kind="VolumeSnapshot", api_version=snapshot_api.API_VERSION)

    def _report(self, snapshot: Obj, status: Mapping[str, Any]) -> None:
        if not sd.status_differs(snapshot.get("status") or {}, status):
            return
        self._patch_snapshot(snapshot, {"status": status}, status=True)
        if status.get("readyToUse"):
            self.events.emit(snapshot, "Normal", "SnapshotReady",
                             f"Snapshot {snapshot['metadata']['namespace']}/"
                             f"{snapshot['metadata']['name']} is ready to use.",
                             kind="VolumeSnapshot", api_version=snapshot_api.API_VERSION)

    def _take(self, snapshot: Obj, plan: sd.Take) -> None:
        snapshot = self._ensure_finalizer(snapshot)
        if plan.class_name:
            snapshot = self._patch_snapshot(
                snapshot, {"spec": {"volumeSnapshotClassName": plan.class_name}})
        content = plan.content
        name = content["metadata"]["name"]
        if "resourceVersion" not in content["metadata"]:
            content = self.kube.create(CONTENTS, dict(content))
            self.events.emit(snapshot, "Normal", "CreatingSnapshot",
                             f"Waiting for a snapshot {snapshot['metadata']['namespace']}/"
                             f"{snapshot['metadata']['name']} to be created by the "
                             "CSI driver.", kind="VolumeSnapshot",
                             api_version=snapshot_api.API_VERSION)
        image = self.store.take(name, plan.volume)
        content = self.kube.patch(CONTENTS, name, {"status": sd.content_status(
            handle=name, restore_size=image.capacity, created_ns=time.time_ns())},
            subresource="status")
        self._report(snapshot, sd.snapshot_status(content))

    def _finish(self, snapshot: Obj, plan: sd.Finish) -> None:
        if plan.delete_content:
            self.kube.delete(CONTENTS, plan.delete_content)
        if plan.remove_finalizer:
            meta = snapshot["metadata"]
            self._patch_snapshot(snapshot, {"metadata": {
                "finalizers": _remove(list(meta.get("finalizers") or []), SNAPSHOT_FINALIZER),
                "resourceVersion": meta["resourceVersion"]}})

    # -- VolumeSnapshotContents ------------------------------------------------------

    def _sync_content(self, content: Obj, snapshots: Mapping[tuple[str, str], Obj]) -> None:
        plan = sd.content_plan(content=content, snapshots=snapshots,
                               provisioner=classes.PROVISIONER)
        meta = content["metadata"]
        if plan.delete_image:
            handle = (content.get("status") or {}).get("snapshotHandle") or meta["name"]
            self.store.delete(str(handle))
        if plan.remove_finalizer:
            self.kube.patch(CONTENTS, meta["name"], {"metadata": {
                "finalizers": _remove(list(meta.get("finalizers") or []), CONTENT_FINALIZER),
                "resourceVersion": meta["resourceVersion"]}})
        if plan.delete:
            logger.info("deleting content %s: its VolumeSnapshot is gone", meta["name"])
            self.kube.delete(CONTENTS, meta["name"])
