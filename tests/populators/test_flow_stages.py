"""The flow's decision as ordered stages (pure): the driver runs a populator's stages in
order and the first Plan wins; a populator places its own stages among the shared ones;
the shared stages know nothing of the clone's observations."""

from __future__ import annotations

from typing import Any

import pytest

from populators import clone_stages, flow
from populators.clone_populator import ClonePopulator
from populators.flow import CreatePrime, Observed, Plan, Populator
from populators.import_populator import ImportPopulator
from populators.importer_pod import Settings
from populators.upload_populator import UploadPopulator
from tests.populators.test_flow import IMMEDIATE, SOURCE, prime, target

SHARED = ["target_deleted", "target_bound", "population_failed", "population_succeeded",
          "source_missing", "source_denied", "source_invalid", "claim_not_ready",
          "make_prime", "prime_deleting", "prime_in_use", "make_pod", "follow_pod"]


def observed(**kw: Any) -> Observed:
    base: dict[str, Any] = {"target": target(), "storage_class": IMMEDIATE,
                            "source": SOURCE, "prime": None, "pod": None, "volume": None}
    return Observed(**{**base, **kw})


def names(stages: tuple[flow.Stage, ...]) -> list[str]:
    return [s.__name__ for s in stages]


class Staged(ImportPopulator):
    """The import populator with other stages (a test double of a populator that
    brings its own)."""

    def __init__(self, stages: tuple[flow.Stage, ...]) -> None:
        self.stages = stages


def test_shared_stages_run_in_the_flow_order() -> None:
    assert names(flow.STAGES) == SHARED
    assert ImportPopulator().stages is flow.STAGES
    assert UploadPopulator().stages is flow.STAGES


def test_the_first_plan_wins_and_later_stages_do_not_run() -> None:
    ran: list[str] = []

    def stage(name: str, plan: Plan | None) -> flow.Stage:
        def run(o: Observed, populator: Populator, settings: Settings) -> Plan | None:
            ran.append(name)
            return plan
        run.__name__ = name
        return run

    pop = Staged((stage("a", None), stage("b", Plan(waiting="b")), stage("c", Plan())))
    assert flow.decide(observed(), pop, Settings()).waiting == "b"
    assert ran == ["a", "b"]


def test_no_stage_deciding_is_an_error_naming_the_target() -> None:
    pop = Staged((lambda o, p, s: None,))
    with pytest.raises(flow.NoDecision, match="VolumeImportSource decided for ns/disk"):
        flow.decide(observed(), pop, Settings())


def hold(o: Observed, populator: Populator, settings: Settings) -> Plan | None:
    return Plan(waiting="held by the populator's stage")


def test_a_populators_extra_stage_runs_where_it_is_placed() -> None:
    plain = flow.decide(observed(), ImportPopulator(), Settings())
    assert any(isinstance(a, CreatePrime) for a in plain.actions)
    pop = Staged(flow.extend(flow.STAGES, {flow.make_prime: (hold,)}))
    assert names(pop.stages) == [*SHARED[:8], "hold", *SHARED[8:]]
    assert flow.decide(observed(), pop, Settings()).waiting == "held by the populator's stage"
    # the stages before it still decide first: a target not ready never reaches it
    assert flow.decide(observed(storage_class=None), pop, Settings()).waiting == (
        "storage class 'fast' not found")


def other(o: Observed, populator: Populator, settings: Settings) -> Plan | None:
    return None


def test_extend_places_several_stages_before_each_anchor() -> None:
    got = flow.extend((flow.target_deleted, flow.target_bound),
                      {flow.target_bound: (hold, other), flow.target_deleted: (other,)})
    assert got == (other, flow.target_deleted, hold, other, flow.target_bound)
    assert flow.extend(flow.STAGES, {}) == flow.STAGES
    with pytest.raises(ValueError, match="not among the stages: other"):
        flow.extend(flow.STAGES, {other: (hold,)})


def test_the_clone_places_its_checks_among_the_shared_stages() -> None:
    assert ClonePopulator().stages is clone_stages.STAGES
    assert names(clone_stages.STAGES) == [
        *SHARED[:8], "source_in_use_before_prime", "prime_blocked", "make_prime",
        "prime_deleting", "storage_fills_prime", "source_in_use_before_pod",
        "prime_in_use", "copy_waits_for_prime_volume", "make_pod", "source_pod_failed",
        "follow_pod"]


@pytest.mark.parametrize("clone_only", [
    {"source_busy": "pod w writes to the source"},
    {"prime_blocked": "taking a snapshot"},
])
def test_the_shared_stages_do_not_read_the_clones_observations(
        clone_only: dict[str, Any]) -> None:
    """Only the clone's stages read them: the import populator makes PVC' regardless."""
    plan = flow.decide(observed(**clone_only), ImportPopulator(), Settings())
    assert any(isinstance(a, CreatePrime) for a in plan.actions)


def test_a_clone_stage_is_what_makes_a_busy_source_wait() -> None:
    busy = {"source_busy": "pod w writes to the source", "prime": prime()}
    with_clone = Staged(flow.extend(flow.STAGES, {
        flow.prime_in_use: (clone_stages.source_in_use_before_pod,)}))
    assert flow.decide(observed(**busy), with_clone, Settings()).waiting == "source in use"
    assert flow.decide(observed(**busy), ImportPopulator(), Settings()).waiting == (
        "pod created")
