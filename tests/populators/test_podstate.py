"""Table tests: a pod's status → what the populator makes of it, and the target's
annotations (pure)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from populators import podstate
from populators.podstate import State


def _term(code: int, *, reason: str = "Error", message: str | None = None,
          doc: dict[str, Any] | None = None) -> dict[str, Any]:
    text = json.dumps(doc) if doc is not None else (message or "")
    return {"exitCode": code, "reason": reason, "message": text}


def _pod(*, phase: str = "Running", state: dict[str, Any] | None = None,
         last: dict[str, Any] | None = None, restarts: int = 0,
         previous: int | None = None, conditions: list[dict[str, Any]] | None = None,
         no_status: bool = False, **status: Any) -> dict[str, Any]:
    st: dict[str, Any] = {"phase": phase, **status}
    if not no_status:
        cs: dict[str, Any] = {"name": "importer", "restartCount": restarts,
                              "state": state or {}}
        if last:
            cs["lastState"] = {"terminated": last}
        st["containerStatuses"] = [cs]
    if conditions:
        st["conditions"] = conditions
    meta: dict[str, Any] = {"name": "importer-prime-x"}
    if previous is not None:
        meta["annotations"] = {"populators.rootdisk.io/previous-restarts": str(previous)}
    return {"metadata": meta, "status": st}


NOT_FOUND = {"reason": "NotFound", "message": "HTTP 404 for http://h/x", "retryable": False}
TRANSFER = {"reason": "TransferFailed", "message": "HTTP 503", "retryable": True}
DONE = {"reason": "Completed", "message": "Import Complete", "retryable": False,
        "preallocationApplied": True}

CASES = [
    # (id, pod, limit, state, reason, restarts)
    ("created, no status yet", _pod(phase="Pending", no_status=True), 3,
     State.PENDING, "Pending", 0),
    ("unschedulable", _pod(phase="Pending", no_status=True, conditions=[
        {"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]), 3,
     State.PENDING, "Unschedulable", 0),
    ("image pull", _pod(phase="Pending", state={"waiting": {"reason": "ErrImagePull",
                                                             "message": "no such image"}}),
     3, State.PENDING, "ImagePullFailed", 0),
    ("config error waits", _pod(phase="Pending", state={"waiting": {
        "reason": "CreateContainerConfigError", "message": "secret s not found"}}), 3,
     State.PENDING, "CreateContainerConfigError", 0),
    ("running", _pod(state={"running": {}}), 3, State.RUNNING, "Pod is running", 0),
    ("running after restarts", _pod(state={"running": {}}, restarts=2,
                                    last=_term(1, doc=TRANSFER)), 3,
     State.RUNNING, "Pod is running", 2),
    ("succeeded", _pod(phase="Succeeded", state={"terminated": _term(
        0, reason="Completed", doc=DONE)}), 3, State.SUCCEEDED, "Completed", 0),
    ("exit 0 before the phase follows", _pod(state={"terminated": _term(0, doc=DONE)}), 3,
     State.SUCCEEDED, "Completed", 0),
    ("404 terminated: permanent", _pod(state={"terminated": _term(2, doc=NOT_FOUND)}), 3,
     State.PERMANENT, "NotFound", 0),
    ("404 in back-off: permanent", _pod(state={"waiting": {"reason": "CrashLoopBackOff"}},
                                        last=_term(2, doc=NOT_FOUND)), 3,
     State.PERMANENT, "NotFound", 0),
    ("503 first failure: retry", _pod(state={"waiting": {"reason": "CrashLoopBackOff"}},
                                      last=_term(1, doc=TRANSFER)), 3,
     State.RETRYING, "TransferFailed", 0),
    ("503 within the limit", _pod(state={"waiting": {"reason": "CrashLoopBackOff"}},
                                  last=_term(1, doc=TRANSFER), restarts=2), 3,
     State.RETRYING, "TransferFailed", 2),
    ("503 past the limit", _pod(state={"waiting": {"reason": "CrashLoopBackOff"}},
                                last=_term(1, doc=TRANSFER), restarts=3), 3,
     State.EXHAUSTED, "TransferFailed", 3),
    ("limit 0: the first failure ends it", _pod(state={"terminated": _term(1, doc=TRANSFER)}),
     0, State.EXHAUSTED, "TransferFailed", 0),
    ("earlier pods' restarts count", _pod(state={"terminated": _term(1, doc=TRANSFER)},
                                          restarts=1, previous=2), 3,
     State.EXHAUSTED, "TransferFailed", 3),
    ("OOM kill, log tail: retryable", _pod(state={"terminated": _term(
        137, reason="OOMKilled", message="killed")}), 3, State.RETRYING, "OOMKilled", 0),
    ("exit 2 without JSON: permanent", _pod(state={"terminated": _term(
        2, message="Traceback ...")}), 3, State.PERMANENT, "Error", 0),
    ("JSON without retryable: exit code decides", _pod(state={"terminated": _term(
        1, doc={"reason": "TransferFailed", "message": "x"})}), 3,
     State.RETRYING, "TransferFailed", 0),
    ("evicted pod: replaced", _pod(phase="Failed", reason="Evicted", message="disk"), 3,
     State.REPLACE, "Evicted", 0),
    ("evicted past the limit", _pod(phase="Failed", reason="Evicted", restarts=3), 3,
     State.EXHAUSTED, "Evicted", 3),
    # an upload server that ended at its deadline: renewed, neither done nor failed
    ("deadline passed: renew", _pod(phase="Succeeded", state={"terminated": _term(
        0, reason="Completed", doc={"reason": "DeadlinePassed", "message": "Deadline Passed",
                                    "retryable": False, "deadlinePassed": True})}), 3,
     State.RENEW, "DeadlinePassed", 0),
    ("deadline passed, however many times", _pod(phase="Succeeded", restarts=0, previous=3,
                                                 state={"terminated": _term(0, doc={
                                                     "reason": "DeadlinePassed",
                                                     "deadlinePassed": True})}), 3,
     State.RENEW, "DeadlinePassed", 3),
    ("deadlinePassed must be true", _pod(phase="Succeeded", state={"terminated": _term(
        0, doc={"reason": "Completed", "deadlinePassed": "yes"})}), 3,
     State.SUCCEEDED, "Completed", 0),
]


@pytest.mark.parametrize(("pod", "limit", "state", "reason", "restarts"),
                         [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_view(pod: dict[str, Any], limit: int, state: State, reason: str,
              restarts: int) -> None:
    v = podstate.view(pod, retry_limit=limit)
    assert (v.state, v.reason, v.restarts) == (state, reason, restarts)


def test_termination_message_is_carried() -> None:
    v = podstate.view(_pod(state={"terminated": _term(2, doc=NOT_FOUND)}), retry_limit=3)
    assert v.message == "HTTP 404 for http://h/x"
    done = podstate.view(_pod(phase="Succeeded", state={"terminated": _term(0, doc=DONE)}),
                         retry_limit=3)
    assert done.message == "Import Complete" and done.preallocation_applied


def test_exhausted_message_says_why() -> None:
    v = podstate.view(_pod(state={"terminated": _term(1, doc=TRANSFER)}, restarts=1),
                      retry_limit=1)
    assert v.message == "HTTP 503 (gave up after 1 restart; retry limit 1)"


@pytest.mark.parametrize(("text", "want"), [
    ("write: no space left on device", podstate.TOO_SMALL_MESSAGE),
    ("virtual image size 5 is larger than the reported available storage 3",
     podstate.TOO_SMALL_MESSAGE),
    ("x" * 2000, "x" * 512),
    ("  plain  ", "plain"),
])
def test_simplify(text: str, want: str) -> None:
    assert podstate.simplify(text) == want


ANN = "cdi.kubevirt.io/storage."
ANNOTATION_CASES = [
    (podstate.PodView(State.PENDING, "Pending"), "Pending", "false"),
    (podstate.PodView(State.RUNNING, "Pod is running", restarts=1), "Running", "true"),
    (podstate.PodView(State.RETRYING, "TransferFailed", "503"), "Running", "false"),
    (podstate.PodView(State.SUCCEEDED, "Completed", "Import Complete"), "Succeeded", "false"),
    (podstate.PodView(State.PERMANENT, "NotFound", "404"), "Failed", "false"),
    (podstate.PodView(State.EXHAUSTED, "TransferFailed", "503"), "Failed", "false"),
]


@pytest.mark.parametrize(("view", "phase", "running"), ANNOTATION_CASES,
                         ids=[c[0].state.value for c in ANNOTATION_CASES])
def test_target_annotations(view: podstate.PodView, phase: str, running: str) -> None:
    ann = podstate.target_annotations(view)
    assert ann[ANN + "pod.phase"] == phase
    assert ann[ANN + "condition.running"] == running
    assert ann[ANN + "condition.running.reason"] == view.reason
    assert ann[ANN + "condition.running.message"] == view.message
    assert ann[ANN + "pod.restarts"] == str(view.restarts)
