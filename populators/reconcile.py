"""One reconcile of one target PVC: observe through the adapter, decide with
:func:`populators.flow.decide`, apply the actions, read the pod's progress, copy the
events of PVC' and the pod onto the target.

Reconciles of one target are serialised (a watch event and the periodic tick may arrive
together); different targets run concurrently.
"""

from __future__ import annotations

import datetime
import logging
import threading
import time
from typing import Any

import requests

from kubeclient import Client, KubeError
from kubeclient.resources import CDICONFIGS, EVENTS, PODS, PVCS, PVS, STORAGECLASSES
from populators import claims, events, flow, names, progress
from populators.cdiconfig import CdiConfig
from populators.cdiconfig import parse as parse_config
from populators.claims import Obj, meta, spec
from populators.importer_pod import Settings
from populators.kube import events_about, set_claim_ref, source_resource
from vocab import cdi as api

logger = logging.getLogger(__name__)

METRICS_TIMEOUT = 2.0
"""Seconds for one read of the pod's /metrics (upstream's scraper uses 2 s too)."""
PROGRESS_EVERY = 1.0
"""Least seconds between two reads of one pod's progress. A new percentage is written
onto the target, whose watch event reconciles it again: read on every reconcile, the
progress kept the populator reconciling flat out for as long as a copy ran (about 50
reconciles and 500 API requests in a 6 s clone, a core's worth of CPU between the
operator and the API server, taken from the copy). The periodic tick (2 s) still reads
it, as upstream's 2 s requeue does."""
CDI_CONFIG = "config"


