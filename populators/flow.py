"""The twin-PVC flow every CDI populator shares, as one pure decision.

Given what exists now (the target PVC, its class, the source object, PVC', the pod,
PVC''s volume), :func:`decide` says what to do next. It is level-triggered: it looks
only at the present state, never at what it did before, and every object it creates has
a deterministic name, so an operator restarted at any point picks up where it was
without duplicating anything. The steps, as upstream's populator base:

1. wait until the claim is ready for population (class exists; WaitForFirstConsumer:
   a node is selected, unless immediate binding was requested);
2. create PVC' ``prime-<target uid>``, owned by the target;
3. run the populator's pod against PVC' (one at a time; not while another pod uses it);
4. follow the pod: progress, restarts, failures (permanent: give up at once; retryable:
   the kubelet restarts it until the retry limit);
5. on success rebind PVC''s volume to the target (the PV binder completes the bind);
6. once the target is bound, delete the pod and PVC' (Lost by then), unless asked to
   retain them.

What differs between populators (import, clone, upload) comes through
:class:`Populator`: where the source object lives and what it means, what PVC' carries,
and the pod.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from populators import claims, names, podstate
from populators.cdiconfig import CdiConfig
from populators.claims import Obj, annots, meta, phase, spec
from populators.errors import SourceError
from populators.importer_pod import Settings
from populators.progress import DONE
from vocab import cdi as api
from vocab import podenv

# -- hooks -----------------------------------------------------------------------------


class Populator(Protocol):
    kind: str
    """The dataSourceRef kind this populator serves (e.g. VolumeImportSource)."""
    plural: str
    """The source kind's resource plural in cdi.kubevirt.io/v1beta1."""
    metric: str
    """The pod's progress metric."""

    def source_namespace(self, target: Obj) -> str:
        """Where the source object lives."""

    def prime_namespace(self, target: Obj) -> str:
        """Where PVC' and the pod go (the target's, or a clone source's)."""

    def pod_name(self, prime: str) -> str:
        """The name of PVC''s pod."""

    def prime_annotations(self, source: Obj) -> dict[str, str]:
        """PVC' preparation: the annotations describing the source (raises SourceError)."""

    def pod(self, *, target: Obj, prime: Obj, source: Obj, config: CdiConfig,
            settings: Settings, previous_restarts: int) -> dict[str, Any]:
        """The pod that fills PVC' (raises SourceError)."""


# -- what exists -----------------------------------------------------------------------


@dataclass(frozen=True)
class Emit:
    type: str
    reason: str
    message: str


@dataclass(frozen=True)
class Observed:
    target: Obj
    storage_class: Obj | None
    source: Obj | None
    prime: Obj | None
    pod: Obj | None
    volume: Obj | None
    """PVC''s PersistentVolume, once it has one."""
    users: tuple[str, ...] = ()
    """Other unfinished pods that use PVC'."""
    config: CdiConfig = field(default_factory=CdiConfig)
    prime_data_source: Mapping[str, Any] | None = None
    """PVC''s ``dataSource`` when the storage fills it (a CSI clone): no pod then."""
    source_busy: str = ""
    """Why the source cannot be read now (a pod writes to it); the populator waits."""
    prime_request: str | None = None
    """PVC''s storage request when it must exceed the target's (a snapshot's
    restoreSize); its volume still goes to the target, a claim bound to a larger one."""
    prime_blocked: str = ""
    """Why PVC' cannot be made yet (a snapshot clone's snapshot is being taken)."""
    notes: Mapping[str, str] = field(default_factory=dict)
    """Annotations the populator's choice adds to the target (clone strategy, fallback)."""
    note_events: tuple[Emit, ...] = ()
    prime_needs_pod: bool = False
    """PVC' filled by the storage (``prime_data_source``) still needs the populator's pod
    once Bound (a CSI clone's disk.img grown to a larger claim)."""
    helper_failed: tuple[str, str] | None = None
    """(reason, message): a helper pod of the populator's (the host-assisted clone's
    source pod) failed for good; the population fails with its reason."""


