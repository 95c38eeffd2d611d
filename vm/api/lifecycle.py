"""start / stop / restart of a VirtualMachine, as virt-api's subresources decide them.

Each call turns (VM, its VMI, the options) into either a refusal (409 Conflict with
upstream's message, or 400 for bad options) or the patches to send, in order:

- **start**: Halted → the spec's runStrategy (or ``running``) becomes Always through a
  JSON patch with a ``test``, so a concurrent change fails instead of being overwritten;
  with ``paused`` a Start request carrying ``paused=true`` goes first. Manual and
  RerunOnFailure → a Start request in ``status.stateChangeRequests`` (after a Stop for a
  final VMI). Always and Once refuse; so does a VM whose VMI still runs.
- **stop**: Always/Once → runStrategy Halted; Manual/RerunOnFailure → a Stop request
  for the running VMI's uid; Halted → only a shorter grace period for a VMI still
  stopping. A grace period is written into the VMI first.
- **restart**: Stop(uid) then Start; Halted and Once refuse; ``gracePeriodSeconds=0``
  with ``force`` first sets the VMI's grace period to 1.

Status patches ``test`` the current requests (or ``add`` the whole status when it is
empty) and drop ``startFailure``; pending requests may only be replaced by a lone Stop.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from vm.controller.runstrategy import InvalidRunStrategy, RunStrategy, run_strategy
from vm.errors import Refused

FINAL = ("Succeeded", "Failed")


@dataclass(frozen=True)
class Patch:
    target: str
    """``vm`` (spec), ``vm-status`` or ``vmi``."""
    ops: list[dict[str, Any]]


@dataclass(frozen=True)
class Options:
    paused: bool = False
    grace: int | None = None
    force: bool = False
    dry_run: bool = False


def options(kind: str, body: Any) -> Options:
    """Parse StartOptions / StopOptions / RestartOptions; errors name the field."""
    if body in (None, b"", ""):
        return Options()
    if not isinstance(body, Mapping):
        raise Refused(400, f"{kind}Options: the body must be a JSON object")
    dry = body.get("dryRun") or []
    if not isinstance(dry, list) or any(d != "All" for d in dry):
        raise Refused(400, f"{kind}Options.dryRun: only [\"All\"] is supported, got {dry!r}")
    grace_key = "gracePeriod" if kind == "Stop" else "gracePeriodSeconds"
    grace = body.get(grace_key)
    if grace is not None and (not isinstance(grace, int) or isinstance(grace, bool)
                              or grace < 0):
        raise Refused(400, f"{kind}Options.{grace_key}: must be a non-negative integer, "
                      f"got {grace!r}")
    paused = body.get("paused", False)
    if not isinstance(paused, bool):
        raise Refused(400, f"{kind}Options.paused: must be true or false, got {paused!r}")
    force = body.get("force", False)
    if not isinstance(force, bool):
        raise Refused(400, f"{kind}Options.force: must be true or false, got {force!r}")
    if paused and kind != "Start":
        raise Refused(400, f"{kind}Options.paused: only start takes paused")
    return Options(paused=paused, grace=grace, force=force, dry_run=bool(dry))


def _strategy(vm: Mapping[str, Any]) -> RunStrategy:
    try:
        return run_strategy(vm.get("spec") or {})
    except InvalidRunStrategy as err:
        raise Refused(409, str(err)) from None


def _live(vmi: Mapping[str, Any] | None) -> bool:
    return vmi is not None and ((vmi.get("status") or {}).get("phase") or "") not in FINAL


def _phase(vmi: Mapping[str, Any] | None) -> str:
    return str(((vmi or {}).get("status") or {}).get("phase") or "")


def _uid(vmi: Mapping[str, Any]) -> str:
    return str((vmi.get("metadata") or {}).get("uid") or "")


def _spec_patch(vm: Mapping[str, Any], strategy: RunStrategy) -> Patch:
    spec = vm.get("spec") or {}
    if "running" in spec and spec["running"] is not None:
        value = strategy is RunStrategy.ALWAYS
        return Patch("vm", [{"op": "test", "path": "/spec/running", "value": spec["running"]},
                            {"op": "replace", "path": "/spec/running", "value": value}])
    return Patch("vm", [
        {"op": "test", "path": "/spec/runStrategy", "value": spec.get("runStrategy")},
        {"op": "replace", "path": "/spec/runStrategy", "value": strategy.value}])


def _status_patch(vm: Mapping[str, Any], requests: list[dict[str, Any]]) -> Patch:
    status = vm.get("status") or {}
    current = status.get("stateChangeRequests") or []
    if current and not (len(requests) == 1 and requests[0]["action"] == "Stop"):
        raise Refused(409, "unable to complete request: stop/start already underway")
    if not status:
        return Patch("vm-status", [{"op": "add", "path": "/status",
                                    "value": {"stateChangeRequests": requests}}])
    ops: list[dict[str, Any]] = []
    if current:
        ops.append({"op": "test", "path": "/status/stateChangeRequests", "value": current})
        ops.append({"op": "replace", "path": "/status/stateChangeRequests", "value": requests})
    else:
        ops.append({"op": "add", "path": "/status/stateChangeRequests", "value": requests})
    if "startFailure" in status:
        ops.append({"op": "remove", "path": "/status/startFailure"})
    return Patch("vm-status", ops)


def _grace_patch(grace: int) -> Patch:
    return Patch("vmi", [{"op": "replace", "path": "/spec/terminationGracePeriodSeconds",
                          "value": grace}])


def _start_request(paused: bool) -> dict[str, Any]:
    req: dict[str, Any] = {"action": "Start"}
    if paused:
        req["data"] = {"paused": "true"}
    return req


def start(vm: Mapping[str, Any], vmi: Mapping[str, Any] | None, opts: Options) -> list[Patch]:
    strategy = _strategy(vm)
    if _live(vmi):
        raise Refused(409, "VM is already running")
    if strategy is RunStrategy.HALTED:
        out = []
        if opts.paused:
            out.append(_status_patch(vm, [_start_request(True)]))
        out.append(_spec_patch(vm, RunStrategy.ALWAYS))
        return out
    if strategy in (RunStrategy.MANUAL, RunStrategy.RERUN_ON_FAILURE):
        if strategy is RunStrategy.RERUN_ON_FAILURE and _phase(vmi) == "Failed":
            raise Refused(409, "RerunOnFailure does not support starting VM from failed state")
        requests = []
        if vmi is not None and _phase(vmi) in FINAL:
            requests.append({"action": "Stop", "uid": _uid(vmi)})
        requests.append(_start_request(opts.paused))
        return [_status_patch(vm, requests)]
    raise Refused(409, f"{strategy.value} does not support manual start requests")


def stop(vm: Mapping[str, Any], vmi: Mapping[str, Any] | None, opts: Options) -> list[Patch]:
    strategy = _strategy(vm)
    out: list[Patch] = []
    if strategy is RunStrategy.HALTED:
        if not _live(vmi) or vmi is None:
            raise Refused(409, "VM is not running")
        current = (vmi.get("spec") or {}).get("terminationGracePeriodSeconds")
        current = 30 if current is None else int(current)
        if opts.grace is None or opts.grace >= current:
            raise Refused(409, "VM is already stopping; only a shorter grace period "
                          "may be given now")
        return [_grace_patch(opts.grace)]
    if opts.grace is not None and _live(vmi):
        out.append(_grace_patch(opts.grace))
    if strategy in (RunStrategy.ALWAYS, RunStrategy.ONCE):
        out.append(_spec_patch(vm, RunStrategy.HALTED))
        return out
    if not _live(vmi) or vmi is None:
        raise Refused(409, "VM is not running")
    out.append(_status_patch(vm, [{"action": "Stop", "uid": _uid(vmi)}]))
    return out


def restart(vm: Mapping[str, Any], vmi: Mapping[str, Any] | None,
            opts: Options) -> list[Patch]:
    strategy = _strategy(vm)
    if strategy in (RunStrategy.HALTED, RunStrategy.ONCE):
        raise Refused(409, f"{strategy.value} does not support manual restart requests")
    if vmi is None:
        raise Refused(409, "VM is not running")
    if opts.grace is not None and opts.grace != 0:
        raise Refused(400, "RestartOptions.gracePeriodSeconds: only 0 (with force) is "
                      "supported")
    out: list[Patch] = []
    if opts.grace == 0:
        if not opts.force:
            raise Refused(400, "RestartOptions.force: gracePeriodSeconds=0 needs force")
        out.append(_grace_patch(1))
    out.append(_status_patch(vm, [{"action": "Stop", "uid": _uid(vmi)}, {"action": "Start"}]))
    return out
