"""The clone populator: VolumeCloneSource → PVC' filled from the source claim.

On the same twin-PVC base as the import populator (:mod:`populators.flow`); what
differs comes through its hooks and through :class:`CloneReconciler`'s observation:

- PVC' lives in the **source** namespace (upstream's ``tmp-pvc`` does too): the source
  claim can only be mounted, or named as a ``dataSource``, from there; the rebind then
  hands PVC''s volume to the target across namespaces;
- the strategy (:mod:`populators.clone_strategy`): ``csi-clone`` gives PVC' a
  ``dataSource`` naming the source claim, and the storage fills it (no pod);
  ``copy`` runs the cloner pod (``python -m importer.cloner``) that mounts the source
  read-only and PVC' read-write;
- a source that a running pod writes to is not read (``CloneSourceInUse``).
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Any

from populators import clone_strategy, names
from populators.cdiconfig import CdiConfig
from populators.claims import Obj, annots, meta, spec
from populators.flow import Emit, Observed, SourceError
from populators.importer_pod import (
    BLOCK_DEVICE,
    DATA_DIR,
    DATA_VOLUME,
    METRICS_PORT,
    QEMU_UID,
    TERMINATION_LOG,
    Settings,
    restricted_container_security,
)
from populators.reconcile import Reconciler

logger = logging.getLogger(__name__)

CLONE_METRIC = "kubevirt_cdi_clone_progress_total"
SOURCE_VOLUME = "cdi-clone-source"
SOURCE_DIR = "/source"
SOURCE_DEVICE = "/dev/cdi-clone-source"
CLONER_IMAGE = "rootdisk/cloner"
SOURCE_CLAIM_KEY = "_sourceClaim"
"""Where :class:`CloneReconciler` puts the source claim it read beside the
VolumeCloneSource it hands to the hooks (never written to the API)."""


def source_claim_name(source: Obj) -> str:
    ref = spec(source).get("source") or {}
    if ref.get("kind") != "PersistentVolumeClaim" or ref.get("apiGroup") not in (None, ""):
        raise SourceError(f"VolumeCloneSource {meta(source).get('name')}: spec.source.kind "
                          f"{ref.get('kind')!r} is not supported (PersistentVolumeClaim)")
    if not ref.get("name"):
        raise SourceError(f"VolumeCloneSource {meta(source).get('name')}: spec.source.name"
                          " is required")
    return str(ref["name"])


class ClonePopulator:
    kind = "VolumeCloneSource"
    plural = "volumeclonesources"
    metric = CLONE_METRIC

    def source_namespace(self, target: Obj) -> str:
        ref = spec(target).get("dataSourceRef") or {}
        return str(ref.get("namespace") or meta(target).get("namespace"))

    def prime_namespace(self, target: Obj) -> str:
        return self.source_namespace(target)

    def pod_name(self, prime: str) -> str:
        return names.cloner_pod_name(prime)

    def prime_annotations(self, source: Obj) -> dict[str, str]:
        source_claim_name(source)
        return {}

    def pod(self, *, target: Obj, prime: Obj, source: Obj, config: CdiConfig,
            settings: Settings, previous_restarts: int) -> dict[str, Any]:
        claim = source.get(SOURCE_CLAIM_KEY)
        if not isinstance(claim, dict):
            raise SourceError("the source claim is gone")
        return render_pod(target=target, prime=prime, source_claim=claim, config=config,
                          settings=settings, previous_restarts=previous_restarts)


def render_pod(*, target: Obj, prime: Obj, source_claim: Obj, config: CdiConfig,
               settings: Settings, previous_restarts: int = 0) -> dict[str, Any]:
    """The cloner pod: source claim read-only, PVC' read-write, confined as the importer."""
    pm, ps = meta(prime), spec(prime)
    block = ps.get("volumeMode") == "Block"
    source_block = spec(source_claim).get("volumeMode") == "Block"
    size = ((ps.get("resources") or {}).get("requests") or {}).get("storage", "")
    env = [
        {"name": "CLONER_SOURCE",
         "value": SOURCE_DEVICE if source_block else f"{SOURCE_DIR}/disk.img"},
        {"name": "CLONER_TARGET", "value": BLOCK_DEVICE if block else f"{DATA_DIR}/disk.img"},
        {"name": "IMPORTER_IMAGE_SIZE", "value": str(size)},
        {"name": "FILESYSTEM_OVERHEAD",
         "value": config.overhead(storage_class=ps.get("storageClassName"), block=block)},
        {"name": "OWNER_UID", "value": str(meta(target).get("uid"))},
        {"name": "PREALLOCATION", "value": "false"},
        {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
    ]
    container: dict[str, Any] = {
        "name": "cloner",
        "image": settings.image.replace("importer", "cloner") or CLONER_IMAGE,
        "imagePullPolicy": settings.pull_policy,
        "env": env,
        "ports": [{"name": "metrics", "containerPort": METRICS_PORT, "protocol": "TCP"}],
        "terminationMessagePath": TERMINATION_LOG,
        "terminationMessagePolicy": "FallbackToLogsOnError",
        "securityContext": restricted_container_security(),
    }
    if config.resources:
        container["resources"] = {k: dict(v) for k, v in config.resources.items()}
    mounts: list[dict[str, Any]] = []
    devices: list[dict[str, Any]] = []
    (devices if block else mounts).append(
        {"name": DATA_VOLUME, **({"devicePath": BLOCK_DEVICE} if block
                                 else {"mountPath": DATA_DIR})})
    if source_block:
        devices.append({"name": SOURCE_VOLUME, "devicePath": SOURCE_DEVICE})
    else:
        mounts.append({"name": SOURCE_VOLUME, "mountPath": SOURCE_DIR, "readOnly": True})
    if mounts:
        container["volumeMounts"] = mounts
    if devices:
        container["volumeDevices"] = devices
    annotations = {names.CREATED_BY_CONTROLLER: "yes", "sidecar.istio.io/inject": "false"}
    if previous_restarts:
        annotations[names.PREVIOUS_RESTARTS] = str(previous_restarts)
    pod_spec: dict[str, Any] = {
        "containers": [container],
        "restartPolicy": "OnFailure",
        "volumes": [
            {"name": DATA_VOLUME, "persistentVolumeClaim": {"claimName": pm.get("name"),
                                                            "readOnly": False}},
            {"name": SOURCE_VOLUME, "persistentVolumeClaim": {
                "claimName": meta(source_claim).get("name"), "readOnly": True}},
        ],
        "enableServiceLinks": False,
        "securityContext": {"fsGroup": QEMU_UID, "runAsNonRoot": True,
                            "seccompProfile": {"type": "RuntimeDefault"}},
    }
    node = annots(prime).get(names.SELECTED_NODE)
    if node:
        pod_spec["nodeName"] = node
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {
            "name": names.cloner_pod_name(str(pm.get("name"))),
            "namespace": pm.get("namespace"),
            "labels": {names.APP_LABEL: names.APP_VALUE, names.COMPONENT_LABEL: "cloner",
                       names.PROMETHEUS_LABEL: "true"},
            "annotations": annotations,
            "ownerReferences": [{"apiVersion": "v1", "kind": "PersistentVolumeClaim",
                                 "name": pm.get("name"), "uid": pm.get("uid"),
                                 "controller": True, "blockOwnerDeletion": True}],
        },
        "spec": pod_spec,
    }


