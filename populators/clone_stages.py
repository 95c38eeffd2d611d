"""The clone populator's own stages of the twin-PVC decision (pure), placed among the
shared ones of :data:`populators.flow.STAGES` by :data:`STAGES`.

What :class:`populators.clone_populator.CloneReconciler` observes beyond the shared flow
(the ``Observed`` fields named below) is read here and nowhere else:

- ``source_busy``: a running pod writes to the source claim; neither PVC' nor the pod
  is made while it does (``CloneSourceInUse``);
- ``prime_blocked``: PVC' cannot be made yet (the snapshot it is restored from is being
  taken; the temporary claim of a host-assisted clone from a snapshot is being restored);
- PVC' with a ``dataSource`` (``csi-clone``, ``snapshot``): the storage fills it, no pod,
  unless ``prime_needs_pod`` (a clone into a larger Filesystem claim grows its disk.img
  with the flow's pod);
- ``helper_failed``: the host-assisted clone's source pod failed for good; the clone
  fails with its reason;
- the source's :data:`populators.clone_pods.PLACEMENT_KEY`: a host-assisted copy whose
  place depends on where PVC''s volume lands waits for it before its pod is made.
"""

from __future__ import annotations

from populators import clone_pods, flow
from populators.claims import phase, spec
from populators.flow import Emit, Observed, Plan, Populator
from populators.importer_pod import Settings
from populators.progress import DONE
from vocab import cdi as api


def source_in_use_before_prime(o: Observed, populator: Populator, settings: Settings,
                               ) -> Plan | None:
    """No PVC' yet and a pod writes to the source: wait (it is not read while it changes)."""
    if o.prime is not None or not o.source_busy:
        return None
    return _source_in_use(o)


def prime_blocked(o: Observed, populator: Populator, settings: Settings) -> Plan | None:
    """No PVC' yet and what it is made from is not there yet: wait."""
    if o.prime is not None or not o.prime_blocked:
        return None
    return Plan(tuple(flow.lead(o)), waiting=o.prime_blocked, active=True)


def storage_fills_prime(o: Observed, populator: Populator, settings: Settings,
                        ) -> Plan | None:
    """PVC' has a ``dataSource``: the storage fills it as it provisions it. Running until
    it is Bound, then Succeeded and rebound, unless the flow's pod must still grow it (on
    through the pod stages then)."""
    if o.prime is None or not spec(o.prime).get("dataSource"):
        return None
    acts = flow.lead(o)
    if phase(o.prime) != "Bound":
        acts += flow.annotate(o.target, {api.POD_PHASE: api.RUNNING_PHASE,
                                         api.RUNNING: "true", api.RUNNING_REASON: "",
                                         api.RUNNING_MESSAGE: ""})
        return Plan(tuple(acts), waiting="the storage is cloning", active=True)
    if o.prime_needs_pod:
        return None
    acts += flow.annotate(o.target, {api.POD_PHASE: api.SUCCEEDED, api.RUNNING: "false",
                                     api.RUNNING_REASON: "Completed",
                                     api.POPULATOR_PROGRESS: DONE})
    return flow.rebind(o, acts)


def source_in_use_before_pod(o: Observed, populator: Populator, settings: Settings,
                             ) -> Plan | None:
    """No pod yet and a pod writes to the source: wait before copying it."""
    if o.pod is not None or not o.source_busy:
        return None
    return _source_in_use(o)


def _source_in_use(o: Observed) -> Plan:
    return Plan((*flow.lead(o), Emit("Warning", "CloneSourceInUse", o.source_busy)),
                waiting="source in use", active=True)


def copy_waits_for_prime_volume(o: Observed, populator: Populator, settings: Settings,
                                ) -> Plan | None:
    """A host-assisted copy that one pod could do if PVC''s volume lands beside the
    source's: wait for PVC' (or the source claim) to be bound (it is provisioned at
    once, not for a consumer) before the pod is made."""
    if o.pod is not None or (o.source or {}).get(clone_pods.PLACEMENT_KEY) != clone_pods.WAIT:
        return None
    return Plan(tuple(flow.lead(o)), waiting="the volumes are being provisioned",
                active=True)


def source_pod_failed(o: Observed, populator: Populator, settings: Settings,
                      ) -> Plan | None:
    """The host-assisted clone's source pod failed for good: the clone fails with its
    reason."""
    if o.helper_failed is None:
        return None
    reason, message = o.helper_failed
    return flow.give_up(o, reason=reason, message=message)


STAGES = flow.extend(flow.STAGES, {
    flow.make_prime: (source_in_use_before_prime, prime_blocked),
    flow.prime_in_use: (storage_fills_prime, source_in_use_before_pod),
    flow.make_pod: (copy_waits_for_prime_volume,),
    flow.follow_pod: (source_pod_failed,),
})
"""The clone's stages: the shared ones with the clone's checks before making PVC', before
making the pod, and before following it."""
