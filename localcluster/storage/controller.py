"""The provisioner, the PV binder and the expander, talking to the API server.

One level-triggered pass (see kube/informer.py) applies the decisions of
decisions.py to what the informers hold: make volumes and PVs for claims that may have
them (empty, cloned from a claim, or restored from a VolumeSnapshot), bind claims and
PVs, set phases, delete released volumes, grow volumes whose claim asks for more. Also
installs the StorageClasses and the CSIDriver at start.
"""

from __future__ import annotations

import logging
from typing import Any

import kubeclient
import sizes
from kubeclient import Client, KubeError, Obj, resources
from localcluster.kube.events import EventRecorder
from localcluster.kube.informer import Informer, Loop
from localcluster.storage import classes, decisions, snapshot_decisions
from localcluster.storage.errors import StorageError, VolumeNotFound
from localcluster.storage.snapshots import SnapshotStore
from localcluster.storage.volumes import REFLINK, STANDARD, Image, VolumeManager

logger = logging.getLogger(__name__)


def install_classes(kube: Client) -> None:
    for sc in classes.storage_classes():
        if kube.get_or_none(resources.STORAGECLASSES, sc["metadata"]["name"]) is None:
            kube.create(resources.STORAGECLASSES, sc)
    driver = classes.csi_driver()
    if kube.get_or_none(resources.CSIDRIVERS, driver["metadata"]["name"]) is None:
        kube.create(resources.CSIDRIVERS, driver)


