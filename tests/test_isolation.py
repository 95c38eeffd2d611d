"""What the suite's own set-up must not do to the tests that share a process with it."""

from __future__ import annotations

from tests.fixtures.plugin import COLLECTED_KOPF_HANDLERS


def test_collecting_the_tests_registers_no_kopf_handler() -> None:
    """An in-process kopf operator (tests/populators, tests/localcluster/apiserver/
    test_kopf.py) runs every handler in kopf's default registry, so a test module that
    imported a handlers module made those operators run the CDI controller's handlers
    too, against an API server gone with an earlier module (every populator e2e test of
    one worker failed so in a CI-style run). Import what a test calls from a module
    without @kopf decorators."""
    assert COLLECTED_KOPF_HANDLERS == []