# -- what to do ------------------------------------------------------------------------


@dataclass(frozen=True)
class CreatePrime:
    manifest: Mapping[str, Any]


@dataclass(frozen=True)
class CreatePod:
    manifest: Mapping[str, Any]


@dataclass(frozen=True)
class DeletePod:
    name: str
    uid: str
    namespace: str = ""
    """Empty: the target's."""


@dataclass(frozen=True)
class DeletePrime:
    name: str
    uid: str
    namespace: str = ""


@dataclass(frozen=True)
class Annotate:
    """Set these annotations on the target (only the ones that change)."""
    changes: Mapping[str, str]


@dataclass(frozen=True)
class Rebind:
    volume: str
    claim_ref: Mapping[str, Any]
    resource_version: str
    """The PV's, for an optimistic update: a concurrent change makes it fail and retry."""


Action = CreatePrime | CreatePod | DeletePod | DeletePrime | Annotate | Rebind | Emit


@dataclass(frozen=True)
class Plan:
    actions: tuple[Action, ...] = ()
    waiting: str = ""
    """Why nothing more happens now (logged)."""
    active: bool = False
    """Look again soon (a poll): progress to read, or a state no watch event announces."""
    poll_progress: str | None = None
    """The running pod's metrics URL: read it and annotate the progress."""


def _annotate(target: Obj, wanted: Mapping[str, str]) -> list[Action]:
    have = annots(target)
    changes = {k: v for k, v in wanted.items() if have.get(k) != v}
    return [Annotate(changes)] if changes else []


def _retain(target: Obj) -> bool:
    return annots(target).get(api.POD_RETAIN) == "true"


def _cleanup(o: Observed, *, keep_prime_until_lost: bool) -> list[Action]:
    acts: list[Action] = []
    if _retain(o.target):
        return acts
    if o.pod is not None:
        acts.append(_delete_pod(o.pod))
    if o.prime is not None and not meta(o.prime).get("deletionTimestamp") and (
            not keep_prime_until_lost or phase(o.prime) == "Lost"):
        acts.append(_delete_prime(o.prime))
    return acts


def _delete_pod(pod: Obj) -> DeletePod:
    m = meta(pod)
    return DeletePod(str(m.get("name")), str(m.get("uid")), str(m.get("namespace") or ""))


def _delete_prime(prime: Obj) -> DeletePrime:
    m = meta(prime)
    return DeletePrime(str(m.get("name")), str(m.get("uid")), str(m.get("namespace") or ""))


def _give_up(o: Observed, *, reason: str, message: str, restarts: int | None = None,
             ) -> Plan:
    wanted = {api.POD_PHASE: api.FAILED, api.RUNNING: "false",
              api.RUNNING_REASON: reason, api.RUNNING_MESSAGE: message}
    if restarts is not None:
        wanted[api.POD_RESTARTS] = str(restarts)
    acts: list[Action] = [*_annotate(o.target, wanted),
                          Emit("Warning", reason, message or reason)]
    acts += _cleanup(o, keep_prime_until_lost=False)
    return Plan(tuple(acts), waiting=f"failed: {reason}")


