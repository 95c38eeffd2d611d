"""The ``CDI`` object's status as upstream's cdi-operator writes it (``cdi.cdi_status``;
CDI c07cdb6fb with controller-lifecycle-operator-sdk's CheckDeploymentReady,
MarkCrDeploying, MarkCrHealthyMessage and CheckDegraded), and on a real API server:
``kubectl wait cdi cdi --for=condition=Available`` returns once the install's Deployments
are ready."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from cdi import cdi_status, reconcile
from kubeclient import Client
from kubeclient.resources import CDIS, DEPLOYMENTS
from localcluster.apiserver.threaded import ServerThread
from tests.cdi.conftest import CRDS, NAMESPACES, ROOT
from tests.localcluster.apiserver.kubectl_tool import Run, needs_kubectl, runner
from tests.vm.conftest import kube_for, wait_served

NOW, LATER = "2026-12-05T00:00:00Z", "2026-12-05T01:00:00Z"


def dep(replicas: int, ready: int, desired: int | None = 1) -> dict[str, Any]:
    spec = {} if desired is None else {"replicas": desired}
    return {"spec": spec, "status": {"replicas": replicas, "readyReplicas": ready}}


# upstream's CheckDeploymentReady: the desired count (1 when unset) present and all ready
@pytest.mark.parametrize(("obj", "ready"), [
    (None, False),
    (dep(1, 1), True),
    (dep(1, 0), False),
    (dep(2, 1, desired=2), False),     # upstream wants every replica ready
    (dep(2, 2, desired=2), True),
    (dep(1, 1, desired=None), True),   # replicas unset: 1
    (dep(2, 2, desired=1), False),     # a rollout in progress: more than desired
    (dep(0, 0, desired=0), True),
])
def test_deployment_ready(obj: dict[str, Any] | None, ready: bool) -> None:
    assert cdi_status.deployment_ready(obj) is ready


def conds(status: dict[str, Any]) -> dict[str, tuple[str, str, str]]:
    return {c["type"]: (c["status"], c.get("reason", ""), c.get("message", ""))
            for c in status["conditions"]}


def cdi(**status: Any) -> dict[str, Any]:
    return {"metadata": {"name": "cdi"}, "spec": {}, "status": status}


def test_deploying_then_deployed_then_degraded() -> None:
    deploying = cdi_status.desired_status(cdi(), [dep(1, 0), dep(1, 1)], version="v9",
                                          now=NOW)
    assert deploying["phase"] == "Deploying"
    assert conds(deploying) == {"Available": ("False", "", ""),
                                "Progressing": ("True", "DeployStarted",
                                                "Started Deployment"),
                                "Degraded": ("False", "", "")}
    deployed = cdi_status.desired_status(cdi(**deploying), [dep(1, 1), dep(1, 1)],
                                         version="v9", now=LATER)
    assert deployed["phase"] == "Deployed" and deployed["observedVersion"] == "v9"
    assert conds(deployed) == {"Available": ("True", "DeployCompleted",
                                             "Deployment Completed"),
                               "Progressing": ("False", "", ""),
                               "Degraded": ("False", "", "")}
    available = next(c for c in deployed["conditions"] if c["type"] == "Available")
    assert available["lastTransitionTime"] == LATER
    # deployed, then a Deployment is not ready: still Deployed, Degraded (CheckDegraded)
    degraded = cdi_status.desired_status(cdi(**deployed), [dep(1, 0), dep(1, 1)],
                                         version="v9", now=LATER)
    assert degraded["phase"] == "Deployed"
    assert conds(degraded)["Degraded"][0] == "True"
    assert conds(degraded)["Available"][0] == "True"
    # and an unchanged install is an unchanged status (nothing rewritten every pass)
    again = cdi_status.desired_status(cdi(**deployed), [dep(1, 1), dep(1, 1)],
                                      version="v9", now="2026-12-05T02:00:00Z")
    assert again == deployed


def test_a_missing_deployment_keeps_it_deploying() -> None:
    status = cdi_status.desired_status(cdi(), [None, dep(1, 1)], version="v9", now=NOW)
    assert status["phase"] == "Deploying"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Any, Client]]:
    thread = ServerThread(tmp_path_factory.mktemp("apiserver"))
    server = thread.start()
    c = Client(kube_for(server).configuration)
    try:
        c.create(CRDS, yaml.safe_load((ROOT / "manifests" / "crds" / "cdis.yaml").read_text()))
        wait_served(kube_for(server), "/apis/cdi.kubevirt.io/v1beta1/cdis")
        c.create(NAMESPACES, {"apiVersion": "v1", "kind": "Namespace",
                              "metadata": {"name": "rootdisk"}})
        yield server, c
    finally:
        c.close()
        thread.stop()


def _set_status(c: Client, name: str, ready: int) -> None:
    current = c.get_or_none(DEPLOYMENTS, name, "rootdisk")
    assert current is not None
    current["status"] = {"replicas": 1, "readyReplicas": ready}
    c.request("PUT", DEPLOYMENTS.path("rootdisk", name, "status"), body=current)


@needs_kubectl
def test_kubectl_wait_cdi_available(cluster: tuple[Any, Client], tmp_path: Path,
                                    monkeypatch: pytest.MonkeyPatch) -> None:
    server, c = cluster
    monkeypatch.setenv("POD_NAMESPACE", "rootdisk")
    kubectl: Run = runner(server.kubeconfig_path, tmp_path)
    reconcile.reconcile_cdi(c, version="v9")  # no CDI object yet: nothing, no error
    c.create(CDIS, yaml.safe_load((ROOT / "manifests" / "deploy" / "cdi-cr.yaml").read_text()))
    for name in cdi_status.DEPLOYMENTS:
        c.create(DEPLOYMENTS, {
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": name, "namespace": "rootdisk"},
            "spec": {"replicas": 1, "selector": {"matchLabels": {"app": name}},
                     "template": {"metadata": {"labels": {"app": name}},
                                  "spec": {"containers": [{"name": "c", "image": "x"}]}}}})
        _set_status(c, name, ready=0 if name == "cdi-uploadproxy" else 1)
    reconcile.reconcile_cdi(c, version="v9")
    proc = kubectl("wait", "cdi", "cdi", "--for=condition=Available", "--timeout=1s")
    assert proc.returncode != 0  # the upload proxy is not ready
    assert "Deploying" in kubectl("get", "cdi").stdout
    _set_status(c, "cdi-uploadproxy", ready=1)
    reconcile.reconcile_cdi(c, version="v9")
    proc = kubectl("wait", "cdi", "cdi", "--for=condition=Available", "--timeout=10s")
    assert proc.returncode == 0, proc.stderr
    assert "cdi.cdi.kubevirt.io/cdi condition met" in proc.stdout
    assert "Deployed" in kubectl("get", "cdi", "cdi").stdout
