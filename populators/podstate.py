"""What the populator's pod is doing, read from its status, and what that means (pure).

The importer exits 0 (complete), 1 (failed, worth a retry) or 2 (failed for good) and
leaves a JSON termination message with ``reason``, ``message`` and ``retryable``
(``importer/termination.py``). With ``restartPolicy: OnFailure`` the kubelet restarts
every failure, so the populator decides: a permanent failure ends the import at once,
a retryable one is left to the kubelet's backoff until the restarts pass the retry
limit. A message that is not JSON (``FallbackToLogsOnError`` gave the log's tail, e.g.
after an OOM kill) is judged by the exit code: only 2 is permanent.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from vocab import cdi as api

EXIT_PERMANENT = 2
PULL_FAILURES = ("ErrImagePull", "ImagePullBackOff", "InvalidImageName", "ErrImageNeverPull")
RUNNING_REASON = "Pod is running"
UNSCHEDULABLE_MESSAGE = "Importer pod cannot be scheduled"
_TOO_SMALL_HINTS = ("no space left on device", "disk quota exceeded",
                    "is larger than the reported available storage")
TOO_SMALL_MESSAGE = "DataVolume too small to contain image"


class State(StrEnum):
    PENDING = "pending"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    RETRYING = "retrying"
    """Failed, worth a retry, within the limit: the kubelet restarts it."""
    REPLACE = "replace"
    """The pod failed as a whole (evicted...): delete it and start another."""
    RENEW = "renew"
    """An upload server ended, unused, at its certificate's deadline (upstream's
    ``deadlinePassed``): start another, with a fresh certificate. Neither a success nor
    a failure: no restart is counted."""
    PERMANENT = "permanent"
    EXHAUSTED = "exhausted"
    """Retryable failures past the retry limit."""

    @property
    def gives_up(self) -> bool:
        return self in (State.PERMANENT, State.EXHAUSTED)


@dataclass(frozen=True)
class PodView:
    state: State
    reason: str
    message: str = ""
    restarts: int = 0
    """Container restarts, those of the pods this one replaced included."""
    pod_phase: str = api.PENDING
    preallocation_applied: bool = False


@dataclass(frozen=True)
class Termination:
    exit_code: int
    reason: str
    message: str
    retryable: bool
    preallocation_applied: bool = False
    deadline_passed: bool = False


def parse_termination(term: Mapping[str, Any]) -> Termination:
    """A terminated container state, classified."""
    code = int(term.get("exitCode") or 0)
    text = str(term.get("message") or "")
    doc: Any = None
    if text.lstrip().startswith("{"):
        try:
            doc = json.loads(text)
        except ValueError:
            doc = None
    if isinstance(doc, dict) and isinstance(doc.get("reason"), str):
        retryable = doc.get("retryable")
        return Termination(
            exit_code=code, reason=doc["reason"], message=str(doc.get("message") or ""),
            retryable=bool(retryable) if isinstance(retryable, bool)
            else code != EXIT_PERMANENT,
            preallocation_applied=bool(doc.get("preallocationApplied")),
            deadline_passed=doc.get("deadlinePassed") is True,
        )
    return Termination(exit_code=code, reason=str(term.get("reason") or "Error"),
                       message=simplify(text), retryable=code != EXIT_PERMANENT)


def simplify(message: str) -> str:
    """Upstream's simplification of well-known messages (and a bounded length: the text
    may be a log tail)."""
    low = message.lower()
    if any(h in low for h in _TOO_SMALL_HINTS):
        return TOO_SMALL_MESSAGE
    message = message.strip()
    return message if len(message) <= 512 else message[-512:]


def _container(pod: Mapping[str, Any]) -> Mapping[str, Any] | None:
    statuses = (pod.get("status") or {}).get("containerStatuses") or []
    return statuses[0] if statuses else None


def previous_restarts(pod: Mapping[str, Any]) -> int:
    text = ((pod.get("metadata") or {}).get("annotations") or {}).get(
        api.PREVIOUS_RESTARTS, "0")
    return int(text) if str(text).isdigit() else 0


def view(pod: Mapping[str, Any], *, retry_limit: int) -> PodView:
    """What the pod is doing; ``retry_limit``: restarts allowed after retryable failures."""
    status = pod.get("status") or {}
    pod_phase = str(status.get("phase") or api.PENDING)
    cs = _container(pod)
    before = previous_restarts(pod)
    restarts = before + int((cs or {}).get("restartCount") or 0)
    state: Mapping[str, Any] = (cs or {}).get("state") or {}
    terminated = state.get("terminated")
    if pod_phase == api.SUCCEEDED or (terminated is not None and int(
            terminated.get("exitCode") or 0) == 0 and pod_phase != api.FAILED):
        term = parse_termination(terminated or {})
        if term.deadline_passed:
            return PodView(State.RENEW, term.reason, term.message, restarts, pod_phase)
        return PodView(State.SUCCEEDED, term.reason if terminated is not None else "Completed",
                       term.message, restarts, api.SUCCEEDED, term.preallocation_applied)
    if pod_phase == api.FAILED:
        # The pod failed as a whole (evicted, node lost): a retryable failure.
        reason = str(status.get("reason") or "PodFailed")
        return _failed(Termination(exit_code=-1, reason=reason,
                                   message=str(status.get("message") or ""), retryable=True),
                       restarts=restarts, retry_limit=retry_limit, pod_phase=pod_phase,
                       whole_pod=True)
    if cs is None:
        for cond in status.get("conditions") or []:
            if cond.get("type") == "PodScheduled" and cond.get("status") == "False" and \
                    cond.get("reason") == "Unschedulable":
                return PodView(State.PENDING, "Unschedulable", UNSCHEDULABLE_MESSAGE,
                               restarts, pod_phase)
        return PodView(State.PENDING, api.PENDING, "", restarts, pod_phase)
    if state.get("running") is not None:
        return PodView(State.RUNNING, RUNNING_REASON, "", restarts, pod_phase)
    if terminated is not None:
        return _failed(parse_termination(terminated), restarts=restarts,
                       retry_limit=retry_limit, pod_phase=pod_phase)
    waiting: Mapping[str, Any] = state.get("waiting") or {}
    wreason = str(waiting.get("reason") or api.PENDING)
    if wreason in PULL_FAILURES:
        return PodView(State.PENDING, "ImagePullFailed", str(waiting.get("message") or ""),
                       restarts, pod_phase)
    last = ((cs.get("lastState") or {}).get("terminated"))
    if wreason == "CrashLoopBackOff" and last is not None:
        return _failed(parse_termination(last), restarts=restarts, retry_limit=retry_limit,
                       pod_phase=pod_phase)
    return PodView(State.PENDING, wreason, simplify(str(waiting.get("message") or "")),
                   restarts, pod_phase)


def _failed(term: Termination, *, restarts: int, retry_limit: int, pod_phase: str,
            whole_pod: bool = False) -> PodView:
    if not term.retryable:
        return PodView(State.PERMANENT, term.reason, term.message, restarts, pod_phase)
    runs_failed = restarts + 1  # this failure has not been restarted yet
    if runs_failed > retry_limit:
        message = (f"{term.message} (gave up after {restarts} "
                   f"{'restart' if restarts == 1 else 'restarts'}; retry limit {retry_limit})")
        return PodView(State.EXHAUSTED, term.reason, message.strip(), restarts, pod_phase)
    return PodView(State.REPLACE if whole_pod else State.RETRYING, term.reason,
                   term.message, restarts, pod_phase)


def target_annotations(v: PodView) -> dict[str, str]:
    """The target PVC's annotations for this pod view (the DataVolume controller's input)."""
    if v.state is State.RUNNING:
        phase, running = api.RUNNING_PHASE, "true"
    elif v.state is State.SUCCEEDED:
        phase, running = api.SUCCEEDED, "false"
    elif v.state.gives_up:
        phase, running = api.FAILED, "false"
    elif v.state is State.RETRYING:
        phase, running = api.RUNNING_PHASE, "false"
    else:
        phase, running = api.PENDING, "false"
    ann = {
        api.POD_PHASE: phase,
        api.POD_RESTARTS: str(v.restarts),
        api.RUNNING: running,
        api.RUNNING_REASON: v.reason,
        api.RUNNING_MESSAGE: v.message,
    }
    if v.preallocation_applied:
        ann[api.PREALLOCATION_APPLIED] = "true"
    return ann
