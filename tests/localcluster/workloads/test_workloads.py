"""Table tests of the DaemonSet plan and Service endpoints (pure); Deployments and
ReplicaSets are in test_deployments.py."""

from __future__ import annotations

from typing import Any

import pytest

from localcluster.services import endpoints
from localcluster.workloads import shared

NOW = "2026-01-01T00:00:00Z"
TEMPLATE = {"metadata": {"labels": {"app": "x"}},
            "spec": {"containers": [{"name": "c", "image": "rootdisk/operator"}]}}


def owned_pod(name: str, *, owner: str = "D", hash_: str | None = None, phase: str = "Running",
              ready: bool = True, deleting: bool = False, node: str | None = None,
              label: str = shared.TEMPLATE_HASH) -> dict:
    meta: dict[str, Any] = {"name": name, "namespace": "ns",
                            "labels": {label: hash_ or shared.template_hash(TEMPLATE)},
                            "ownerReferences": [{"uid": owner, "controller": True}]}
    if deleting:
        meta["deletionTimestamp"] = NOW
    return {"metadata": meta, "spec": {"nodeName": node} if node else {},
            "status": {"phase": phase, "conditions": [
                {"type": "Ready", "status": "True" if ready else "False"}]}}


def test_template_hash_is_stable_and_sensitive() -> None:
    assert shared.template_hash(TEMPLATE) == shared.template_hash(dict(TEMPLATE))
    other = {**TEMPLATE, "spec": {"containers": [{"name": "c", "image": "rootdisk/x"}]}}
    assert shared.template_hash(other) != shared.template_hash(TEMPLATE)


def daemonset() -> dict:
    return {"metadata": {"name": "ds", "namespace": "ns", "uid": "D", "generation": 1},
            "spec": {"template": TEMPLATE}}


def ds_pod(name: str, node: str, **kw: Any) -> dict:
    return owned_pod(name, node=node, label=shared.REVISION_HASH, **kw)


@pytest.mark.parametrize(("pods", "nodes", "create_nodes", "delete"), [
    ([], ["n1"], ["n1"], []),
    ([ds_pod("a", "n1")], ["n1"], [], []),
    ([ds_pod("a", "n1"), ds_pod("b", "n1")], ["n1"], [], ["b"]),
    ([ds_pod("a", "n1", hash_="old")], ["n1"], ["n1"], ["a"]),
    ([ds_pod("a", "gone")], ["n1"], ["n1"], ["a"]),
    ([ds_pod("a", "n1", phase="Failed")], ["n1"], ["n1"], ["a"]),
])
def test_daemonset_plan(pods: list, nodes: list, create_nodes: list, delete: list) -> None:
    plan = shared.daemonset_plan(daemonset=daemonset(), pods=pods, nodes=nodes, now=NOW)
    assert [p["spec"]["nodeName"] for p in plan.create] == create_nodes
    assert sorted(plan.delete) == delete
    assert plan.status["desiredNumberScheduled"] == len(nodes)


def svc_pod(name: str, ip: str, *, ready: bool = True, labels: dict | None = None) -> dict:
    return {"metadata": {"name": name, "namespace": "ns", "uid": name,
                         "labels": labels if labels is not None else {"app": "web"}},
            "spec": {"nodeName": "n", "containers": [{"ports": [
                {"name": "http", "containerPort": 8080}]}]},
            "status": {"phase": "Running", "podIP": ip, "conditions": [
                {"type": "Ready", "status": "True" if ready else "False"}]}}


SERVICE = {"metadata": {"name": "web", "namespace": "ns"},
           "spec": {"selector": {"app": "web"}, "ports": [{"port": 80, "targetPort": "http"}]}}


def test_endpoints_and_resolution() -> None:
    pods = [svc_pod("b", "127.1.0.2"), svc_pod("a", "127.1.0.1"),
            svc_pod("c", "127.1.0.3", ready=False), svc_pod("x", "127.1.0.9", labels={})]
    ep = endpoints.endpoints_for(SERVICE, pods)
    subset = ep["subsets"][0]
    assert [a["ip"] for a in subset["addresses"]] == ["127.1.0.1", "127.1.0.2"]
    assert [a["ip"] for a in subset["notReadyAddresses"]] == ["127.1.0.3"]
    assert subset["ports"] == [{"name": "", "port": 8080, "protocol": "TCP"}]
    assert endpoints.resolve(SERVICE, pods, 80) == ("127.1.0.1", 8080)
    assert endpoints.resolve(SERVICE, pods, 81) is None
    assert endpoints.resolve(SERVICE, [], 80) is None
    assert endpoints.endpoints_for(SERVICE, [])["subsets"] == []


@pytest.mark.parametrize(("port", "expected"), [
    ({"port": 80}, 80), ({"port": 80, "targetPort": 9000}, 9000),
    ({"port": 80, "targetPort": "9001"}, 9001), ({"port": 80, "targetPort": "http"}, 8080),
    ({"port": 80, "targetPort": "nope"}, None),
])
def test_target_port(port: dict, expected: int | None) -> None:
    assert endpoints.target_port(svc_pod("a", "127.1.0.1"), port) == expected