class Reconciler:
    def __init__(self, kube: Client, populator: flow.Populator, settings: Settings) -> None:
        self.kube = kube
        self.populator = populator
        self.settings = settings
        self._locks: dict[str, threading.Lock] = {}
        self._guard = threading.Lock()
        self._http = requests.Session()
        self._http.trust_env = False  # the pod network is reached directly, never by proxy
        self._events_forbidden = False
        self._copied: dict[str, set[str]] = {}
        """Per target UID: names of the events already copied onto it."""
        self._progress_read: dict[str, float] = {}
        """Per target UID: when its pod's progress was last read (monotonic seconds)."""

    def close(self) -> None:
        self._http.close()

    def _lock(self, key: str) -> threading.Lock:
        with self._guard:
            return self._locks.setdefault(key, threading.Lock())

    def forget(self, key: str, uid: str = "") -> None:
        with self._guard:
            self._locks.pop(key, None)
            self._copied.pop(uid, None)
            self._progress_read.pop(uid, None)

    def is_target(self, claim: Obj) -> bool:
        return claims.source_ref(claim, kind=self.populator.kind) is not None

    def reconcile(self, namespace: str, name: str) -> bool:
        """Bring one target a step closer; True to be looked at again soon."""
        with self._lock(f"{namespace}/{name}"):
            target = self.kube.get_or_none(PVCS, name, namespace)
            if target is None or not self.is_target(target):
                return False
            observed = self._observe(target)
            plan = flow.decide(observed, self.populator, self.settings)
            logger.debug("%s/%s: %s (%d actions)", namespace, name, plan.waiting,
                         len(plan.actions))
            for action in plan.actions:
                self._apply(target, action)
            uid = str(meta(target).get("uid"))
            if plan.poll_progress and self._progress_due(uid):
                self._progress(target, plan.poll_progress)
            elif not plan.poll_progress:
                with self._guard:  # nothing to read any more: forget when it was read
                    self._progress_read.pop(uid, None)
            self._after(target, observed, plan)
            self._copy_events(target, observed)
            return plan.active

    def _after(self, target: Obj, observed: flow.Observed, plan: flow.Plan) -> None:
        """A populator's own steps once the flow's are done (the clone's source pod)."""

    def target_gone(self, target: Obj) -> None:
        """The target was deleted: remove what the populator made outside the flow's
        PVC' and pod (the clone's source pod and Secrets)."""

    def target_of_prime(self, namespace: str, prime_name: str) -> str | None:
        """``namespace/name`` of PVC''s target, to reconcile; when the target is gone, stop the pod
        and remove PVC' here (garbage collection alone would wait: PVC' is protected
        while the pod that uses it runs, and the pod goes only after PVC')."""
        prime = self.kube.get_or_none(PVCS, prime_name, namespace)
        if prime is None:
            return None
        owner = claims.prime_target(prime)
        if owner is None:
            return None
        target = self.kube.get_or_none(PVCS, owner[1], owner[0])
        if target is not None and meta(target).get("uid") == owner[2]:
            return f"{owner[0]}/{owner[1]}"
        self._remove_prime(prime, why="target gone")
        return None

    def _remove_prime(self, prime: Obj, *, why: str) -> None:
        """Stop PVC''s pod (if PVC' owns it) and delete PVC' (unless it is going already),
        each by its UID: never a namesake made since."""
        namespace, prime_name = str(meta(prime).get("namespace")), str(meta(prime).get("name"))
        pod = self.kube.get_or_none(PODS, self.populator.pod_name(prime_name), namespace)
        if pod is not None and claims.owned_by(pod, prime):
            logger.info("%s/%s: %s; deleting pod %s", namespace, prime_name, why,
                        meta(pod).get("name"))
            self.kube.delete(PODS, str(meta(pod).get("name")), namespace,
                             uid=str(meta(pod).get("uid")))
        if not meta(prime).get("deletionTimestamp"):
            self.kube.delete(PVCS, prime_name, namespace, uid=str(meta(prime).get("uid")))

    # -- observe ---------------------------------------------------------------------------

    def _observe(self, target: Obj) -> flow.Observed:
        ns = self.populator.prime_namespace(target)
        prime_name = names.prime_name(str(meta(target).get("uid")))
        prime = self.kube.get_or_none(PVCS, prime_name, ns)
        if prime is not None and not claims.prime_of(prime, target):
            prime = None  # a namesake that is not ours: never touched
        pod = None
        if prime is not None:
            pod = self.kube.get_or_none(PODS, self.populator.pod_name(prime_name), ns)
            if pod is not None and not claims.owned_by(pod, prime):
                pod = None
        volume = None
        if prime is not None and spec(prime).get("volumeName"):
            volume = self.kube.get_or_none(PVS, str(spec(prime)["volumeName"]))
        sc_name = spec(target).get("storageClassName")
        source_name = claims.source_ref(target, kind=self.populator.kind) or ""
        users: tuple[str, ...] = ()
        if prime is not None and pod is None:
            users = tuple(_users(self.kube.list(PODS, ns), prime_name,
                                 self.populator.pod_name(prime_name)))
        return flow.Observed(
            target=target,
            storage_class=self.kube.get_or_none(STORAGECLASSES, str(sc_name)) if sc_name else None,
            source=self.kube.get_or_none(source_resource(self.populator.plural),
                                         source_name, self.populator.source_namespace(target)),
            prime=prime, pod=pod, volume=volume, users=users, config=self._config())

    def _config(self) -> CdiConfig:
        return parse_config(self.kube.get_or_none(CDICONFIGS, CDI_CONFIG))

    # -- act -------------------------------------------------------------------------------

    def _apply(self, target: Obj, action: flow.Action) -> None:
        ns, name = str(meta(target).get("namespace")), str(meta(target).get("name"))
        match action:
            case flow.CreatePrime(manifest=m):
                if self.kube.create_if_absent(PVCS, m):
                    logger.info("%s/%s: created PVC' %s", ns, name, m["metadata"]["name"])
            case flow.CreatePod(manifest=m):
                if self.kube.create_if_absent(PODS, m):
                    logger.info("%s/%s: created pod %s", ns, name, m["metadata"]["name"])
            case flow.DeletePod(name=pod, uid=uid, namespace=pns):
                logger.info("%s/%s: deleting pod %s/%s", ns, name, pns or ns, pod)
                self.kube.delete(PODS, pod, pns or ns, uid=uid)
            case flow.DeletePrime(name=prime, uid=uid, namespace=pns):
                logger.info("%s/%s: deleting PVC' %s/%s", ns, name, pns or ns, prime)
                self.kube.delete(PVCS, prime, pns or ns, uid=uid)
            case flow.Annotate(changes=changes):
                self.kube.patch(PVCS, name, {"metadata": {"annotations": dict(changes)}}, ns)
            case flow.Rebind(volume=pv, claim_ref=ref, resource_version=rv):
                if set_claim_ref(self.kube, pv, ref, rv):
                    logger.info("%s/%s: volume %s rebound to the target", ns, name, pv)
            case flow.Emit() as emit:
                self.kube.create_if_absent(EVENTS, events.emitted_event(target=target, emit=emit,
                                                          now=_now()))

    def _progress_due(self, uid: str) -> bool:
        """Whether the progress of ``uid`` may be read now (and from now on counts as read)."""
        now = time.monotonic()
        with self._guard:
            if now - self._progress_read.get(uid, -PROGRESS_EVERY) < PROGRESS_EVERY:
                return False
            self._progress_read[uid] = now
            return True

    def _progress(self, target: Obj, url: str) -> None:
        uid = str(meta(target).get("uid"))
        try:
            resp = self._http.get(url, timeout=METRICS_TIMEOUT)
            resp.raise_for_status()
        except requests.RequestException as err:
            logger.debug("progress of %s not read: %s", uid, err)
            return
        value = progress.parse(resp.text[:1 << 20], metric=self.populator.metric,
                               owner_uid=uid)
        if value is None:
            return
        text = progress.render(value)
        if claims.annots(target).get(api.POPULATOR_PROGRESS) != text:
            self.kube.patch(PVCS, str(meta(target).get("name")),
                            {"metadata": {"annotations": {api.POPULATOR_PROGRESS: text}}},
                            str(meta(target).get("namespace")))

    def events_namespace(self, target: Obj) -> str | None:
        """Where the events of PVC' and the pod copied onto the target are read: PVC''s
        namespace when it is the target's; None (not copied) when PVC' lives in a clone
        source's namespace, unless the populator says otherwise (the clone's copy)."""
        ns = str(meta(target).get("namespace"))
        return ns if self.populator.prime_namespace(target) == ns else None

    def _copy_events(self, target: Obj, o: flow.Observed) -> None:
        ns = self.events_namespace(target)
        if ns is None:
            return
        with self._guard:
            done = self._copied.setdefault(str(meta(target).get("uid")), set())
        for obj in (o.prime, o.pod):
            if obj is None:
                continue
            try:
                for event in events_about(self.kube, ns, str(meta(obj).get("uid"))):
                    copy = events.copied_event(target=target, event=event)
                    if copy["metadata"]["name"] not in done:
                        self.kube.create_if_absent(EVENTS, copy)
                        done.add(copy["metadata"]["name"])
            except KubeError as err:
                if err.status == 403 and not self._events_forbidden:
                    self._events_forbidden = True
                    logger.warning("events of PVC' and pods are not copied onto targets: "
                                   "the service account may not list events (%s)", err)
                else:
                    logger.debug("events of %s not copied: %s", meta(obj).get("name"), err)


def _users(pods: list[Any], prime_name: str, own: str) -> list[str]:
    out = []
    for pod in pods:
        pm = meta(pod)
        if pm.get("name") == own or (pod.get("status") or {}).get("phase") in (
                "Succeeded", "Failed"):
            continue
        for vol in spec(pod).get("volumes") or []:
            if (vol.get("persistentVolumeClaim") or {}).get("claimName") == prime_name:
                out.append(str(pm.get("name")))
    return out


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
