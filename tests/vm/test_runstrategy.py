"""runStrategy decisions, one row per situation (upstream's syncRunStrategy)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from vm.controller.backoff import StartFailure, next_failure, start_backoff_seconds
from vm.controller.runstrategy import (
    InvalidRunStrategy,
    Request,
    RunStrategy,
    VMState,
    decide,
    run_strategy,
)
from vm.controller.views import VMIView

NOW = datetime(2026, 1, 1, tzinfo=UTC)
A, R, M, H, ONCE = (RunStrategy.ALWAYS, RunStrategy.RERUN_ON_FAILURE, RunStrategy.MANUAL,
                 RunStrategy.HALTED, RunStrategy.ONCE)
STOP = Request("Stop", uid="u1")
START = Request("Start")


def vmi(phase: str = "Running", **kw: object) -> VMIView:
    kw.setdefault("ever_running", phase == "Running")
    return VMIView(uid="u1", phase=phase, **kw)  # type: ignore[arg-type]


@pytest.mark.parametrize(("spec", "want"), [
    ({"running": True}, A), ({"running": False}, H),
    ({"runStrategy": "Manual"}, M), ({"runStrategy": "Once"}, ONCE),
])
def test_running_maps_to_a_strategy(spec: dict, want: RunStrategy) -> None:
    assert run_strategy(spec) is want


@pytest.mark.parametrize(("spec", "field", "text"), [
    ({"running": True, "runStrategy": "Always"}, "spec.running", "mutually exclusive"),
    ({}, "spec.runStrategy", "must be specified"),
    ({"runStrategy": "Sometimes"}, "spec.runStrategy", "Invalid RunStrategy 'Sometimes'"),
])
def test_bad_strategies_name_the_field(spec: dict, field: str, text: str) -> None:
    with pytest.raises(InvalidRunStrategy) as err:
        run_strategy(spec)
    assert str(err.value).startswith(field) and text in str(err.value)


CASES = [
    # (id, strategy, last, requests, vmi, action, remaining requests)
    ("always-starts", A, "", (), None, "create", ()),
    ("always-keeps-running", A, "Always", (), vmi(), "none", ()),
    ("always-restarts-succeeded", A, "Always", (), vmi("Succeeded", ever_running=True),
     "delete", ()),
    ("always-restarts-failed", A, "Always", (), vmi("Failed", ever_running=True),
     "delete", ()),
    ("always-stop-request-deletes", A, "Always", (STOP, START), vmi(), "delete",
     (STOP, START)),
    ("always-stop-for-other-uid-dropped", A, "Always", (Request("Stop", uid="old"),), vmi(),
     "none", ()),
    ("restart-after-stop-consumes-start", A, "Always", (STOP, START), None, "create", ()),
    ("halted-deletes", H, "Always", (), vmi(), "delete", ()),
    ("halted-stays-stopped", H, "Halted", (), None, "none", ()),
    ("rerun-first-start", R, "", (), None, "create", ()),
    ("rerun-failed-deleted-and-restart-queued", R, "RerunOnFailure", (),
     vmi("Failed", ever_running=True), "delete", (START,)),
    ("rerun-succeeded-deleted", R, "RerunOnFailure", (), vmi("Succeeded", ever_running=True),
     "delete", ()),
    ("rerun-after-success-stays", R, "RerunOnFailure", (), None, "none", ()),
    ("rerun-start-request", R, "RerunOnFailure", (START,), None, "create", ()),
    ("manual-waits", M, "", (), None, "none", ()),
    ("manual-start", M, "Manual", (START,), None, "create", ()),
    ("manual-final-vmi-stays", M, "Manual", (), vmi("Succeeded", ever_running=True),
     "none", ()),
    ("manual-stop", M, "Manual", (STOP,), vmi(), "delete", (STOP,)),
    ("manual-start-while-running-consumed", M, "Manual", (START,), vmi(), "none", ()),
    ("once-starts", ONCE, "", (), None, "create", ()),
    ("once-never-restarts", ONCE, "Once", (), None, "none", ()),
    ("once-final-stays", ONCE, "Once", (), vmi("Succeeded", ever_running=True), "none", ()),
    ("deleting-vmi-waits", A, "Always", (), vmi(deleting=True), "none", ()),
]


@pytest.mark.parametrize(("strategy", "last", "requests", "the_vmi", "action", "left"),
                         [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_decide(strategy: RunStrategy, last: str, requests: tuple, the_vmi: VMIView | None,
                action: str, left: tuple) -> None:
    plan = decide(vm=VMState(strategy=strategy, last_strategy=last, requests=requests),
                  vmi=the_vmi, dvs_ready=True, now=NOW, jitter=0.0)
    assert plan.action == action
    assert plan.requests == left


def test_no_vmi_until_datavolumes_are_ready_even_with_a_start_request() -> None:
    plan = decide(vm=VMState(strategy=M, requests=(START,)), vmi=None, dvs_ready=False,
                  now=NOW, jitter=0.0)
    assert (plan.action, plan.waiting, plan.requests) == ("none", "DataVolumesNotReady",
                                                           (START,))


def test_paused_start_request() -> None:
    req = Request("Start", data={"paused": "true"})
    plan = decide(vm=VMState(strategy=M, last_strategy="Manual", requests=(req,)), vmi=None,
                  dvs_ready=True, now=NOW, jitter=0.0)
    assert plan.action == "create" and plan.paused


def test_deleting_vm_deletes_its_vmi() -> None:
    plan = decide(vm=VMState(strategy=A, deleting=True), vmi=vmi(), dvs_ready=True,
                  now=NOW, jitter=0.0)
    assert plan.action == "delete" and plan.stopping


def test_early_failure_starts_backoff_once_per_vmi() -> None:
    failed = vmi("Failed", ever_running=False)
    plan = decide(vm=VMState(strategy=A, last_strategy="Always"), vmi=failed, dvs_ready=True,
                  now=NOW, jitter=0.0)
    assert plan.action == "delete"
    assert plan.start_failure == StartFailure(1, "u1", NOW + timedelta(seconds=10))
    again = decide(vm=VMState(strategy=A, last_strategy="Always",
                              start_failure=plan.start_failure),
                   vmi=failed, dvs_ready=True, now=NOW + timedelta(seconds=5), jitter=0.0)
    assert again.start_failure == plan.start_failure  # the same VMI is counted once
    # without a VMI the start waits for the back-off, then happens
    waiting = decide(vm=VMState(strategy=A, start_failure=plan.start_failure), vmi=None,
                     dvs_ready=True, now=NOW + timedelta(seconds=4), jitter=0.0)
    assert (waiting.action, waiting.waiting, waiting.requeue_after) == ("none", "Backoff", 6.0)
    later = decide(vm=VMState(strategy=A, start_failure=plan.start_failure), vmi=None,
                   dvs_ready=True, now=NOW + timedelta(seconds=10), jitter=0.0)
    assert later.action == "create"


def test_a_vmi_that_ran_clears_the_backoff() -> None:
    old = StartFailure(3, "x", NOW + timedelta(seconds=90))
    plan = decide(vm=VMState(strategy=A, start_failure=old),
                  vmi=vmi("Failed", ever_running=True), dvs_ready=True, now=NOW, jitter=0.0)
    assert plan.start_failure is None


@pytest.mark.parametrize(("count", "jitter", "want"), [
    (1, 0.0, 10), (2, 0.0, 40), (3, 0.0, 90), (4, 0.0, 160), (5, 0.0, 250), (6, 0.0, 300),
    (1, 0.99, 15), (2, 0.99, 60), (0, 0.5, 0),
])
def test_backoff_formula(count: int, jitter: float, want: int) -> None:
    assert start_backoff_seconds(fail_count=count, jitter=jitter) == want


def test_failure_count_grows() -> None:
    f1 = next_failure(previous=None, failed_uid="a", now=NOW, jitter=0.0)
    f2 = next_failure(previous=f1, failed_uid="b", now=NOW, jitter=0.0)
    assert (f2.count, f2.retry_after - NOW) == (2, timedelta(seconds=40))
    assert StartFailure.from_status(f2.to_status()) == f2
