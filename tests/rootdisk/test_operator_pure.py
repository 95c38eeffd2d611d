"""The operator's pure parts: Lease decisions, controller sets, wait-dv helpers."""

from __future__ import annotations

import datetime

import pytest

from rootdisk.cmd_wait import failure_text, progress_value
from rootdisk.operator import lease, registry

T0 = datetime.datetime(2026, 1, 1, 12, 0, 0, tzinfo=datetime.UTC)


def at(seconds: float) -> datetime.datetime:
    return T0 + datetime.timedelta(seconds=seconds)


def held(by: str, renewed: float, duration: int = 15, transitions: int = 0) -> dict:
    return {"holderIdentity": by, "renewTime": lease.micro_time(at(renewed)),
            "acquireTime": lease.micro_time(T0), "leaseDurationSeconds": duration,
            "leaseTransitions": transitions}


@pytest.mark.parametrize(("spec", "exists", "now", "action", "holder", "transitions"), [
    (None, False, 0, "create", "me", 0),
    (held("me", 0), True, 10, "update", "me", 0),          # renew my own
    (held("other", 0), True, 10, "wait", None, None),       # still valid
    (held("other", 0), True, 15.5, "update", "me", 1),      # expired: take over
    ({**held("other", 0), "holderIdentity": ""}, True, 1, "update", "me", 1),  # released
    ({"leaseDurationSeconds": 15}, True, 1, "update", "me", 1),
    (held("other", 0, duration=60), True, 30, "wait", None, None),  # holder's duration counts
])
def test_lease_decisions(spec: dict | None, exists: bool, now: float, action: str,
                         holder: str | None, transitions: int | None) -> None:
    d = lease.decide(lease_spec=spec, exists=exists, identity="me", now=at(now), duration=15)
    assert d.action == action
    if holder is not None:
        assert d.spec is not None
        assert d.spec["holderIdentity"] == holder
        assert d.spec["renewTime"] == lease.micro_time(at(now))
        assert d.spec["leaseTransitions"] == transitions


def test_release_lets_a_successor_in_at_once() -> None:
    spec = lease.released(held("me", 0))
    assert "holderIdentity" not in spec
    assert lease.decide(lease_spec=spec, exists=True, identity="next", now=at(0.1),
                        duration=15).action == "update"


def test_registry() -> None:
    sets = registry.resolve(["cdi"])
    assert sets[0].handlers == ("cdi.handlers", "populators.handlers")
    assert set(registry.webhooks(sets)) == {"/validate-datavolumes", "/mutate-datavolumes",
                                            "/validate-dataimportcrons"}
    with pytest.raises(registry.UnknownControllerSet, match=r"unknown controller set.*nope"):
        registry.resolve(["nope"])
    with pytest.raises(registry.UnknownControllerSet):
        registry.resolve([])


@pytest.mark.parametrize(("text", "value"), [
    ("45.10%", 45.1), ("100.0%", 100.0), ("N/A", None), ("", None), (None, None),
    ("abc%", None), ("250%", 100.0),
])
def test_progress_value(text: str | None, value: float | None) -> None:
    assert progress_value(text) == value


def test_failure_text() -> None:
    status = {"conditions": [
        {"type": "Bound", "status": "False", "reason": "Pending", "message": "PVC d Pending"},
        {"type": "Running", "status": "False", "reason": "NotFound", "message": "HTTP 404"}]}
    assert failure_text(status) == "NotFound: HTTP 404"
    assert failure_text({}) == "Failed"
