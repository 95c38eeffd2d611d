"""The twin-PVC flow every CDI populator shares, as one pure decision made in stages.

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

The decision is an ordered tuple of stages (:data:`STAGES`, as the VM domain's
configurators): each looks at the :class:`Observed` state and returns a :class:`Plan`
when it decides, None to pass; :func:`decide` runs a populator's ``stages`` in order and
the first Plan wins. What differs between populators (import, clone, upload) comes
through :class:`Populator`: where the source object lives and what it means, what PVC'
carries, the pod, and its ``stages``: the shared ones, or those with the populator's own
checks placed among them by :func:`extend` (the clone's, :mod:`populators.clone_stages`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from populators import claims, names, podstate
from populators.cdiconfig import CdiConfig
from populators.claims import Obj, annots, meta, phase, spec
from populators.errors import PopulatorError, SourceError
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
    stages: tuple[Stage, ...]
    """The decision's stages in order (:data:`STAGES`, or those :func:`extend`-ed with
    the populator's own)."""

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
    """What one reconcile read. The first fields are every populator's; the last ones
    only a populator that observes more sets (the clone's), and only its own stages
    (:mod:`populators.clone_stages`) read them."""

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
    # How PVC' is made and what the target is told (read by the shared stages; set by a
    # populator that chooses, the clone):
    prime_data_source: Mapping[str, Any] | None = None
    """PVC''s ``dataSource`` when the storage fills it (a CSI clone): no pod then."""
    prime_request: str | None = None
    """PVC''s storage request when it must exceed the target's (a snapshot's
    restoreSize); its volume still goes to the target, a claim bound to a larger one."""
    notes: Mapping[str, str] = field(default_factory=dict)
    """Annotations the populator's choice adds to the target (clone strategy, fallback)."""
    note_events: tuple[Emit, ...] = ()
    # Read only by the clone's stages (populators.clone_stages):
    source_busy: str = ""
    """Why the source cannot be read now (a pod writes to it); the populator waits."""
    prime_blocked: str = ""
    """Why PVC' cannot be made yet (a snapshot clone's snapshot is being taken)."""
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


Stage = Callable[[Observed, Populator, Settings], Plan | None]
"""One step of the decision: a Plan when it decides, None to let the next stage look.
A stage may rely on the stages before it in its populator's ``stages`` having passed
(returned None): :data:`STAGES` is an order, not a set of independent rules."""


def annotate(target: Obj, wanted: Mapping[str, str]) -> list[Action]:
    """An :class:`Annotate` of the ``wanted`` annotations the target does not have yet."""
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


def give_up(o: Observed, *, reason: str, message: str, restarts: int | None = None,
            ) -> Plan:
    """The population failed for good: the target's Failed annotations, a Warning, and
    PVC' and the pod removed (unless retained)."""
    wanted = {api.POD_PHASE: api.FAILED, api.RUNNING: "false",
              api.RUNNING_REASON: reason, api.RUNNING_MESSAGE: message}
    if restarts is not None:
        wanted[api.POD_RESTARTS] = str(restarts)
    acts: list[Action] = [*annotate(o.target, wanted),
                          Emit("Warning", reason, message or reason)]
    acts += _cleanup(o, keep_prime_until_lost=False)
    return Plan(tuple(acts), waiting=f"failed: {reason}")


def lead(o: Observed) -> list[Action]:
    """What every plan from PVC' on starts with: the populator's notes on the target
    (with their events, when they change it) and, once PVC' exists, its name."""
    acts = annotate(o.target, o.notes)
    if acts:
        acts += o.note_events
    if o.prime is not None:
        acts += annotate(o.target, {api.PVC_PRIME: _prime_name(o.target)})
    return acts


def _prime_name(target: Obj) -> str:
    return names.prime_name(str(meta(target).get("uid")))


# -- the stages, in their order ----------------------------------------------------------


def target_deleted(o: Observed, populator: Populator, settings: Settings) -> Plan | None:
    """The target is being deleted: remove the pod and PVC' now (ownership would remove
    them too, but not before the importer had run on)."""
    if not meta(o.target).get("deletionTimestamp"):
        return None
    acts: list[Action] = []
    if o.pod is not None:
        acts.append(_delete_pod(o.pod))
    if o.prime is not None and not meta(o.prime).get("deletionTimestamp"):
        acts.append(_delete_prime(o.prime))
    return Plan(tuple(acts), waiting="target is being deleted")


