"""Pod phase, container statuses and conditions from what the kubelet observed (pure).

The pod worker keeps one :class:`ContainerRecord` per container; this module turns the
records into the ``status`` Kubernetes clients expect, so the rules (when is a pod
Pending, Running, Succeeded, Failed; what a waiting/terminated state carries) are in one
place and tested by tables.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from localcluster.kubelet.restarts import ALWAYS, NEVER, ON_FAILURE

PENDING = "Pending"
RUNNING = "Running"
SUCCEEDED = "Succeeded"
FAILED = "Failed"

# Waiting reasons, as the kubelet spells them.
CONTAINER_CREATING = "ContainerCreating"
CRASH_LOOP_BACK_OFF = "CrashLoopBackOff"
ERR_IMAGE_PULL = "ErrImagePull"
IMAGE_PULL_BACK_OFF = "ImagePullBackOff"
CREATE_CONTAINER_CONFIG_ERROR = "CreateContainerConfigError"


@dataclass(frozen=True)
class Waiting:
    reason: str
    message: str = ""


@dataclass(frozen=True)
class Running:
    started_at: str


@dataclass(frozen=True)
class Terminated:
    exit_code: int
    started_at: str
    finished_at: str
    reason: str = ""
    message: str = ""
    signal: int | None = None


State = Waiting | Running | Terminated


def terminated_reason(exit_code: int, *, oom_killed: bool = False) -> str:
    if oom_killed:
        return "OOMKilled"
    return "Completed" if exit_code == 0 else "Error"


@dataclass(frozen=True)
class ContainerRecord:
    name: str
    image: str
    state: State
    last_state: Terminated | None = None
    restart_count: int = 0
    container_id: str = ""
    done: bool = False
    """Terminated and will not be restarted (restartPolicy says so)."""
    ready: bool = True
    """The readiness probe's verdict (True when there is none); counts only while running."""


def _state_dict(state: State | None) -> dict[str, Any]:
    if state is None:
        return {}
    if isinstance(state, Waiting):
        w: dict[str, Any] = {"reason": state.reason}
        if state.message:
            w["message"] = state.message
        return {"waiting": w}
    if isinstance(state, Running):
        return {"running": {"startedAt": state.started_at}}
    t: dict[str, Any] = {
        "exitCode": state.exit_code,
        "reason": state.reason or terminated_reason(state.exit_code),
        "startedAt": state.started_at,
        "finishedAt": state.finished_at,
    }
    if state.message:
        t["message"] = state.message
    if state.signal is not None:
        t["signal"] = state.signal
    return {"terminated": t}


def container_status(record: ContainerRecord) -> dict[str, Any]:
    running = isinstance(record.state, Running)
    status: dict[str, Any] = {
        "name": record.name,
        "image": record.image,
        "imageID": "",
        "ready": running and record.ready,
        "started": running,
        "restartCount": record.restart_count,
        "state": _state_dict(record.state),
        "lastState": _state_dict(record.last_state),
    }
    if record.container_id:
        status["containerID"] = record.container_id
    return status


def _has_run(record: ContainerRecord) -> bool:
    return not isinstance(record.state, Waiting) or record.last_state is not None


def pod_phase(*, policy: str, records: Sequence[ContainerRecord]) -> str:
    """The pod phase, by the rules of the kubelet's phase computation."""
    if not records:
        return PENDING
    if any(not _has_run(r) for r in records):
        return PENDING
    if any(isinstance(r.state, Running) for r in records):
        return RUNNING
    finished = [r for r in records if isinstance(r.state, Terminated)]
    if len(finished) == len(records) and all(r.done for r in finished):
        if all(isinstance(r.state, Terminated) and r.state.exit_code == 0 for r in finished):
            return SUCCEEDED
        return FAILED
    if policy not in (ALWAYS, ON_FAILURE, NEVER):
        raise ValueError(f"restartPolicy must be Always, OnFailure or Never, got {policy!r}")
    return RUNNING  # some container is between restarts (back-off) while others are done


def _condition(kind: str, ok: bool, now: str, reason: str = "") -> dict[str, Any]:
    cond: dict[str, Any] = {"type": kind, "status": "True" if ok else "False",
                            "lastProbeTime": None, "lastTransitionTime": now}
    if reason:
        cond["reason"] = reason
    return cond


def pod_status(
    *, policy: str, records: Sequence[ContainerRecord], pod_ip: str, host_ip: str,
    start_time: str, now: str, message: str = "", reason: str = "",
) -> dict[str, Any]:
    """The full ``status`` of a pod whose containers the kubelet manages."""
    phase = pod_phase(policy=policy, records=records)
    ready = bool(records) and all(isinstance(r.state, Running) and r.ready for r in records)
    not_ready_reason = "" if ready else (
        "PodCompleted" if phase in (SUCCEEDED, FAILED) else "ContainersNotReady")
    status: dict[str, Any] = {
        "phase": phase,
        "conditions": [
            _condition("PodScheduled", True, now),
            _condition("Initialized", True, now),
            _condition("ContainersReady", ready, now, not_ready_reason),
            _condition("Ready", ready, now, not_ready_reason),
        ],
        "hostIP": host_ip,
        "hostIPs": [{"ip": host_ip}],
        "startTime": start_time,
        "containerStatuses": [container_status(r) for r in records],
        "qosClass": "BestEffort",
    }
    if pod_ip:
        status["podIP"] = pod_ip
        status["podIPs"] = [{"ip": pod_ip}]
    if message:
        status["message"] = message
    if reason:
        status["reason"] = reason
    return status
