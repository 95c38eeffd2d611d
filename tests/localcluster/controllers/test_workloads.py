"""Table tests of the Deployment/DaemonSet plans and Service endpoints (pure)."""

from __future__ import annotations

from typing import Any

import pytest

from localcluster.controllers import endpoints, workloads

NOW = "2026-01-01T00:00:00Z"
TEMPLATE = {"metadata": {"labels": {"app": "x"}},
            "spec": {"containers": [{"name": "c", "image": "rootdisk/operator"}]}}


def deployment(replicas: int = 2, template: dict | None = None, **spec: Any) -> dict:
    return {"metadata": {"name": "d", "namespace": "ns", "uid": "D", "generation": 3},
            "spec": {"replicas": replicas, "template": template or TEMPLATE, **spec}}


def owned_pod(name: str, *, owner: str = "D", hash_: str | None = None, phase: str = "Running",
              ready: bool = True, deleting: bool = False, node: str | None = None,
              label: str = workloads.TEMPLATE_HASH) -> dict:
    meta: dict[str, Any] = {"name": name, "namespace": "ns",
                            "labels": {label: hash_ or workloads.template_hash(TEMPLATE)},
                            "ownerReferences": [{"uid": owner, "controller": True}]}
    if deleting:
        meta["deletionTimestamp"] = NOW
    return {"metadata": meta, "spec": {"nodeName": node} if node else {},
            "status": {"phase": phase, "conditions": [
                {"type": "Ready", "status": "True" if ready else "False"}]}}


def test_template_hash_is_stable_and_sensitive() -> None:
    assert workloads.template_hash(TEMPLATE) == workloads.template_hash(dict(TEMPLATE))
    other = {**TEMPLATE, "spec": {"containers": [{"name": "c", "image": "rootdisk/x"}]}}
    assert workloads.template_hash(other) != workloads.template_hash(TEMPLATE)


def test_scale_up_from_nothing() -> None:
    plan = workloads.deployment_plan(deployment=deployment(3), pods=[], now=NOW)
    assert len(plan.create) == 3 and plan.delete == []
    pod = plan.create[0]
    assert pod["metadata"]["generateName"].startswith("d-")
    assert pod["metadata"]["labels"]["app"] == "x"
    assert pod["metadata"]["ownerReferences"][0]["uid"] == "D"
    assert plan.status["replicas"] == 0
    assert {c["type"]: c["status"] for c in plan.status["conditions"]}["Available"] == "False"


def test_steady_state_is_available() -> None:
    plan = workloads.deployment_plan(deployment=deployment(2),
                                     pods=[owned_pod("a"), owned_pod("b")], now=NOW)
    assert plan.create == [] and plan.delete == []
    assert plan.status["readyReplicas"] == 2 and plan.status["availableReplicas"] == 2
    assert plan.status["observedGeneration"] == 3
    assert {c["type"]: c["status"] for c in plan.status["conditions"]}["Available"] == "True"


@pytest.mark.parametrize(("pods", "create", "delete"), [
    ([owned_pod("a"), owned_pod("b"), owned_pod("c", ready=False)], 0, ["c"]),  # scale down
    ([owned_pod("a"), owned_pod("b", phase="Failed")], 1, ["b"]),  # replace a failed pod
    ([owned_pod("a"), owned_pod("b", deleting=True)], 1, []),  # a deleting pod is gone
    ([owned_pod("a", owner="OTHER")], 2, []),  # not ours
    ([owned_pod("a", hash_="old"), owned_pod("b", hash_="old")], 2, []),  # rollout starts
    ([owned_pod("a", hash_="old"), owned_pod("n1"), owned_pod("n2")], 0, ["a"]),  # completes
    ([owned_pod("a", hash_="old"), owned_pod("n1"), owned_pod("n2", ready=False)], 0, []),
])
def test_deployment_plan(pods: list, create: int, delete: list) -> None:
    plan = workloads.deployment_plan(deployment=deployment(2), pods=pods, now=NOW)
    assert (len(plan.create), sorted(plan.delete)) == (create, delete)


def test_recreate_deletes_old_pods_first() -> None:
    plan = workloads.deployment_plan(deployment=deployment(1, strategy={"type": "Recreate"}),
                                     pods=[owned_pod("a", hash_="old")], now=NOW)
    assert plan.delete == ["a"] and plan.create == []


def daemonset() -> dict:
    return {"metadata": {"name": "ds", "namespace": "ns", "uid": "D", "generation": 1},
            "spec": {"template": TEMPLATE}}


def ds_pod(name: str, node: str, **kw: Any) -> dict:
    return owned_pod(name, node=node, label=workloads.REVISION_HASH, **kw)


@pytest.mark.parametrize(("pods", "nodes", "create_nodes", "delete"), [
    ([], ["n1"], ["n1"], []),
    ([ds_pod("a", "n1")], ["n1"], [], []),
    ([ds_pod("a", "n1"), ds_pod("b", "n1")], ["n1"], [], ["b"]),
    ([ds_pod("a", "n1", hash_="old")], ["n1"], ["n1"], ["a"]),
    ([ds_pod("a", "gone")], ["n1"], ["n1"], ["a"]),
    ([ds_pod("a", "n1", phase="Failed")], ["n1"], ["n1"], ["a"]),
])
def test_daemonset_plan(pods: list, nodes: list, create_nodes: list, delete: list) -> None:
    plan = workloads.daemonset_plan(daemonset=daemonset(), pods=pods, nodes=nodes, now=NOW)
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
