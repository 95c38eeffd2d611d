"""Which pods a waiting command names as stuck (pure table), and what it prints of them."""

from __future__ import annotations

from typing import Any

import pytest

from rootdisk import podhealth


def _pod(*statuses: dict[str, Any], deleting: bool = False, init: bool = False) -> dict[str, Any]:
    meta: dict[str, Any] = {"namespace": "kubevirt", "name": "virt-api-1"}
    if deleting:
        meta["deletionTimestamp"] = "2026-12-04T00:00:00Z"
    key = "initContainerStatuses" if init else "containerStatuses"
    return {"metadata": meta, "status": {key: list(statuses)}}


def _cs(state: dict[str, Any], restarts: int = 0, last: dict[str, Any] | None = None,
        name: str = "virt-api") -> dict[str, Any]:
    return {"name": name, "state": state, "lastState": last or {}, "restartCount": restarts}


CRASHED = {"terminated": {"exitCode": 1, "reason": "Error", "message": "boom"}}


@pytest.mark.parametrize(("pod", "want"), [
    (_pod(_cs({"running": {}})), []),
    (_pod(_cs({"waiting": {"reason": "ContainerCreating"}})), []),
    (_pod(_cs({"waiting": {"reason": "CrashLoopBackOff", "message": "back-off 10s"}}, 3,
              last=CRASHED)), [("CrashLoopBackOff", "back-off 10s", 3)]),
    (_pod(_cs({"waiting": {"reason": "CrashLoopBackOff"}}, 3, last=CRASHED)),
     [("CrashLoopBackOff", "boom", 3)]),  # the last run's message when the wait has none
    (_pod(_cs({"waiting": {"reason": "ErrImagePull", "message": "no such image"}})),
     [("ErrImagePull", "no such image", 0)]),
    (_pod(_cs({"waiting": {"reason": "CreateContainerConfigError",
                           "message": 'secret "x" not found'}}), init=True),
     [("CreateContainerConfigError", 'secret "x" not found', 0)]),
    (_pod(_cs(CRASHED, 2)), [("Error", "boom", 2)]),  # between two restarts
    (_pod(_cs(CRASHED, 1)), []),  # once is not a loop
    (_pod(_cs({"terminated": {"exitCode": 0, "reason": "Completed"}}, 5)), []),
    (_pod(_cs({"running": {}}, 4, last=CRASHED)), []),  # it failed, it runs now
    (_pod(_cs({"waiting": {"reason": "CrashLoopBackOff"}}, 3), deleting=True), []),
])
def test_stuck(pod: dict[str, Any], want: list[tuple[str, str, int]]) -> None:
    got = [(s.reason, s.message, s.restarts) for s in podhealth.stuck([pod])]
    assert got == want


def test_headline_names_the_pod_container_and_reason() -> None:
    [item] = podhealth.stuck([_pod(_cs({"waiting": {"reason": "CrashLoopBackOff",
                                                    "message": "back-off"}}, 4))])
    assert item.headline() == ("pod kubevirt/virt-api-1 container virt-api: CrashLoopBackOff,"
                               " 4 restarts: back-off")
