"""A DataVolume's status from its claim and what the populator wrote on it (pure).

The DataVolume controller never looks at importer pods: the populator copies the pod's
phase, restarts, running condition and progress onto the target PVC as annotations
(upstream's names, ``cdi.kubevirt.io/storage.pod.phase`` and friends), and this module
turns those and the claim's own phase into the DataVolume's phase, progress,
restartCount and conditions (Bound, Ready, Running, with upstream's reasons and
messages), plus the Events a phase change announces.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from vocab import cdi as api

Obj = dict[str, Any]

PERMANENT = frozenset({"InvalidVolumeMode", "UnsupportedSource", "MissingStorage",
                       "CloneValidationFailed", "CloneUnauthorized"})
"""Controller-side failures no later change can mend: the DataVolume's spec is immutable."""


class Waiting(tuple[str, str]):
    """A (reason, message) failure the DataVolume waits out, Pending whatever the reason,
    and announces with a Warning Event: upstream's snapshot clone leaves the phase as it
    is for a snapshot not found (``CloneWithoutSource``) or not valid for a clone yet
    (``CloneValidationFailed``), and tries again."""

    def __new__(cls, reason: str, message: str) -> Waiting:
        return super().__new__(cls, (reason, message))


def _failed_phase(failure: tuple[str, str]) -> str:
    if isinstance(failure, Waiting):
        return api.PENDING
    return api.FAILED if failure[0] in PERMANENT else api.PENDING


@dataclass(frozen=True)
class Event:
    type: str
    reason: str
    message: str


@dataclass(frozen=True)
class Observed:
    phase: str
    progress: str
    restarts: int
    bound: tuple[str, str, str]    # status, reason, message
    running: tuple[str, str, str]
    ready: tuple[str, str, str]


def observe(
    *, dv: Mapping[str, Any], claim: Mapping[str, Any] | None,
    storage_class: Mapping[str, Any] | None, failure: tuple[str, str] | None = None,
) -> Observed:
    """What the DataVolume's status should say now.

    ``failure`` is a (reason, message) the controller itself hit (e.g. rendering the claim
    failed). As upstream, most leave the DataVolume Pending with the reason on its
    conditions (a StorageProfile may be completed, a class created, a claim in the way
    deleted); the ones nothing can mend (:data:`PERMANENT`) make it Failed.
    """
    previous = (dv.get("status") or {}).get("phase")
    name = dv["metadata"]["name"]
    if claim is None:
        if failure is not None:
            phase = _failed_phase(failure)
            return Observed(phase, "N/A", 0, ("Unknown", "NotFound", "No PVC found"),
                            ("False", failure[0], failure[1]),
                            ("False", failure[0], failure[1]))
        return Observed(api.PENDING, "N/A", 0, ("Unknown", "NotFound", "No PVC found"),
                        ("False", "", ""), ("False", "", ""))
    anns = (claim.get("metadata") or {}).get("annotations") or {}
    claim_name = claim["metadata"]["name"]
    claim_phase = (claim.get("status") or {}).get("phase") or "Pending"
    restarts = _int(anns.get(api.POD_RESTARTS))
    running = _running(anns)
    if claim_phase == "Bound":
        bound = ("True", "Bound", f"PVC {claim_name} Bound")
    elif claim_phase == "Lost":
        bound = ("False", "ClaimLost", "Claim Lost")
    else:
        bound = ("False", "Pending", f"PVC {claim_name} Pending")
    pod_phase = anns.get(api.POD_PHASE)
    populated = claim_phase == "Bound" and (
        pod_phase == "Succeeded" or not _has_populator(claim) or previous == api.SUCCEEDED)
    if previous == api.SUCCEEDED or populated:
        return Observed(api.SUCCEEDED, "100.0%", restarts, bound,
                        ("False", running[1] or "Completed", running[2]), ("True", "", ""))
    if failure is not None:
        phase = _failed_phase(failure)
        return Observed(phase, "N/A", restarts, bound, ("False", *failure),
                        ("False", *failure))
    if pod_phase == "Failed" or claim_phase == "Lost":
        reason = running[1] or ("ClaimLost" if claim_phase == "Lost" else "Error")
        message = running[2] or ("Claim Lost" if claim_phase == "Lost" else "Import failed")
        return Observed(api.FAILED, anns.get(api.POPULATOR_PROGRESS) or "N/A", restarts,
                        bound, ("False", reason, message), ("False", reason, message))
    if _waits_for_consumer(claim, storage_class):
        phase = api.PENDING_POPULATION if _has_populator(claim) else api.WAIT_FOR_FIRST_CONSUMER
        return Observed(phase, "N/A", restarts, bound, running, ("False", "", ""))
    if _is_upload(claim):
        return _upload(anns, pod_phase, restarts, bound, running, name)
    cloning = _is_clone(claim)
    step = _CLONE_STEPS.get(anns.get(api.CLONE_PHASE) or "") if cloning else None
    if step is not None:
        # the clone populator's step, as upstream's populatorPhaseMap: the snapshot taken,
        # restored, then (the pod's phase Succeeded, the claim not Bound yet) rebound
        if pod_phase == "Succeeded":
            step = api.REBIND_IN_PROGRESS
        return Observed(step, anns.get(api.POPULATOR_PROGRESS) or "N/A", restarts, bound,
                        running, ("False", "TransferRunning", f"Clone into {name} in progress"))
    if pod_phase in ("Running", "Succeeded"):
        # Succeeded on a claim not Bound yet: the populator is rebinding the imported
        # volume to it; the import is still in progress (as upstream), not re-scheduled
        return Observed(api.CLONE_IN_PROGRESS if cloning else api.IMPORT_IN_PROGRESS,
                        anns.get(api.POPULATOR_PROGRESS) or "N/A", restarts, bound, running,
                        ("False", "TransferRunning",
                         f"{'Clone' if cloning else 'Import'} into {name} in progress"))
    if _has_populator(claim):
        # Once in progress, a pod between runs (restarting, or its phase not yet copied
        # again by a restarted populator) does not send the DataVolume back: the phase
        # does not flap, restartCount says what happened.
        in_progress = api.CLONE_IN_PROGRESS if cloning else api.IMPORT_IN_PROGRESS
        phase = in_progress if previous == in_progress else (
            api.CLONE_SCHEDULED if cloning else api.IMPORT_SCHEDULED)
        return Observed(phase, anns.get(api.POPULATOR_PROGRESS) or "N/A",
                        restarts, bound, running, ("False", "", ""))
    return Observed(api.PENDING, "N/A", restarts, bound, running, ("False", "", ""))