def decide(o: Observed, populator: Populator, settings: Settings) -> Plan:
    """The next actions for the target ``o.target`` (see the module docstring)."""
    t = o.target
    tann = annots(t)
    if meta(t).get("deletionTimestamp"):
        # Ownership would remove them too, but not before the importer had run on.
        acts: list[Action] = []
        if o.pod is not None:
            acts.append(_delete_pod(o.pod))
        if o.prime is not None and not meta(o.prime).get("deletionTimestamp"):
            acts.append(_delete_prime(o.prime))
        return Plan(tuple(acts), waiting="target is being deleted")

    if phase(t) == "Bound" and spec(t).get("volumeName"):
        # Populated (or bound by someone else): only PVC' and the pod to clean up.
        acts = _annotate(t, {api.POPULATOR_PROGRESS: DONE}) if tann.get(
            api.POD_PHASE) == api.SUCCEEDED else []
        acts += _cleanup(o, keep_prime_until_lost=True)
        lingering = o.prime is not None and not _retain(t)
        return Plan(tuple(acts), waiting="target bound" if not lingering
                    else "target bound; PVC' not Lost yet", active=lingering)

    if tann.get(api.POD_PHASE) == api.FAILED:
        acts = _cleanup(o, keep_prime_until_lost=False)
        return Plan(tuple(acts), waiting="import failed; nothing more to do")

    if tann.get(api.POD_PHASE) == api.SUCCEEDED and o.prime is not None:
        # Populated: the source is no longer needed (it may be gone already).
        return _rebind(o, [*_annotate(t, {api.POPULATOR_PROGRESS: DONE}),
                           *_annotate(t, {api.PVC_PRIME: names.prime_name(
                               str(meta(t).get("uid")))})])

    if o.source is None:
        return Plan(waiting=f"{populator.kind} {claims.source_ref(t, kind=populator.kind)!r}"
                    " not found", active=True)
    denied = claims.source_serves(source=o.source, target=t,
                                  source_namespace=populator.source_namespace(t))
    if denied is not None:
        return _give_up(o, reason="CrossNamespaceSourceDenied", message=denied)
    try:
        source_annotations = populator.prime_annotations(o.source)
    except SourceError as err:
        return _give_up(o, reason="InvalidSource", message=str(err))

    not_ready = claims.not_ready_reason(claim=t, storage_class=o.storage_class)
    if not_ready is not None:
        return Plan(waiting=not_ready, active=o.storage_class is None)

    prime_name = names.prime_name(str(meta(t).get("uid")))
    notes: list[Action] = [*_annotate(t, o.notes)]
    if notes:
        notes += o.note_events
    if o.prime is None:
        if o.source_busy:
            return Plan((*notes, Emit("Warning", "CloneSourceInUse", o.source_busy)),
                        waiting="source in use", active=True)
        if o.prime_blocked:
            return Plan(tuple(notes), waiting=o.prime_blocked, active=True)
        manifest = claims.render_prime(target=t, populator_kind=populator.kind,
                                       source_annotations=source_annotations,
                                       namespace=populator.prime_namespace(_noted(t, o.notes)),
                                       data_source=o.prime_data_source,
                                       request=o.prime_request)
        return Plan((*notes, CreatePrime(manifest),
                     *_annotate(t, {api.PVC_PRIME: prime_name}),
                     Emit("Normal", "CreatedPVCPrimeSuccessfully",
                          "PVC Prime created successfully")),
                    waiting="PVC' created", active=True)
    acts = [*notes, *_annotate(t, {api.PVC_PRIME: prime_name})]
    if meta(o.prime).get("deletionTimestamp"):
        return Plan(tuple(acts), waiting="PVC' is being deleted", active=True)

    if spec(o.prime).get("dataSource"):
        # The storage fills PVC' as it provisions it (a CSI clone): no pod.
        if phase(o.prime) != "Bound":
            acts += _annotate(t, {api.POD_PHASE: api.RUNNING_PHASE,
                                  api.RUNNING: "true", api.RUNNING_REASON: "",
                                  api.RUNNING_MESSAGE: ""})
            return Plan(tuple(acts), waiting="the storage is cloning", active=True)
        if not o.prime_needs_pod:
            acts += _annotate(t, {api.POD_PHASE: api.SUCCEEDED, api.RUNNING: "false",
                                  api.RUNNING_REASON: "Completed", api.POPULATOR_PROGRESS: DONE})
            return _rebind(o, acts)
        # else the populator's pod finishes what the storage made (a CSI clone into a
        # larger Filesystem claim grows its disk.img), through the pod steps below

    if o.pod is None and tann.get(api.POD_PHASE) != api.SUCCEEDED:
        if o.source_busy:
            return Plan((*acts, Emit("Warning", "CloneSourceInUse", o.source_busy)),
                        waiting="source in use", active=True)
        if o.users:
            return Plan((*acts, Emit("Warning", "ImportTargetInUse",
                                     f"pod(s) {', '.join(sorted(o.users))} use PVC "
                                     f"{prime_name}; the import waits for them")),
                        waiting="PVC' in use", active=True)
        restarts = tann.get(api.POD_RESTARTS, "0")
        try:
            pod = populator.pod(target=t, prime=o.prime, source=o.source, config=o.config,
                                settings=settings,
                                previous_restarts=int(restarts) if restarts.isdigit() else 0)
        except SourceError as err:
            return _give_up(o, reason="InvalidSource", message=str(err))
        acts.append(CreatePod(pod))
        acts += _annotate(t, {api.POD_PHASE: api.PENDING, api.RUNNING: "false",
                              api.RUNNING_REASON: api.PENDING,
                              api.RUNNING_MESSAGE: ""})
        return Plan(tuple(acts), waiting="pod created", active=True)

    if o.helper_failed is not None and tann.get(api.POD_PHASE) != api.SUCCEEDED:
        return _give_up(o, reason=o.helper_failed[0], message=o.helper_failed[1])

    if o.pod is not None:
        view = podstate.view(o.pod, retry_limit=o.config.retry_limit)
        if view.state.gives_up:
            return _give_up(o, reason=view.reason, message=view.message,
                            restarts=view.restarts)
        wanted = podstate.target_annotations(view)
        if view.state is podstate.State.RENEW:
            acts += _annotate(t, wanted)
            acts.append(_delete_pod(o.pod))
            return Plan(tuple(acts), waiting="the server's certificate is due: replacing it",
                        active=True)
        if view.state is podstate.State.REPLACE:
            wanted[api.POD_RESTARTS] = str(view.restarts + 1)
            acts += _annotate(t, wanted)
            acts.append(_delete_pod(o.pod))
            return Plan(tuple(acts), waiting=f"pod failed ({view.reason}); replacing it",
                        active=True)
        if view.state is not podstate.State.SUCCEEDED:
            acts += _annotate(t, wanted)
            url = None
            ip = (o.pod.get("status") or {}).get("podIP")
            if view.state is podstate.State.RUNNING and ip:
                url = metrics_url(str(ip))
            return Plan(tuple(acts), waiting=f"pod {view.state.value}: {view.reason}",
                        active=True, poll_progress=url)
        acts += _annotate(t, {**wanted, api.POPULATOR_PROGRESS: DONE})

    return _rebind(o, acts)


