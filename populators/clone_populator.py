"""The clone populator: VolumeCloneSource → PVC' filled from the source claim.

On the same twin-PVC base as the import populator (:mod:`populators.flow`); what
differs comes through its hooks and through :class:`CloneReconciler`:

- the strategy (:mod:`populators.clone_strategy`), chosen when PVC' is made and kept on
  the target. Whichever it is, PVC' lives in the **source** namespace
  (:meth:`ClonePopulator.prime_namespace`) and the rebind hands its volume to the target
  across namespaces, as upstream's ``tmp-pvc`` (its host-assisted clone's too):
  ``csi-clone`` gives PVC' a ``dataSource`` naming the source claim and the storage
  fills it (no pod; a claim may only name a claim of its own namespace); ``snapshot``
  first takes a VolumeSnapshot of the source (:mod:`populators.clone_snapshot`) and gives
  PVC' that as its ``dataSource``; ``copy`` (host-assisted) fills it with pods
  (:mod:`populators.clone_pods`): where one pod can mount both claims
  (:func:`populators.clone_pods.placement`: a node reaches both volumes; the namespace
  is the source claim's for both), the flow's pod alone, which reads the source claim
  itself; otherwise two, both in the source namespace: the flow's pod receives, a
  source pod streams to it over mutual TLS with a per-clone CA. The copy's pod and PVC'
  are the target's alone: their Events are copied onto it from the source namespace
  (:meth:`CloneReconciler.events_namespace`). The source namespace's users can see
  them (and, for two pods, the per-clone Secrets), as they can upstream's ``tmp-pvc``
  and pods; nothing of the target's namespace is put there;
- a source that a running pod writes to is not read (``CloneSourceInUse``);
- a source pod that fails for good fails the clone with its reason.
"""

from __future__ import annotations

import dataclasses
import datetime
import logging
from collections.abc import Mapping, Sequence
from typing import Any

from kubeclient.resources import (
    CDICONFIGS,
    PODS,
    PVCS,
    PVS,
    SECRETS,
    SNAPSHOT_CLASSES,
    SNAPSHOT_CONTENTS,
    SNAPSHOTS,
    STORAGECLASSES,
    STORAGEPROFILES,
)
from pki.certs import paired_tls
from populators import (
    claims,
    clone_pods,
    clone_snapshot,
    clone_stages,
    clone_strategy,
    flow,
    names,
    podstate,
)
from populators.cdiconfig import CdiConfig
from populators.claims import Obj, annots, meta, owner_ref, phase, spec
from populators.errors import SourceError
from populators.flow import Emit, Observed
from populators.importer_pod import Settings
from populators.kube import list_served, source_resource
from populators.reconcile import Reconciler
from vocab import cdi as api

logger = logging.getLogger(__name__)

CLONE_METRIC = "kubevirt_cdi_clone_progress_total"
TLS_VALIDITY = datetime.timedelta(days=7)
"""The per-clone certificates' lifetime: longer than any clone, short for a leaked key."""
STORAGE_FILLED = (clone_strategy.CSI_CLONE, clone_strategy.SNAPSHOT)
"""Strategies where the storage fills PVC' (from the source claim, or from a snapshot of
it): no pod copies (the flow's pod at most grows the copied disk.img)."""
SOURCE_CLAIM_KEY = "_sourceClaim"
"""Where :class:`CloneReconciler` puts the source claim it read beside the
VolumeCloneSource it hands to the hooks (never written to the API)."""
SNAPSHOT_KEY = "_snapshot"
"""Likewise: the VolumeSnapshot a ``snapshot`` clone still has to make."""
TEMP_CLAIM_KEY = "_tempClaim"
"""Likewise: the temporary claim a host-assisted clone from a snapshot still has to make."""