def target_bound(o: Observed, populator: Populator, settings: Settings) -> Plan | None:
    """Populated (or bound by someone else): only PVC' and the pod to clean up, PVC' once
    Lost."""
    t = o.target
    if not (phase(t) == "Bound" and spec(t).get("volumeName")):
        return None
    acts = annotate(t, {api.POPULATOR_PROGRESS: DONE}) if annots(t).get(
        api.POD_PHASE) == api.SUCCEEDED else []
    acts += _cleanup(o, keep_prime_until_lost=True)
    lingering = o.prime is not None and not _retain(t)
    return Plan(tuple(acts), waiting="target bound" if not lingering
                else "target bound; PVC' not Lost yet", active=lingering)


def population_failed(o: Observed, populator: Populator, settings: Settings) -> Plan | None:
    """Given up earlier: PVC' and the pod go, nothing more happens."""
    if annots(o.target).get(api.POD_PHASE) != api.FAILED:
        return None
    return Plan(tuple(_cleanup(o, keep_prime_until_lost=False)),
                waiting="import failed; nothing more to do")


def population_succeeded(o: Observed, populator: Populator, settings: Settings,
                         ) -> Plan | None:
    """PVC' was filled (the pod may be gone already): rebind its volume to the target; the
    source is no longer needed (it may be gone too)."""
    t = o.target
    if annots(t).get(api.POD_PHASE) != api.SUCCEEDED or o.prime is None:
        return None
    return rebind(o, [*annotate(t, {api.POPULATOR_PROGRESS: DONE}),
                      *annotate(t, {api.PVC_PRIME: _prime_name(t)})])


def source_missing(o: Observed, populator: Populator, settings: Settings) -> Plan | None:
    """No source object (yet): wait for it."""
    if o.source is not None:
        return None
    return Plan(waiting=f"{populator.kind} "
                f"{claims.source_ref(o.target, kind=populator.kind)!r} not found", active=True)


def source_denied(o: Observed, populator: Populator, settings: Settings) -> Plan | None:
    """A source in another namespace that does not serve this target: fail."""
    assert o.source is not None  # source_missing ran before
    denied = claims.source_serves(source=o.source, target=o.target,
                                  source_namespace=populator.source_namespace(o.target))
    if denied is None:
        return None
    return give_up(o, reason="CrossNamespaceSourceDenied", message=denied)


def source_invalid(o: Observed, populator: Populator, settings: Settings) -> Plan | None:
    """A source that cannot work as written (the populator's ``prime_annotations``
    raises): fail."""
    assert o.source is not None  # source_missing ran before
    try:
        populator.prime_annotations(o.source)
    except SourceError as err:
        return give_up(o, reason="InvalidSource", message=str(err))
    return None


def claim_not_ready(o: Observed, populator: Populator, settings: Settings) -> Plan | None:
    """Not ready for population (no class; WaitForFirstConsumer without a node): wait."""
    not_ready = claims.not_ready_reason(claim=o.target, storage_class=o.storage_class)
    if not_ready is None:
        return None
    return Plan(waiting=not_ready, active=o.storage_class is None)


def make_prime(o: Observed, populator: Populator, settings: Settings) -> Plan | None:
    """No PVC' yet: create it (and note its name on the target)."""
    if o.prime is not None:
        return None
    assert o.source is not None  # source_missing ran before
    t = o.target
    manifest = claims.render_prime(target=t, populator_kind=populator.kind,
                                   source_annotations=populator.prime_annotations(o.source),
                                   namespace=populator.prime_namespace(_noted(t, o.notes)),
                                   data_source=o.prime_data_source,
                                   request=o.prime_request)
    return Plan((*lead(o), CreatePrime(manifest),
                 *annotate(t, {api.PVC_PRIME: _prime_name(t)}),
                 Emit("Normal", "CreatedPVCPrimeSuccessfully",
                      "PVC Prime created successfully")),
                waiting="PVC' created", active=True)


def prime_deleting(o: Observed, populator: Populator, settings: Settings) -> Plan | None:
    """PVC' is going away (a namesake of ours, deleted by someone): wait until it is gone."""
    if o.prime is None or not meta(o.prime).get("deletionTimestamp"):
        return None
    return Plan(tuple(lead(o)), waiting="PVC' is being deleted", active=True)


def prime_in_use(o: Observed, populator: Populator, settings: Settings) -> Plan | None:
    """No pod yet and other pods use PVC': the pod waits for them (ImportTargetInUse)."""
    if o.pod is not None or not o.users:
        return None
    return Plan((*lead(o), Emit("Warning", "ImportTargetInUse",
                                f"pod(s) {', '.join(sorted(o.users))} use PVC "
                                f"{_prime_name(o.target)}; the import waits for them")),
                waiting="PVC' in use", active=True)


