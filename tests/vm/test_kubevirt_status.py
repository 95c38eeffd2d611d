"""The KubeVirt object's status as upstream's virt-operator writes it
(``vm.controller.kubevirt_status``; kubevirt/kubevirt d923fdb815cd,
``pkg/virt-operator/util/client.go``, ``readycheck.go``), and on a real API server:
``kubectl wait kv kubevirt -n kubevirt --for=condition=Available`` returns once the
components are ready."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from kubeclient import Client
from kubeclient.resources import DAEMONSETS, DEPLOYMENTS, KUBEVIRTS
from tests.localcluster.apiserver.kubectl_tool import Run, needs_kubectl, runner
from vm.controller.kube import sync_kubevirt
from vm.controller.kubevirt_status import Component, component_ready, desired_status, in_charge

from .conftest import ROOT
from .virtapi_harness import NAMESPACES, running

NOW = "2026-12-05T00:00:00Z"


def _dep(replicas: int, ready: int) -> dict[str, Any]:
    return {"status": {"replicas": replicas, "readyReplicas": ready}}


def _ds(desired: int, ready: int) -> dict[str, Any]:
    return {"status": {"desiredNumberScheduled": desired, "numberReady": ready}}


# upstream's DeploymentIsReady / DaemonsetIsReady, from the objects' status
@pytest.mark.parametrize(("kind", "obj", "ready"), [
    ("Deployment", None, False),
    ("Deployment", _dep(0, 0), False),
    ("Deployment", _dep(2, 0), False),
    ("Deployment", _dep(2, 1), True),          # at least one ready pod is enough
    ("DaemonSet", None, False),
    ("DaemonSet", _ds(0, 0), False),           # nothing scheduled is not ready
    ("DaemonSet", _ds(2, 1), False),
    ("DaemonSet", _ds(1, 1), True),
])
def test_component_ready(kind: str, obj: dict[str, Any] | None, ready: bool) -> None:
    assert component_ready(Component(kind, "x", obj)) is ready


def _kv(**status: Any) -> dict[str, Any]:
    return {"metadata": {"name": "kubevirt", "namespace": "kubevirt", "uid": "u1",
                         "generation": 3, "creationTimestamp": "2026-01-01T00:00:00Z"},
            "spec": {"imageRegistry": "quay.io/kubevirt"}, "status": status}


def _components(api: dict[str, Any] | None = None, handler: dict[str, Any] | None = None
                ) -> list[Component]:
    return [Component("Deployment", "virt-api", api if api is not None else _dep(1, 1)),
            Component("Deployment", "virt-controller", _dep(1, 1)),
            Component("DaemonSet", "virt-handler", handler if handler is not None
                      else _ds(1, 1))]


def _conds(status: dict[str, Any]) -> dict[str, tuple[str, str, str]]:
    return {c["type"]: (c["status"], c["reason"], c["message"]) for c in status["conditions"]}


def test_all_ready_is_deployed_and_available() -> None:
    status = desired_status(_kv(), _components(), in_charge_=True, version="v9", now=NOW)
    assert status["phase"] == "Deployed"
    assert status["observedGeneration"] == 3
    assert status["observedKubeVirtVersion"] == "v9"
    msg = "All components are ready."
    assert _conds(status) == {
        "Available": ("True", "AllComponentsReady", msg),
        "Progressing": ("False", "AllComponentsReady", msg),
        "Degraded": ("False", "AllComponentsReady", msg),
        "Created": ("True", "AllResourcesCreated", "All resources were created."),
    }


@pytest.mark.parametrize(("api", "handler", "created"), [
    (_dep(1, 0), None, True),     # virt-api not ready yet
    (None, _ds(2, 1), True),      # one node's handler not ready
])
def test_not_ready_is_deploying(api: dict[str, Any] | None, handler: dict[str, Any] | None,
                                created: bool) -> None:
    status = desired_status(_kv(), _components(api, handler), in_charge_=True, version="v9",
                            now=NOW)
    assert status["phase"] == "Deploying"
    assert "observedGeneration" not in status
    msg = "Deploying version v9 with registry quay.io/kubevirt"
    conds = _conds(status)
    assert conds["Available"] == ("False", "DeploymentInProgress", msg)
    assert conds["Progressing"] == ("True", "DeploymentInProgress", msg)
    assert conds["Degraded"] == ("False", "DeploymentInProgress", msg)
    assert ("Created" in conds) is created


def test_missing_component_is_not_created() -> None:
    comps = [Component("Deployment", "virt-api", None), *_components()[1:]]
    status = desired_status(_kv(), comps, in_charge_=True, version="v9", now=NOW)
    assert status["phase"] == "Deploying" and "Created" not in _conds(status)


def test_a_second_kubevirt_is_told_another_is_active() -> None:
    status = desired_status(_kv(), _components(), in_charge_=False, version="v9", now=NOW)
    assert status == {"conditions": [{
        "type": "Synchronized", "status": "False", "reason": "ExistingDeployment",
        "message": "There is an active KubeVirt deployment",
        "lastProbeTime": NOW, "lastTransitionTime": NOW}]}


def test_times_move_only_on_change() -> None:
    first = desired_status(_kv(), _components(), in_charge_=True, version="v9", now=NOW)
    again = desired_status(_kv(**first), _components(), in_charge_=True, version="v9",
                           now="2026-12-05T01:00:00Z")
    assert again == first
    down = desired_status(_kv(**first), _components(api=_dep(1, 0)), in_charge_=True,
                          version="v9", now="2026-12-05T01:00:00Z")
    avail = next(c for c in down["conditions"] if c["type"] == "Available")
    assert avail["lastTransitionTime"] == "2026-12-05T01:00:00Z"
    assert down["observedGeneration"] == 3  # kept from the last time it was deployed


def test_the_oldest_is_in_charge() -> None:
    old = _kv()
    new = {"metadata": {"name": "second", "namespace": "other", "uid": "u2",
                        "creationTimestamp": "2026-02-01T00:00:00Z"}}
    assert in_charge(old, [new, old]) and not in_charge(new, [new, old])
    gone = {"metadata": {**old["metadata"], "deletionTimestamp": NOW}}
    assert in_charge(new, [new, gone])


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Any, Client, int]]:
    with running(tmp_path_factory.mktemp("apiserver")) as cluster:
        yield cluster


def _put_status(kube: Client, res: Any, obj: dict[str, Any], status: dict[str, Any]) -> None:
    current = kube.get_or_none(res, obj["metadata"]["name"], "kubevirt")
    assert current is not None
    current["status"] = status
    kube.replace_status(res, current)


@needs_kubectl
def test_kubectl_wait_for_available(cluster: tuple[Any, Client, int], tmp_path: Path) -> None:
    kube = cluster[1]
    kubectl: Run = runner(cluster[0].kubeconfig_path, tmp_path)
    if kube.get_or_none(NAMESPACES, "kubevirt") is None:
        kube.create(NAMESPACES, {"apiVersion": "v1", "kind": "Namespace",
                                 "metadata": {"name": "kubevirt"}})
    kv = kube.create(KUBEVIRTS, yaml.safe_load(
        (ROOT / "manifests" / "deploy" / "kubevirt-cr.yaml").read_text()), "kubevirt")
    made = []
    for res, kind, name, status in ((DEPLOYMENTS, "Deployment", "virt-api", _dep(1, 0)),
                                    (DEPLOYMENTS, "Deployment", "virt-controller", _dep(1, 1)),
                                    (DAEMONSETS, "DaemonSet", "virt-handler", _ds(1, 1))):
        spec: dict[str, Any] = {
            "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}},
                         "spec": {"containers": [{"name": "c", "image": "x"}]}}}
        if res is DEPLOYMENTS:
            spec["replicas"] = 1
        obj = kube.create(res, {"apiVersion": "apps/v1", "kind": kind,
                                "metadata": {"name": name}, "spec": spec}, "kubevirt")
        _put_status(kube, res, obj, status["status"])
        made.append(obj)

    def sync() -> None:
        current = kube.get_or_none(KUBEVIRTS, "kubevirt", "kubevirt")
        assert current is not None
        sync_kubevirt(kube, current, kube.list(KUBEVIRTS), version="v9")

    sync()
    proc = kubectl("wait", "kv", "kubevirt", "-n", "kubevirt", "--for=condition=Available",
                   "--timeout=1s")
    assert proc.returncode != 0  # virt-api has no ready replica yet
    proc = kubectl("get", "kv", "kubevirt", "-n", "kubevirt")
    assert "Deploying" in proc.stdout, proc.stdout
    _put_status(kube, DEPLOYMENTS, made[0], _dep(1, 1)["status"])
    sync()
    proc = kubectl("wait", "kv", "kubevirt", "-n", "kubevirt", "--for=condition=Available",
                   "--timeout=10s")
    assert proc.returncode == 0, proc.stderr
    assert "kubevirt.kubevirt.io/kubevirt condition met" in proc.stdout
    proc = kubectl("get", "kv", "kubevirt", "-n", "kubevirt")
    assert "Deployed" in proc.stdout, proc.stdout
    after = kube.get_or_none(KUBEVIRTS, "kubevirt", "kubevirt")
    assert after is not None and after["metadata"]["uid"] == kv["metadata"]["uid"]