_CLONE_STEPS = {api.CLONE_PHASE_SNAPSHOT: api.SNAPSHOT_FOR_SMART_CLONE_IN_PROGRESS,
                api.CLONE_PHASE_SNAPSHOT_CLONE: api.CLONE_FROM_SNAPSHOT_SOURCE_IN_PROGRESS,
                api.CLONE_PHASE_HOST_CLONE: api.CLONE_IN_PROGRESS}


def _upload(anns: Mapping[str, str], pod_phase: str | None, restarts: int,
            bound: tuple[str, str, str], running: tuple[str, str, str],
            name: str) -> Observed:
    """An upload not yet Succeeded: UploadReady while its server takes the upload (and
    while the written volume is rebound), else UploadScheduled, as upstream."""
    ready = pod_phase == "Succeeded" or (
        pod_phase == "Running" and anns.get(api.POD_READY) == "true")
    if ready:
        return Observed(api.UPLOAD_READY, "N/A", restarts, bound, running,
                        ("False", "TransferRunning", f"Upload into {name} in progress"))
    return Observed(api.UPLOAD_SCHEDULED, "N/A", restarts, bound, running, ("False", "", ""))


def events_for(*, previous: str | None, observed: Observed, claim_name: str,
               clone: tuple[str, str, str] | None = None,
               upload: bool = False, clone_kind: str = "pvc") -> list[Event]:
    """Events announcing a phase change (none when the phase did not change). ``clone``:
    (source namespace, source name, target namespace) of a clone DataVolume, whose end
    is told as upstream tells it (CloneSucceeded / CloneFailed); ``clone_kind``: its
    source's type (``pvc`` or ``snapshot``)."""
    if previous == observed.phase:
        return []
    if upload:
        return _upload_events(observed, claim_name)
    if clone is not None and observed.phase == api.SNAPSHOT_FOR_SMART_CLONE_IN_PROGRESS:
        return [Event("Normal", observed.phase, api.MESSAGE_SMART_CLONE_IN_PROGRESS.format(
            namespace=clone[0], name=clone[1]))]
    if clone is not None and observed.phase == api.CLONE_FROM_SNAPSHOT_SOURCE_IN_PROGRESS:
        return [Event("Normal", observed.phase,
                      api.MESSAGE_CLONE_FROM_SNAPSHOT_SOURCE_IN_PROGRESS.format(
                          kind=clone_kind, namespace=clone[0], name=clone[1]))]
    if clone is not None and observed.phase == api.REBIND_IN_PROGRESS:
        return [Event("Normal", observed.phase, api.MESSAGE_REBIND_IN_PROGRESS.format(
            namespace=clone[2], name=claim_name))]
    if clone is not None and observed.phase == api.SUCCEEDED:
        return [Event("Normal", "CloneSucceeded", f"Successfully cloned from {clone[0]}/"
                      f"{clone[1]} into {clone[2]}/{claim_name}")]
    if clone is not None and observed.phase == api.FAILED:
        detail = _failure_detail(observed)
        return [Event("Warning", "CloneFailed", f"Cloning from {clone[0]}/{clone[1]} into "
                      f"{clone[2]}/{claim_name} failed{detail}")]
    if observed.phase == api.CLONE_SCHEDULED:
        return [Event("Normal", "CloneScheduled", f"Cloning into {claim_name} scheduled")]
    if observed.phase == api.CLONE_IN_PROGRESS:
        return [Event("Normal", "CloneInProgress", f"Cloning into {claim_name} in progress")]
    if observed.phase == api.IMPORT_SCHEDULED:
        return [Event("Normal", "ImportScheduled", f"Import into {claim_name} scheduled")]
    if observed.phase == api.IMPORT_IN_PROGRESS:
        return [Event("Normal", "ImportInProgress", f"Import into {claim_name} in progress")]
    if observed.phase == api.SUCCEEDED:
        return [Event("Normal", "ImportSucceeded",
                      f"Successfully imported into PVC {claim_name}")]
    if observed.phase == api.FAILED:
        detail = _failure_detail(observed)
        return [Event("Warning", "ImportFailed", f"Failed to import into PVC {claim_name}{detail}")]
    return []