def source_object(source: Obj) -> tuple[str, str]:
    """(kind, name) of what a VolumeCloneSource names: a PersistentVolumeClaim, or a
    VolumeSnapshot (``snapshot.storage.k8s.io``), as upstream's."""
    ref = spec(source).get("source") or {}
    pvc = ref.get("kind") == "PersistentVolumeClaim" and ref.get("apiGroup") in (None, "")
    snap = ref.get("kind") == api.VOLUME_SNAPSHOT_KIND and ref.get(
        "apiGroup") == api.SNAPSHOT_API_GROUP
    if not (pvc or snap):
        raise SourceError(f"VolumeCloneSource {meta(source).get('name')}: spec.source.kind "
                          f"{ref.get('kind')!r} is not supported (PersistentVolumeClaim, "
                          f"{api.VOLUME_SNAPSHOT_KIND} of {api.SNAPSHOT_API_GROUP})")
    if not ref.get("name"):
        raise SourceError(f"VolumeCloneSource {meta(source).get('name')}: spec.source.name"
                          " is required")
    return str(ref["kind"]), str(ref["name"])


def source_claim_name(source: Obj) -> str:
    kind, name = source_object(source)
    if kind != "PersistentVolumeClaim":
        raise SourceError(f"VolumeCloneSource {meta(source).get('name')} names a {kind}")
    return name


def _from_snapshot(annotations: Mapping[str, str]) -> bool:
    """Whether a target's clone may have a temporary claim restored from a snapshot (its
    clone phase says a snapshot is, or was, restored)."""
    return annotations.get(api.CLONE_PHASE) in (api.CLONE_PHASE_SNAPSHOT_CLONE,
                                                api.CLONE_PHASE_HOST_CLONE)


class ClonePopulator:
    kind = "VolumeCloneSource"
    plural = "volumeclonesources"
    metric = CLONE_METRIC
    stages = clone_stages.STAGES

    def source_namespace(self, target: Obj) -> str:
        ref = spec(target).get("dataSourceRef") or {}
        return str(ref.get("namespace") or meta(target).get("namespace"))

    def prime_namespace(self, target: Obj) -> str:
        """The source namespace once a strategy is chosen, whichever: the storage fills
        PVC' from the source claim there (a claim's ``dataSource`` names a claim of its
        own namespace), and a copy's pod mounts the source claim beside PVC' (a pod
        mounts only claims of its own namespace). Before (no PVC' yet): the target's."""
        if annots(target).get(api.CLONE_STRATEGY) in clone_strategy.STRATEGIES:
            return self.source_namespace(target)
        return str(meta(target).get("namespace"))

    def pod_name(self, prime: str) -> str:
        return names.cloner_pod_name(prime)

    def prime_annotations(self, source: Obj) -> dict[str, str]:
        source_object(source)
        return {}

    def pod(self, *, target: Obj, prime: Obj, source: Obj, config: CdiConfig,
            settings: Settings, previous_restarts: int) -> dict[str, Any]:
        if annots(target).get(api.CLONE_STRATEGY) in STORAGE_FILLED:
            return clone_pods.render_grow_pod(target=target, prime=prime, config=config,
                                              settings=settings,
                                              previous_restarts=previous_restarts)
        claim = source.get(SOURCE_CLAIM_KEY)
        if not isinstance(claim, dict):
            raise SourceError("the source claim is gone")
        local = source.get(clone_pods.PLACEMENT_KEY) == clone_pods.LOCAL
        return clone_pods.render_target_pod(target=target, prime=prime, config=config,
                                            settings=settings,
                                            previous_restarts=previous_restarts,
                                            source_claim=claim if local else None)