class StorageController:
    def __init__(self, kube: Client, volumes: VolumeManager, *, node: str,
                 claims: Informer, pvs: Informer, storage_classes: Informer,
                 pods: Informer, snapshots: Informer, contents: Informer,
                 store: SnapshotStore) -> None:
        self.kube = kube
        self.volumes = volumes
        self.snapshots = snapshots
        self.contents = contents
        self.store = store
        self.node = node
        self.claims = claims
        self.pvs = pvs
        self.storage_classes = storage_classes
        self.pods = pods
        self.events = EventRecorder(kube, component="localcluster-provisioner")
        self._refused: set[tuple[str, str]] = set()
        self.loop = Loop("storage", self.reconcile,
                         informers=(claims, pvs, storage_classes, pods, snapshots, contents))

    def start(self) -> None:
        self.loop.start()

    def stop(self) -> None:
        self.loop.stop()

    def reconcile(self) -> None:
        sclasses = {sc["metadata"]["name"]: sc for sc in self.storage_classes.list()}
        claims = {(c["metadata"]["namespace"], c["metadata"]["name"]): c
                  for c in self.claims.list()}
        pvs = {pv["metadata"]["name"]: pv for pv in self.pvs.list()}
        for key, claim in sorted(claims.items()):
            try:
                self._provision(claim, sclasses, pvs, claims)
            except (KubeError, StorageError) as err:
                if kubeclient.is_stale(err):
                    logger.debug("provisioning %s/%s: %s (a newer view is on its way)", *key, err)
                    continue
                logger.warning("provisioning %s/%s: %s", *key, err)
                self.events.emit(claim, "Warning", "ProvisioningFailed", str(err))
        pvs = {pv["metadata"]["name"]: pv for pv in self.pvs.list()}
        for pv in pvs.values():
            try:
                self._sync_volume(pv, claims)
            except (KubeError, StorageError) as err:
                log = logger.debug if kubeclient.is_stale(err) else logger.warning
                log("volume %s: %s", pv["metadata"]["name"], err)
        pods = self.pods.list()
        for key, claim in sorted(claims.items()):
            try:
                self._sync_claim(claim, pvs)
                self._protect(claim, pods)
            except KubeError as err:
                log = logger.debug if kubeclient.is_stale(err) else logger.warning
                log("claim %s/%s: %s", *key, err)
            except StorageError as err:
                # The volume grew but its filesystem did not: the claim keeps its old
                # size and the next pass (at the latest the resync) tries again.
                logger.warning("claim %s/%s: %s", *key, err)
                volume = (claim.get("spec") or {}).get("volumeName") or "nil"
                # the shape of the kubelet's message (its GenerateError)
                self.events.emit(claim, "Warning", "FileSystemResizeFailed",
                                 f'MountVolume.NodeExpandVolume failed for volume "{volume}"'
                                 f" : {err}")

    def _protect(self, claim: Obj, pods: list[Obj]) -> None:
        finalizers = decisions.claim_finalizers(claim=claim, pods=pods)
        if finalizers is not None:
            meta = claim["metadata"]
            self.kube.patch(resources.PVCS, meta["name"],
                            {"metadata": {"finalizers": finalizers,
                                          "resourceVersion": meta["resourceVersion"]}},
                            meta["namespace"])

    # -- provisioning ----------------------------------------------------------------

    def _provision(self, claim: Obj, sclasses: dict[str, Obj], pvs: dict[str, Obj],
                   claims: dict[tuple[str, str], Obj]) -> None:
        plan = decisions.provision(claim=claim, classes=sclasses,
                                   provisioner=classes.PROVISIONER)
        key = (claim["metadata"]["namespace"], claim["metadata"]["name"])
        if isinstance(plan, decisions.Skip):
            logger.debug("%s", plan.reason)
            return
        if isinstance(plan, decisions.Refuse):
            if key not in self._refused:
                self._refused.add(key)
                self.events.emit(claim, "Warning", plan.reason, plan.message)
            return
        if plan.volume_name in pvs:
            return
        sc = sclasses[plan.storage_class]
        pool = REFLINK if (sc.get("parameters") or {}).get(classes.POOL_PARAMETER) == REFLINK \
            else STANDARD
        source_volume = image = None
        if plan.snapshot and not self.volumes.exists(plan.volume_name):
            image = self._snapshot_image(claim, plan)
            if image is None:
                return
        if plan.clone_from:
            source = claims.get((key[0], plan.clone_from))
            source_volume = ((source or {}).get("spec") or {}).get("volumeName")
            if not source or ((source.get("status") or {}).get("phase") != "Bound"
                              or not source_volume):
                logger.debug("%s/%s: clone source %s not bound yet", *key, plan.clone_from)
                return
        if not self.volumes.exists(plan.volume_name):
            vol = self.volumes.create(plan.volume_name, capacity=plan.capacity, mode=plan.mode,
                                      pool=pool, source=source_volume, image=image)
        else:
            vol = self.volumes.get(plan.volume_name)
        pv = decisions.volume_manifest(
            claim=claim, storage_class=sc, plan=plan, path=vol.path, node=self.node,
            provisioner=classes.PROVISIONER, capacity=vol.capacity)
        self.kube.create(resources.PVS, pv)
        self.events.emit(claim, "Normal", "ProvisioningSucceeded",
                         f"Successfully provisioned volume {plan.volume_name}"
                         + (f" (cloned from {plan.clone_from})" if plan.clone_from else "")
                         + (f" (restored from VolumeSnapshot {plan.snapshot})"
                            if plan.snapshot else ""))

    def _snapshot_image(self, claim: Obj, plan: decisions.Provision) -> Image | None:
        """The stored image to restore ``claim`` from, or None (an Event says why)."""
        ns = claim["metadata"]["namespace"]
        snapshot = self.snapshots.get(str(plan.snapshot), ns)
        bound = ((snapshot or {}).get("status") or {}).get("boundVolumeSnapshotContentName")
        content = self.contents.get(str(bound)) if bound else None
        verdict = snapshot_decisions.restore(
            claim=claim, capacity=plan.capacity, mode=plan.mode,
            snapshot_name=str(plan.snapshot), snapshot=snapshot, content=content,
            provisioner=classes.PROVISIONER)
        if isinstance(verdict, decisions.Wait):
            logger.debug("%s/%s: %s", ns, claim["metadata"]["name"], verdict.message)
            self.events.emit(claim, "Normal", verdict.reason, verdict.message)
            return None
        if isinstance(verdict, decisions.Refuse):
            key = (ns, claim["metadata"]["name"])
            if key not in self._refused:
                self._refused.add(key)
                self.events.emit(claim, "Warning", verdict.reason, verdict.message)
            return None
        image = self.store.get(verdict.handle)
        if image is None:
            raise VolumeNotFound(f"the image of VolumeSnapshot {plan.snapshot} "
                                 f"({verdict.handle}) is not in the snapshot store")
        return image

    # -- binding ---------------------------------------------------------------------

    def _sync_volume(self, pv: Obj, claims: dict[tuple[str, str], Obj]) -> None:
        name = pv["metadata"]["name"]
        plan = decisions.volume_plan(volume=pv, claims=claims)
        if pv["metadata"].get("deletionTimestamp"):
            if plan.phase != "Bound":  # PV protection: a bound PV waits for its claim
                self._delete_volume(pv)
            return
        if plan.claim_uid:
            self.kube.patch(resources.PVS, name, {"spec": {"claimRef": {"uid": plan.claim_uid}}})
        if (pv.get("status") or {}).get("phase") != plan.phase:
            self.kube.patch(resources.PVS, name, {"status": {"phase": plan.phase}},
                            subresource="status")
            logger.info("volume %s is %s", name, plan.phase)
        if plan.delete and self._ours(pv):
            self._delete_volume(pv)
            self.kube.delete(resources.PVS, name)

    def _ours(self, pv: Obj) -> bool:
        ann = pv["metadata"].get("annotations") or {}
        return bool(ann.get(decisions.PROVISIONED_BY) == classes.PROVISIONER)

    def _delete_volume(self, pv: Obj) -> None:
        name = pv["metadata"]["name"]
        if self._ours(pv):
            try:
                self.volumes.delete(name)
                logger.info("deleted the volume of released PV %s", name)
            except VolumeNotFound:
                pass
        finalizers = pv["metadata"].get("finalizers") or []
        if finalizers and pv["metadata"].get("deletionTimestamp"):
            self.kube.patch(resources.PVS, name, {"metadata": {"finalizers": [
                f for f in finalizers if f != decisions.PV_PROTECTION]}})

    def _sync_claim(self, claim: Obj, pvs: dict[str, Obj]) -> None:
        meta = claim["metadata"]
        ns, name = meta["namespace"], meta["name"]
        plan = decisions.claim_plan(claim=claim, volumes=pvs)
        ann = meta.get("annotations") or {}
        patch: dict[str, Any] = {}
        if plan.volume_name and not (claim.get("spec") or {}).get("volumeName"):
            patch["spec"] = {"volumeName": plan.volume_name}
        missing = {k: v for k, v in plan.annotations.items() if ann.get(k) != v}
        if missing:
            patch["metadata"] = {"annotations": missing}
        if patch:
            self.kube.patch(resources.PVCS, name, patch, ns)
        volume_name = plan.volume_name or (claim.get("spec") or {}).get("volumeName")
        if plan.phase == "Bound" and volume_name:
            self._expand(claim, pvs[volume_name])
            pvs = {**pvs, volume_name: self.pvs.get(volume_name) or pvs[volume_name]}
            pv_spec = pvs[volume_name]["spec"]
            status: dict[str, Any] = {
                "phase": "Bound",
                "accessModes": list(pv_spec.get("accessModes") or []),
                "capacity": {"storage": pv_spec["capacity"]["storage"]},
            }
            if self.volumes.exists(volume_name) and self.volumes.resize_pending(volume_name):
                # As on a real node: the claim shows the new size only once the
                # filesystem has grown (when no pod uses it any more).
                old = (claim.get("status") or {}).get("capacity")
                if old:
                    status["capacity"] = old
                status["conditions"] = [{
                    "type": "FileSystemResizePending", "status": "True",
                    "message": "Waiting for user to (re-)start a pod to finish file system "
                               "resize of volume on node."}]
            else:
                status["conditions"] = None
        else:
            status = {"phase": plan.phase}
        current = claim.get("status") or {}
        if any(current.get(k) != v for k, v in status.items() if v is not None) or (
            "conditions" in status and status["conditions"] is None and current.get("conditions")
        ):
            self.kube.patch(resources.PVCS, name, {"status": status}, ns, subresource="status")
            if current.get("phase") != plan.phase:
                logger.info("claim %s/%s is %s", ns, name, plan.phase)
                if plan.phase == "Lost":
                    self.events.emit(claim, "Warning", "ClaimLost",
                                     "Bound claim has lost its PersistentVolume.")

    def _expand(self, claim: Obj, pv: Obj) -> None:
        want = decisions.expansion(claim=claim, volume=pv)
        if want is None or not self._ours(pv):
            return
        name = pv["metadata"]["name"]
        vol = self.volumes.expand(name, want)
        self.kube.patch(resources.PVS, name,
                        {"spec": {"capacity": {"storage": sizes.format_bytes(vol.capacity)}}})
        self.events.emit(claim, "Normal", "VolumeResizeSuccessful",
                         f"volume {name} expanded to {sizes.format_bytes(vol.capacity)}")