class CloneReconciler(Reconciler):
    """The populator base's reconcile, observing also the source claim, the strategy and
    the source's writers."""

    def _observe(self, target: Obj) -> Observed:
        base = super()._observe(target)
        if base.source is None or annots(target).get(names.POD_PHASE) in (
                names.SUCCEEDED, names.FAILED):
            return base  # nothing more to read from the source
        try:
            claim_name = source_claim_name(base.source)
        except SourceError:
            return base  # the flow reports it
        ns = self.populator.source_namespace(target)
        claim = self.kube.claim(ns, claim_name)
        if claim is None:
            return dataclasses.replace(base, source=None)
        source = {**base.source, SOURCE_CLAIM_KEY: claim}
        config = self.kube.custom(names.CDI_GROUP, names.CDI_VERSION, "cdiconfigs", None,
                                  "config") or {}
        tclass_name = spec(target).get("storageClassName")
        profile = self.kube.custom(names.CDI_GROUP, names.CDI_VERSION, "storageprofiles",
                                   None, str(tclass_name)) if tclass_name else None
        sclass_name = spec(claim).get("storageClassName")
        sclass = self.kube.storage_class(str(sclass_name)) if sclass_name else None
        if base.prime is not None:  # chosen when PVC' was made
            return dataclasses.replace(base, source=source,
                                       source_busy=self._busy(ns, claim_name, base))
        choice = clone_strategy.choose(
            override=spec(config).get("cloneStrategyOverride"),
            profile_strategy=((profile or {}).get("status") or {}).get("cloneStrategy"),
            source=claim, target=target, source_class=sclass,
            target_class=base.storage_class)
        notes = {names.CLONE_STRATEGY: choice.strategy}
        events: tuple[Emit, ...] = ()
        if choice.reason:
            notes[names.CLONE_FALLBACK_REASON] = choice.message
            events = (Emit("Warning", choice.reason, choice.message),)
        busy = self._busy(ns, claim_name, base)
        data_source = None
        if choice.strategy == clone_strategy.CSI_CLONE:
            data_source = {"apiGroup": "", "kind": "PersistentVolumeClaim", "name": claim_name}
        return dataclasses.replace(base, source=source, prime_data_source=data_source,
                                   source_busy=busy, notes=notes, note_events=events)

    def _busy(self, ns: str, claim_name: str, base: Observed) -> str:
        if base.pod is not None:
            return ""
        users = clone_strategy.writers(pods=self.kube.pods(ns), claim=claim_name)
        if not users:
            return ""
        return (f"pod(s) {', '.join(users)} write to clone source {ns}/{claim_name};"
                " the clone waits for them")
