"""start/stop/restart decisions of the subresource API (409 rules, patches)."""

from __future__ import annotations

import pytest

from vm.api.lifecycle import Options, options, restart, start, stop
from vm.errors import Refused


def vm(strategy: str | None = "Halted", running: bool | None = None, **status: object) -> dict:
    spec: dict = {"template": {}}
    if strategy is not None:
        spec["runStrategy"] = strategy
    if running is not None:
        spec["running"] = running
    return {"spec": spec, "status": dict(status)}


def vmi(phase: str = "Running", grace: int | None = None) -> dict:
    spec = {} if grace is None else {"terminationGracePeriodSeconds": grace}
    return {"metadata": {"uid": "u1"}, "spec": spec, "status": {"phase": phase}}


def test_start_halted_flips_spec_with_a_test() -> None:
    [p] = start(vm("Halted", printableStatus="Stopped"), None, Options())
    assert p.target == "vm"
    assert p.ops == [{"op": "test", "path": "/spec/runStrategy", "value": "Halted"},
                     {"op": "replace", "path": "/spec/runStrategy", "value": "Always"}]


def test_start_running_false_flips_running() -> None:
    [p] = start(vm(None, running=False), None, Options())
    assert p.ops[1] == {"op": "replace", "path": "/spec/running", "value": True}


def test_start_paused_sends_the_request_before_the_spec() -> None:
    req, spec = start(vm("Halted"), None, Options(paused=True))
    assert (req.target, spec.target) == ("vm-status", "vm")
    assert req.ops == [{"op": "add", "path": "/status", "value": {
        "stateChangeRequests": [{"action": "Start", "data": {"paused": "true"}}]}}]


@pytest.mark.parametrize(("the_vm", "the_vmi", "message"), [
    (vm("Always"), None, "Always does not support manual start requests"),
    (vm("Once"), None, "Once does not support manual start requests"),
    (vm("Manual"), vmi("Running"), "VM is already running"),
    (vm("RerunOnFailure", printableStatus="Stopped"), vmi("Failed"),
     "RerunOnFailure does not support starting VM from failed state"),
    (vm("Manual", stateChangeRequests=[{"action": "Start"}]), None,
     "stop/start already underway"),
])
def test_start_refusals(the_vm: dict, the_vmi: dict | None, message: str) -> None:
    with pytest.raises(Refused) as err:
        start(the_vm, the_vmi, Options())
    assert err.value.code == 409 and message in err.value.message


def test_start_manual_with_a_final_vmi_stops_it_first_and_clears_backoff() -> None:
    [p] = start(vm("Manual", printableStatus="Stopped", startFailure={"x": 1}),
                vmi("Succeeded"), Options())
    assert p.ops == [
        {"op": "add", "path": "/status/stateChangeRequests",
         "value": [{"action": "Stop", "uid": "u1"}, {"action": "Start"}]},
        {"op": "remove", "path": "/status/startFailure"}]


def test_stop_always_halts_and_sets_grace_first() -> None:
    g, p = stop(vm("Always"), vmi("Running"), Options(grace=5))
    assert g.target == "vmi" and g.ops[0]["value"] == 5
    assert p.ops[1] == {"op": "replace", "path": "/spec/runStrategy", "value": "Halted"}


def test_stop_manual_and_pending_requests() -> None:
    [p] = stop(vm("Manual", stateChangeRequests=[{"action": "Start"}]), vmi(), Options())
    assert p.ops == [
        {"op": "test", "path": "/status/stateChangeRequests", "value": [{"action": "Start"}]},
        {"op": "replace", "path": "/status/stateChangeRequests",
         "value": [{"action": "Stop", "uid": "u1"}]}]
    with pytest.raises(Refused, match="VM is not running"):
        stop(vm("Manual", printableStatus="Stopped"), None, Options())


def test_stop_halted_only_shortens_the_grace() -> None:
    with pytest.raises(Refused, match="VM is not running"):
        stop(vm("Halted"), None, Options())
    with pytest.raises(Refused, match="shorter grace"):
        stop(vm("Halted"), vmi(grace=30), Options(grace=30))
    [p] = stop(vm("Halted"), vmi(grace=30), Options(grace=0))
    assert p.target == "vmi" and p.ops[0]["value"] == 0


def test_restart() -> None:
    [p] = restart(vm("Always", printableStatus="Running"), vmi(), Options())
    assert p.ops[0]["value"] == [{"action": "Stop", "uid": "u1"}, {"action": "Start"}]
    g, _ = restart(vm("Always", printableStatus="Running"), vmi(), Options(grace=0, force=True))
    assert g.ops[0]["value"] == 1
    for strategy in ("Halted", "Once"):
        with pytest.raises(Refused, match=f"{strategy} does not support manual restart"):
            restart(vm(strategy), vmi(), Options())
    with pytest.raises(Refused, match="needs force"):
        restart(vm("Always"), vmi(), Options(grace=0))


@pytest.mark.parametrize(("kind", "body", "field"), [
    ("Stop", {"gracePeriod": -1}, "StopOptions.gracePeriod"),
    ("Restart", {"gracePeriodSeconds": "soon"}, "RestartOptions.gracePeriodSeconds"),
    ("Start", {"paused": "yes"}, "StartOptions.paused"),
    ("Start", {"dryRun": ["Some"]}, "StartOptions.dryRun"),
    ("Stop", {"paused": True}, "StopOptions.paused"),
    ("Start", [1], "StartOptions"),
])
def test_bad_options_name_the_field(kind: str, body: object, field: str) -> None:
    with pytest.raises(Refused) as err:
        options(kind, body)
    assert err.value.code == 400 and err.value.message.startswith(field)


def test_options_parse() -> None:
    assert options("Start", {"paused": True, "dryRun": ["All"]}) == Options(paused=True,
                                                                            dry_run=True)
    assert options("Stop", {"gracePeriod": 0}).grace == 0
    assert options("Start", None) == Options()