def _failure_detail(observed: Observed) -> str:
    """``: Reason: message`` of the importer's termination, for a failure Event."""
    reason, message = observed.running[1], observed.running[2]
    return f": {reason}: {message}" if message else ""


def status_patch(
    *, dv: Mapping[str, Any], observed: Observed, claim_name: str, now: str,
) -> Obj | None:
    """The new ``status``, or None when nothing changed (no write, no heartbeat churn)."""
    old = dict(dv.get("status") or {})
    old_conditions = {c.get("type"): c for c in old.get("conditions") or []}
    conditions = []
    for ctype, (status, reason, message) in (("Bound", observed.bound),
                                             ("Ready", observed.ready),
                                             ("Running", observed.running)):
        prev = old_conditions.get(ctype) or {}
        same = (prev.get("status"), prev.get("reason", ""), prev.get("message", "")) == (
            status, reason, message)
        cond = {"type": ctype, "status": status,
                "lastTransitionTime": prev.get("lastTransitionTime")
                if prev.get("status") == status and prev.get("lastTransitionTime") else now,
                "lastHeartbeatTime": prev.get("lastHeartbeatTime") if same
                and prev.get("lastHeartbeatTime") else now}
        if reason:
            cond["reason"] = reason
        if message:
            cond["message"] = message
        conditions.append(cond)
    new = {**old, "phase": observed.phase, "progress": observed.progress,
           "restartCount": observed.restarts, "claimName": claim_name,
           "conditions": conditions}
    return None if new == old else new


def _upload_events(observed: Observed, claim_name: str) -> list[Event]:
    """Upstream's upload events."""
    if observed.phase == api.UPLOAD_SCHEDULED:
        return [Event("Normal", "UploadScheduled", f"Upload into {claim_name} scheduled")]
    if observed.phase == api.UPLOAD_READY:
        return [Event("Normal", "UploadReady", f"Upload into {claim_name} ready")]
    if observed.phase == api.SUCCEEDED:
        return [Event("Normal", "UploadSucceeded", f"Successfully uploaded into {claim_name}")]
    if observed.phase == api.FAILED:
        detail = _failure_detail(observed)
        return [Event("Warning", "UploadFailed", f"Upload into {claim_name} failed{detail}")]
    return []


def _is_upload(claim: Mapping[str, Any]) -> bool:
    ref = (claim.get("spec") or {}).get("dataSourceRef") or {}
    return bool(ref.get("kind") == api.UPLOAD_SOURCE_KIND)


def _running(anns: Mapping[str, str]) -> tuple[str, str, str]:
    status = "True" if (anns.get(api.RUNNING) or "").lower() == "true" else "False"
    return (status, anns.get(api.RUNNING_REASON, ""), anns.get(api.RUNNING_MESSAGE, ""))


def _has_populator(claim: Mapping[str, Any]) -> bool:
    ref = (claim.get("spec") or {}).get("dataSourceRef") or {}
    return bool(ref.get("apiGroup") == api.GROUP and ref.get("kind"))


def _is_clone(claim: Mapping[str, Any]) -> bool:
    ref = (claim.get("spec") or {}).get("dataSourceRef") or {}
    return bool(ref.get("kind") == api.CLONE_SOURCE_KIND)


def _waits_for_consumer(claim: Mapping[str, Any], sc: Mapping[str, Any] | None) -> bool:
    if sc is None or sc.get("volumeBindingMode") != "WaitForFirstConsumer":
        return False
    if (claim.get("status") or {}).get("phase") == "Bound":
        return False
    anns = (claim.get("metadata") or {}).get("annotations") or {}
    return api.SELECTED_NODE not in anns and api.IMMEDIATE_BINDING not in anns


def _int(text: str | None) -> int:
    try:
        return max(0, int(text or "0"))
    except ValueError:
        return 0