def _noted(target: Obj, notes: Mapping[str, str]) -> Obj:
    """The target as it will be once the populator's notes are on it (they decide, for
    a clone, where PVC' goes)."""
    if not notes:
        return target
    m = meta(target)
    return {**target, "metadata": {**m, "annotations": {**annots(target), **notes}}}


def _rebind(o: Observed, acts: list[Action]) -> Plan:
    """The pod succeeded: hand PVC''s volume to the target."""
    assert o.prime is not None
    if o.volume is None:
        return Plan(tuple(acts), waiting="PVC' has no volume yet", active=True)
    if claims.claim_ref_is(o.volume, o.target):
        return Plan(tuple(acts), waiting="volume rebound; waiting for the binder",
                    active=True)
    ref = claims.rebind_claim_ref(pv=o.volume, prime=o.prime, target=o.target)
    if ref is None:
        return Plan((*acts, Emit("Warning", "RebindFailed",
                                 f"volume {meta(o.volume).get('name')} is not bound to "
                                 f"{meta(o.prime).get('name')}")),
                    waiting="volume not PVC''s", active=True)
    acts.append(Rebind(str(meta(o.volume).get("name")), ref,
                       str(meta(o.volume).get("resourceVersion") or "")))
    return Plan(tuple(acts), waiting="rebinding", active=True)


def metrics_url(pod_ip: str) -> str:
    host = f"[{pod_ip}]" if ":" in pod_ip else pod_ip
    return f"http://{host}:{podenv.DEFAULT_METRICS_PORT}/metrics"