class CloneReconciler(Reconciler):
    """The populator base's reconcile, observing also the source claim, the strategy and
    the source's writers."""

    def _observe(self, target: Obj) -> Observed:
        base = super()._observe(target)
        if base.source is None or annots(target).get(api.POD_PHASE) in (
                api.SUCCEEDED, api.FAILED):
            return base  # nothing more to read from the source
        if base.prime is None:
            self._retire_earlier_copy(target)
        try:
            kind, claim_name = source_object(base.source)
        except SourceError:
            return base  # the flow reports it
        ns = self.populator.source_namespace(target)
        if claims.source_serves(source=base.source, source_namespace=ns,
                                target=target) is not None:
            return base  # the flow refuses it: nothing of the source is read or made
        if kind == api.VOLUME_SNAPSHOT_KIND:
            return self._observe_from_snapshot(target, base, ns, claim_name)
        claim = self.kube.get_or_none(PVCS, claim_name, ns)
        if claim is None:
            return dataclasses.replace(base, source=None)
        source = {**base.source, SOURCE_CLAIM_KEY: claim}
        config = self.kube.get_or_none(CDICONFIGS, "config") or {}
        tclass_name = spec(target).get("storageClassName")
        profile = self.kube.get_or_none(STORAGEPROFILES, str(tclass_name)) if tclass_name else None
        sclass_name = spec(claim).get("storageClassName")
        sclass = self.kube.get_or_none(STORAGECLASSES, str(sclass_name)) if sclass_name else None
        if base.prime is not None:  # chosen when PVC' was made
            if base.pod is None and annots(target).get(api.CLONE_STRATEGY) == \
                    clone_strategy.COPY:
                source[clone_pods.PLACEMENT_KEY] = self._placement(claim, base)
            return dataclasses.replace(base, source=source,
                                       source_busy=self._busy(ns, claim_name, base),
                                       helper_failed=self._source_failed(target, base),
                                       prime_needs_pod=clone_strategy.needs_growing(
                                           source=claim, target=target))
        override = spec(config).get("cloneStrategyOverride")
        profile_strategy = ((profile or {}).get("status") or {}).get("cloneStrategy")
        snapshot_classes: Sequence[Obj] = ()
        profile_class = None
        if clone_strategy.asked_for(override=override, profile_strategy=profile_strategy) \
                == clone_strategy.SNAPSHOT:
            snapshot_classes = list_served(self.kube, SNAPSHOT_CLASSES)
            profile_class = self._common_snapshot_class(profile, sclass_name)
        choice = clone_strategy.choose(
            override=override, profile_strategy=profile_strategy,
            source=claim, target=target, source_class=sclass,
            target_class=base.storage_class, snapshot_classes=snapshot_classes,
            profile_snapshot_class=profile_class)
        notes = {api.CLONE_STRATEGY: choice.strategy}
        events: tuple[Emit, ...] = ()
        if choice.reason:
            notes[api.CLONE_FALLBACK_REASON] = choice.message
            events = (Emit("Warning", choice.reason, choice.message),)
        busy = self._busy(ns, claim_name, base)
        data_source = None
        request = None
        blocked = ""
        if choice.strategy == clone_strategy.CSI_CLONE:
            data_source = {"apiGroup": "", "kind": "PersistentVolumeClaim", "name": claim_name}
        elif choice.strategy == clone_strategy.SNAPSHOT and not busy:
            snap = clone_snapshot.state(self._snapshot(target), target=target,
                                        source=f"{ns}/{claim_name}")
            blocked = snap.waiting
            notes[api.CLONE_PHASE] = api.CLONE_PHASE_SNAPSHOT
            if snap.ready:
                data_source = clone_snapshot.data_source(target)
                request = snap.request
                notes[api.CLONE_PHASE] = api.CLONE_PHASE_SNAPSHOT_CLONE
            elif snap.create:
                source[SNAPSHOT_KEY] = clone_snapshot.render(
                    target=target, namespace=ns, source_claim=claim_name,
                    snapshot_class=choice.snapshot_class,
                    owner=owner_ref(base.source, kind="VolumeCloneSource",
                                    api_version=f"{api.GROUP}/{api.VERSION}"))
        return dataclasses.replace(base, source=source, prime_data_source=data_source,
                                   prime_request=request, source_busy=busy,
                                   prime_blocked=blocked, notes=notes, note_events=events)

    def _placement(self, claim: Obj, base: Observed) -> str:
        """Where the copy's pod (about to be made) runs: :func:`clone_pods.placement`."""
        assert base.prime is not None
        name = spec(claim).get("volumeName")
        volume = self.kube.get_or_none(PVS, str(name)) if name else None
        source_mode = None
        if volume is None:  # still provisioned (a class binding at once) or not yet
            cname = spec(claim).get("storageClassName")
            klass = self.kube.get_or_none(STORAGECLASSES, str(cname)) if cname else None
            source_mode = (klass or {}).get("volumeBindingMode")
        return clone_pods.placement(
            source_claim=claim, source_volume=volume, prime=base.prime,
            prime_volume=base.volume,
            binding_mode=(base.storage_class or {}).get("volumeBindingMode"),
            source_binding_mode=source_mode)

    def _observe_from_snapshot(self, target: Obj, base: Observed, ns: str,
                               name: str) -> Observed:
        """A clone from the user's VolumeSnapshot: PVC' restored from it in its namespace
        (upstream's SnapshotClone step), its volume rebound to the target; or, when the
        storage cannot restore it into the target, restored into a temporary claim and
        copied from there (upstream's host-assisted plan from a snapshot)."""
        assert base.source is not None
        snapshot = self.kube.get_or_none(SNAPSHOTS, name, ns)
        content_name = ((snapshot or {}).get("status") or {}).get(
            "boundVolumeSnapshotContentName")
        content = self.kube.get_or_none(SNAPSHOT_CONTENTS, str(content_name)) \
            if content_name else None
        temp_name = clone_snapshot.temp_claim_name(target)
        if base.prime is not None:  # restoring, restored, or copying
            if annots(target).get(api.CLONE_STRATEGY) == clone_strategy.COPY:
                temp = self.kube.get_or_none(PVCS, temp_name, ns)
                if temp is None or not clone_pods.ours(temp, target):
                    return dataclasses.replace(base, source=None)
                source = {**base.source, SOURCE_CLAIM_KEY: temp}
                if base.pod is None:  # PVC' is beside it: one pod, where a node can
                    source[clone_pods.PLACEMENT_KEY] = self._placement(temp, base)
                return dataclasses.replace(base, source=source,
                                           helper_failed=self._source_failed(target, base))
            restored = clone_snapshot.restored_claim(snapshot, content)
            return dataclasses.replace(base, prime_needs_pod=restored is not None and
                                       clone_strategy.needs_growing(source=restored,
                                                                    target=target))
        got = clone_snapshot.from_snapshot(snapshot, content=content, target=target,
                                           target_class=base.storage_class,
                                           source=f"{ns}/{name}")
        if got.fallback is None or snapshot is None:
            notes: dict[str, str] = {}
            if got.data_source is not None:
                notes = {api.CLONE_STRATEGY: clone_strategy.SNAPSHOT,
                         api.CLONE_PHASE: api.CLONE_PHASE_SNAPSHOT_CLONE}
            return dataclasses.replace(base, prime_data_source=got.data_source,
                                       prime_request=got.request, prime_blocked=got.waiting,
                                       notes=notes)
        reason, message = got.fallback
        notes = {api.CLONE_STRATEGY: clone_strategy.COPY,
                 api.CLONE_FALLBACK_REASON: message,
                 api.CLONE_PHASE: api.CLONE_PHASE_SNAPSHOT_CLONE}
        events: tuple[Emit, ...] = ()
        if annots(target).get(api.CLONE_FALLBACK_REASON) != message:
            events = (Emit("Warning", reason, message),)
        source = dict(base.source)
        temp = self.kube.get_or_none(PVCS, temp_name, ns)
        blocked = ""
        if temp is None:
            driver = ((content or {}).get("spec") or {}).get("driver")
            klass = clone_snapshot.temp_class(
                list_served(self.kube, STORAGECLASSES),
                str(driver) if driver else None)
            if klass is None:
                blocked = clone_snapshot.NO_TEMP_CLASS
            else:
                source[TEMP_CLAIM_KEY] = clone_snapshot.render_temp_claim(
                    target=target, snapshot=snapshot, content=content, namespace=ns,
                    storage_class=klass,
                    owner=owner_ref(base.source, kind="VolumeCloneSource",
                                    api_version=f"{api.GROUP}/{api.VERSION}"))
                blocked = f"restoring snapshot {ns}/{name} into {temp_name}"
        elif not clone_pods.ours(temp, target):
            blocked = (f"PersistentVolumeClaim {ns}/{temp_name} exists and was not made for"
                       " this clone")
        else:
            # not waiting for it to be Bound: in a WaitForFirstConsumer class (upstream's
            # choice may be one) the source pod reading it is what binds it
            source[SOURCE_CLAIM_KEY] = temp
            notes[api.CLONE_PHASE] = api.CLONE_PHASE_HOST_CLONE
        return dataclasses.replace(base, source=source, prime_blocked=blocked, notes=notes,
                                   note_events=events)

    def _temp_claim_step(self, target: Obj, observed: Observed, *, finished: bool) -> None:
        """Make the temporary claim a host-assisted clone from a snapshot waits for;
        delete it once the clone ended."""
        wanted = (observed.source or {}).get(TEMP_CLAIM_KEY)
        if isinstance(wanted, dict) and not finished:
            if self.kube.create_if_absent(PVCS, wanted):
                logger.info("%s/%s: created %s/%s from the snapshot",
                            meta(target).get("namespace"), meta(target).get("name"),
                            wanted["metadata"]["namespace"], wanted["metadata"]["name"])
            return
        if finished:
            self._delete_temp_claim(target)

    def _delete_temp_claim(self, target: Obj) -> None:
        ns = self.populator.source_namespace(target)
        temp = self.kube.get_or_none(PVCS, clone_snapshot.temp_claim_name(target), ns)
        if temp is not None and clone_pods.ours(temp, target) and not meta(temp).get(
                "deletionTimestamp"):
            logger.info("%s/%s: deleting %s/%s", meta(target).get("namespace"),
                        meta(target).get("name"), ns, meta(temp).get("name"))
            self.kube.delete(PVCS, str(meta(temp).get("name")), ns,
                             uid=str(meta(temp).get("uid")))

    def _snapshot(self, target: Obj) -> Obj | None:
        return self.kube.get_or_none(SNAPSHOTS, clone_snapshot.snapshot_name(target),
                                     self.populator.source_namespace(target))

    def _common_snapshot_class(self, target_profile: Obj | None,
                               source_class: Any) -> str | None:
        """The VolumeSnapshotClass both claims' StorageProfiles name (upstream's common
        ``snapshotClass``), None unless both name the same one."""
        source_profile = self.kube.get_or_none(STORAGEPROFILES, str(source_class)) \
            if source_class else None
        found = {((p or {}).get("status") or {}).get("snapshotClass")
                 for p in (target_profile, source_profile)}
        return str(found.pop()) if len(found) == 1 and None not in found else None

    def _busy(self, ns: str, claim_name: str, base: Observed) -> str:
        if base.pod is not None:
            return ""
        users = clone_strategy.writers(pods=self.kube.list(PODS, ns), claim=claim_name)
        if not users:
            return ""
        return (f"pod(s) {', '.join(users)} write to clone source {ns}/{claim_name};"
                " the clone waits for them")

    def events_namespace(self, target: Obj) -> str | None:
        """A copy's PVC' and pod are the target's alone, wherever they run: their events
        (scheduling, image pulls, starts, back-offs) are copied onto the target from the
        source namespace, as when they ran beside it. A storage-filled PVC''s are not
        (as before: the provisioner's account of the source namespace)."""
        if annots(target).get(api.CLONE_STRATEGY) == clone_strategy.COPY:
            return self.populator.prime_namespace(target)
        return super().events_namespace(target)

    # -- the host-assisted copy's source side --------------------------------------------

    def _retire_earlier_copy(self, target: Obj) -> None:
        """A copy begun by an earlier rootdisk (before round 25) kept PVC', its pod and
        the target's TLS Secret in the target's namespace. This version looks for PVC'
        beside the source: it would make a second one and copy again, and the first (a
        volume as large as the disk, owned by the target) would stay as long as the disk,
        its source pod streaming to a target pod nobody watches. Found (ours: owned by
        the target) with none beside the source, it goes with its pod, the source pod and
        both Secrets (each only if ours), and the copy starts over beside the source."""
        tns = str(meta(target).get("namespace"))
        if annots(target).get(api.CLONE_STRATEGY) != clone_strategy.COPY \
                or self.populator.prime_namespace(target) == tns:
            return
        uid = str(meta(target).get("uid"))
        name = names.prime_name(uid)
        earlier = self.kube.get_or_none(PVCS, name, tns)
        if earlier is None or not claims.prime_of(earlier, target):
            return
        logger.info("%s/%s: PVC' %s of a copy begun by an earlier version is in the"
                    " target's namespace; retiring it, the copy starts over beside the"
                    " source", tns, meta(target).get("name"), name)
        self._remove_prime(earlier, why="an earlier version's copy")
        self._delete_source_pod(target)
        self._delete_secrets(target, target_side=tns)

    def _delete_source_pod(self, target: Obj) -> None:
        source_pod = self._source_pod(target)
        if source_pod is not None:
            self.kube.delete(PODS, str(meta(source_pod).get("name")),
                             str(meta(source_pod).get("namespace")),
                             uid=str(meta(source_pod).get("uid")))

    def _source_pod(self, target: Obj) -> Obj | None:
        pod = self.kube.get_or_none(PODS, names.clone_source_pod_name(str(meta(target).get("uid"))),
                                    self.populator.source_namespace(target))
        return pod if clone_pods.ours(pod, target) else None

    def _source_failed(self, target: Obj, base: Observed) -> tuple[str, str] | None:
        if annots(target).get(api.CLONE_STRATEGY) != clone_strategy.COPY:
            return None
        pod = self._source_pod(target)
        if pod is None:
            return None
        view = podstate.view(pod, retry_limit=base.config.retry_limit)
        return (view.reason, f"clone source: {view.message}") if view.state.gives_up else None

    def _apply(self, target: Obj, action: flow.Action) -> None:
        if isinstance(action, flow.CreatePod) and annots(target).get(
                api.CLONE_STRATEGY) == clone_strategy.COPY and not clone_pods.is_local(
                action.manifest):
            self._ensure_tls(target)
        super()._apply(target, action)

    def _ensure_tls(self, target: Obj) -> None:
        """Both halves of the clone's TLS material, from one fresh CA, before the target
        pod that needs them (a half-made pair is replaced whole): the target's beside
        PVC' and the target pod, the source's beside the source pod."""
        uid = str(meta(target).get("uid"))
        tns = self.populator.prime_namespace(target)
        sns = self.populator.source_namespace(target)
        tname, sname = names.clone_secret_names(uid)
        have_t = self.kube.get_or_none(SECRETS, tname, tns)
        have_s = self.kube.get_or_none(SECRETS, sname, sns)
        if clone_pods.secrets_match(have_t, have_s):
            return
        for ns, have in ((tns, have_t), (sns, have_s)):
            if have is not None and clone_pods.ours(have, target):
                self.kube.delete(SECRETS, str(meta(have).get("name")), ns,
                                 uid=str(meta(have).get("uid")))
        self._delete_source_pod(target)  # it holds the old material
        prime = self.kube.get_or_none(PVCS, names.prime_name(uid), tns)
        vcs = self.kube.get_or_none(source_resource(self.populator.plural),
                                    str(spec(target).get("dataSourceRef", {}).get("name")), sns)
        if prime is None or vcs is None:
            return
        pair = paired_tls(server_name=clone_pods.SERVER_NAME,
                          client_name=clone_pods.CLIENT_NAME,
                          now=datetime.datetime.now(datetime.UTC), validity=TLS_VALIDITY)
        self.kube.create_if_absent(SECRETS, clone_pods.render_secret(
            name=tname, namespace=tns, ca=pair.server.ca, cert=pair.server.cert,
            key=pair.server.key, fingerprint=pair.fingerprint, target=target,
            owner=owner_ref(prime, kind="PersistentVolumeClaim")))
        self.kube.create_if_absent(SECRETS, clone_pods.render_secret(
            name=sname, namespace=sns, ca=pair.client.ca, cert=pair.client.cert,
            key=pair.client.key, fingerprint=pair.fingerprint, target=target,
            owner=owner_ref(vcs, kind="VolumeCloneSource",
                            api_version=f"{api.GROUP}/{api.VERSION}")))
        logger.info("%s/%s: made the clone's TLS Secrets %s/%s, %s/%s",
                    meta(target).get("namespace"), meta(target).get("name"), tns, tname,
                    sns, sname)

    def _after(self, target: Obj, observed: Observed, plan: flow.Plan) -> None:
        ann = dict(annots(target))
        for action in plan.actions:
            if isinstance(action, flow.Annotate):
                ann.update(action.changes)
        finished = bool(meta(target).get("deletionTimestamp")) or phase(target) == "Bound" \
            or ann.get(api.POD_PHASE) in (api.SUCCEEDED, api.FAILED)
        if ann.get(api.CLONE_STRATEGY) == clone_strategy.SNAPSHOT:
            self._snapshot_step(target, observed, finished=finished)
        if _from_snapshot(ann) and ann.get(api.CLONE_STRATEGY) == clone_strategy.COPY:
            self._temp_claim_step(target, observed, finished=finished)
        if ann.get(api.CLONE_STRATEGY) != clone_strategy.COPY:
            return
        if finished and not meta(target).get("deletionTimestamp") and ann.get(
                api.POD_RETAIN) == "true":
            return  # kept for inspection, as the flow keeps the target pod and PVC'

        source_pod = self._source_pod(target)
        target_pod = observed.pod
        if any(isinstance(a, flow.DeletePod) for a in plan.actions):
            target_pod = None
        step = clone_pods.source_step(finished=finished, target_pod=target_pod,
                                      source_pod=source_pod)
        if step.delete_pod and source_pod is not None:
            logger.info("%s/%s: deleting clone source pod", meta(target).get("namespace"),
                        meta(target).get("name"))
            self.kube.delete(PODS, str(meta(source_pod).get("name")),
                             str(meta(source_pod).get("namespace")),
                             uid=str(meta(source_pod).get("uid")))
        if step.delete_secrets:
            self._delete_secrets(target)
        if step.create and observed.source is not None and not clone_pods.is_local(
                target_pod):
            claim = observed.source.get(SOURCE_CLAIM_KEY)
            if isinstance(claim, dict):
                pod = clone_pods.render_source_pod(
                    target=target, source_claim=claim, clone_source=observed.source,
                    address=clone_pods.target_address(target_pod), config=observed.config,
                    settings=self.settings,
                    target_restarts=clone_pods.target_restarts(target_pod))
                if self.kube.create_if_absent(PODS, pod):
                    logger.info("%s/%s: created clone source pod %s/%s",
                                meta(target).get("namespace"), meta(target).get("name"),
                                pod["metadata"]["namespace"], pod["metadata"]["name"])

    def _snapshot_step(self, target: Obj, observed: Observed, *, finished: bool) -> None:
        """Make the snapshot the plan waits for; delete it once PVC' is restored from it
        or the clone ended."""
        wanted = (observed.source or {}).get(SNAPSHOT_KEY)
        if isinstance(wanted, dict) and not finished:
            if self.kube.create_if_absent(SNAPSHOTS, wanted):
                logger.info("%s/%s: created VolumeSnapshot %s/%s", meta(target).get("namespace"),
                            meta(target).get("name"), wanted["metadata"]["namespace"],
                            wanted["metadata"]["name"])
            return
        if clone_snapshot.done_with(prime=observed.prime, finished=finished):
            self._delete_snapshot(target)

    def _delete_snapshot(self, target: Obj) -> None:
        snap = self._snapshot(target)
        if snap is not None and clone_pods.ours(snap, target) and not meta(snap).get(
                "deletionTimestamp"):
            logger.info("%s/%s: deleting VolumeSnapshot %s", meta(target).get("namespace"),
                        meta(target).get("name"), meta(snap).get("name"))
            self.kube.delete(SNAPSHOTS, str(meta(snap).get("name")),
                             str(meta(snap).get("namespace")), uid=str(meta(snap).get("uid")))

    def _delete_secrets(self, target: Obj, *, target_side: str | None = None) -> None:
        """Both halves of the clone's TLS material, each only if made for ``target``: the
        target's beside PVC' (or in ``target_side``), the source's beside the source pod."""
        tname, sname = names.clone_secret_names(str(meta(target).get("uid")))
        for ns, name in ((target_side or self.populator.prime_namespace(target), tname),
                         (self.populator.source_namespace(target), sname)):
            have = self.kube.get_or_none(SECRETS, name, ns)
            if have is not None and clone_pods.ours(have, target):
                self.kube.delete(SECRETS, name, ns, uid=str(meta(have).get("uid")))

    def target_gone(self, target: Obj) -> None:
        if _from_snapshot(annots(target)):
            self._delete_temp_claim(target)
        if annots(target).get(api.CLONE_STRATEGY) == clone_strategy.SNAPSHOT:
            self._delete_snapshot(target)
        if annots(target).get(api.CLONE_STRATEGY) != clone_strategy.COPY:
            return
        self._delete_source_pod(target)
        self._delete_secrets(target)
