"""CRD ``pattern`` in Go's dialect (RE2): prometheus-operator's PrometheusRule CRD with
its ``^(?i)(abort|warn)?$``, POSIX classes, and look-ahead patterns refused when the CRD
is created. Real server on loopback, kubernetes client."""

from __future__ import annotations

import copy
import time
from pathlib import Path

import pytest
import yaml
from kubernetes import client as k8s

DATA = Path(__file__).parent / "data"


def load_crd(name: str) -> dict:
    return yaml.safe_load((DATA / f"{name}.yaml").read_text())


def create_crd(api, crd: dict) -> None:
    """Create the CRD (or keep the one a previous test made) and wait until it is served."""
    try:
        k8s.ApiextensionsV1Api(api).create_custom_resource_definition(crd)
    except k8s.ApiException as err:
        if err.status != 409:
            raise
    group, plural = crd["spec"]["group"], crd["spec"]["names"]["plural"]
    version = crd["spec"]["versions"][0]["name"]
    deadline = time.monotonic() + 10
    while True:
        try:
            found = k8s.CustomObjectsApi(api).get_api_resources(group, version)
            if any(r.name == plural for r in found.resources):
                return
        except k8s.ApiException:
            pass
        assert time.monotonic() < deadline, f"{plural}.{group} is not served"
        time.sleep(0.05)


def _rule(name: str, strategy: str, interval: str = "30s") -> dict:
    return {"apiVersion": "monitoring.coreos.com/v1", "kind": "PrometheusRule",
            "metadata": {"name": name},
            "spec": {"groups": [{"name": "g", "interval": interval,
                                 "partial_response_strategy": strategy,
                                 "rules": [{"alert": "Down", "expr": "up == 0",
                                            "for": "5m"}]}]}}


@pytest.fixture
def promrules(api):
    create_crd(api, load_crd("prometheusrules.monitoring.coreos.com"))


@pytest.mark.parametrize("strategy", ["warn", "WARN", "Abort", ""])
def test_prometheus_rule_inline_case_flag_accepts(api, namespace, promrules, strategy):
    co = k8s.CustomObjectsApi(api)
    created = co.create_namespaced_custom_object("monitoring.coreos.com", "v1", namespace,
                                                 "prometheusrules", _rule("ok", strategy))
    assert created["spec"]["groups"][0]["partial_response_strategy"] == strategy


@pytest.mark.parametrize("strategy", ["bogus", "warning", "abort "])
def test_prometheus_rule_inline_case_flag_refuses(api, namespace, promrules, strategy):
    co = k8s.CustomObjectsApi(api)
    with pytest.raises(k8s.ApiException) as err:
        co.create_namespaced_custom_object("monitoring.coreos.com", "v1", namespace,
                                           "prometheusrules", _rule("bad", strategy))
    assert err.value.status == 422
    assert "spec.groups[0].partial_response_strategy" in err.value.body
    assert "should match '^(?i)(abort|warn)?$'" in err.value.body


def test_prometheus_rule_duration_pattern(api, namespace, promrules):
    co = k8s.CustomObjectsApi(api)
    with pytest.raises(k8s.ApiException) as err:
        co.create_namespaced_custom_object("monitoring.coreos.com", "v1", namespace,
                                           "prometheusrules", _rule("dur", "warn", "5 minutes"))
    assert err.value.status == 422 and "spec.groups[0].interval" in err.value.body
    co.create_namespaced_custom_object("monitoring.coreos.com", "v1", namespace,
                                       "prometheusrules", _rule("dur", "warn", "1h30m"))


def _pattern_crd(plural: str, pattern: str) -> dict:
    return {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": f"{plural}.patterns.example.com"},
            "spec": {"group": "patterns.example.com", "scope": "Namespaced",
                     "names": {"plural": plural, "kind": plural.capitalize()[:-1]},
                     "versions": [{"name": "v1", "served": True, "storage": True, "schema": {
                         "openAPIV3Schema": {"type": "object", "properties": {
                             "spec": {"type": "object", "properties": {
                                 "word": {"type": "string", "pattern": pattern}}}}}}}]}}


def test_posix_classes_behave_as_re2(api, namespace):
    crd = _pattern_crd("alphas", "^[[:alpha:]]+$")
    create_crd(api, crd)
    co = k8s.CustomObjectsApi(api)

    def make(name, word):
        return co.create_namespaced_custom_object(
            "patterns.example.com", "v1", namespace, "alphas",
            {"apiVersion": "patterns.example.com/v1", "kind": "Alpha",
             "metadata": {"name": name}, "spec": {"word": word}})

    assert make("letters", "Hello")["spec"]["word"] == "Hello"
    # Python's re would read [[:alpha:]] as a set of ':', 'a', 'l', ... and accept "ha:".
    for bad in ("ha:", "a1"):
        with pytest.raises(k8s.ApiException) as err:
            make("nope", bad)
        assert err.value.status == 422 and "spec.word" in err.value.body


@pytest.mark.parametrize("pattern", ["^(?=a)b$", "^(?!x).*$", "(a)\\1"])
def test_patterns_re2_refuses_are_refused_at_crd_creation(api, pattern):
    crd = _pattern_crd("lookaheads", pattern)
    with pytest.raises(k8s.ApiException) as err:
        k8s.ApiextensionsV1Api(api).create_custom_resource_definition(copy.deepcopy(crd))
    assert err.value.status == 422
    assert "properties[spec].properties[word].pattern" in err.value.body
    assert "must be a valid regular expression" in err.value.body