def make_pod(o: Observed, populator: Populator, settings: Settings) -> Plan | None:
    """No pod yet: create the populator's pod on PVC' (restarts carried over)."""
    if o.pod is not None:
        return None
    assert o.prime is not None and o.source is not None  # make_prime ran before
    t = o.target
    restarts = annots(t).get(api.POD_RESTARTS, "0")
    try:
        pod = populator.pod(target=t, prime=o.prime, source=o.source, config=o.config,
                            settings=settings,
                            previous_restarts=int(restarts) if restarts.isdigit() else 0)
    except SourceError as err:
        return give_up(o, reason="InvalidSource", message=str(err))
    return Plan((*lead(o), CreatePod(pod),
                 *annotate(t, {api.POD_PHASE: api.PENDING, api.RUNNING: "false",
                               api.RUNNING_REASON: api.PENDING, api.RUNNING_MESSAGE: ""})),
                waiting="pod created", active=True)


def follow_pod(o: Observed, populator: Populator, settings: Settings) -> Plan | None:
    """The pod runs: its state onto the target; replace it when it must be, give up when
    it failed for good; once it succeeded, rebind PVC''s volume to the target."""
    if o.pod is None:
        return None
    t = o.target
    acts = lead(o)
    view = podstate.view(o.pod, retry_limit=o.config.retry_limit)
    if view.state.gives_up:
        return give_up(o, reason=view.reason, message=view.message, restarts=view.restarts)
    wanted = podstate.target_annotations(view)
    if view.state is podstate.State.RENEW:
        acts += annotate(t, wanted)
        acts.append(_delete_pod(o.pod))
        return Plan(tuple(acts), waiting="the server's certificate is due: replacing it",
                    active=True)
    if view.state is podstate.State.REPLACE:
        wanted[api.POD_RESTARTS] = str(view.restarts + 1)
        acts += annotate(t, wanted)
        acts.append(_delete_pod(o.pod))
        return Plan(tuple(acts), waiting=f"pod failed ({view.reason}); replacing it",
                    active=True)
    if view.state is not podstate.State.SUCCEEDED:
        acts += annotate(t, wanted)
        url = None
        ip = (o.pod.get("status") or {}).get("podIP")
        if view.state is podstate.State.RUNNING and ip:
            url = metrics_url(str(ip))
        return Plan(tuple(acts), waiting=f"pod {view.state.value}: {view.reason}",
                    active=True, poll_progress=url)
    acts += annotate(t, {**wanted, api.POPULATOR_PROGRESS: DONE})
    return rebind(o, acts)


STAGES: tuple[Stage, ...] = (
    target_deleted,
    target_bound,
    population_failed,
    population_succeeded,
    source_missing,
    source_denied,
    source_invalid,
    claim_not_ready,
    make_prime,
    prime_deleting,
    prime_in_use,
    make_pod,
    follow_pod,
)
"""The twin-PVC flow's stages, in the order they run (the steps of the module docstring):
every populator's ``stages`` unless it extends them (:func:`extend`)."""


def extend(stages: Sequence[Stage], before: Mapping[Stage, Sequence[Stage]],
           ) -> tuple[Stage, ...]:
    """``stages`` with ``before[s]`` run just before each ``s`` (a populator's own checks
    placed among the shared ones). Raises ValueError for a ``s`` not among ``stages``."""
    unknown = [getattr(s, "__name__", repr(s)) for s in before if s not in stages]
    if unknown:
        raise ValueError(f"extend: not among the stages: {', '.join(unknown)}")
    out: list[Stage] = []
    for stage in stages:
        out += before.get(stage, ())
        out.append(stage)
    return tuple(out)


class NoDecision(PopulatorError):
    """No stage of a populator decided (its ``stages`` end without a catch-all): a
    programming error, never a state of the API."""


def decide(o: Observed, populator: Populator, settings: Settings) -> Plan:
    """The next actions for the target ``o.target``: the plan of the first of the
    populator's ``stages`` that decides (see the module docstring)."""
    for stage in populator.stages:
        plan = stage(o, populator, settings)
        if plan is not None:
            return plan
    raise NoDecision(f"no stage of {populator.kind} decided for "
                     f"{meta(o.target).get('namespace')}/{meta(o.target).get('name')}")


def _noted(target: Obj, notes: Mapping[str, str]) -> Obj:
    """The target as it will be once the populator's notes are on it (they decide, for
    a clone, where PVC' goes)."""
    if not notes:
        return target
    m = meta(target)
    return {**target, "metadata": {**m, "annotations": {**annots(target), **notes}}}


def rebind(o: Observed, acts: list[Action]) -> Plan:
    """PVC' is filled: hand its volume to the target."""
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
