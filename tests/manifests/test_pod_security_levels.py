"""rootdisk's own namespaces carry the PodSecurity level their pods need (issue 24), and
every pod template in the manifests passes its namespace's enforce level: ``rootdisk``
(the operators, the upload API and proxy) enforces ``restricted``; ``kubevirt`` is
``privileged``, as upstream's virt-operator labels it (virt-handler runs as root with the
node's launcher sockets)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from localcluster.apiserver.admission import podsecurity
from localcluster.apiserver.admission import podsecurity_checks as psa

MANIFESTS = Path(__file__).resolve().parents[2] / "manifests"
TEMPLATE_KINDS = {"Deployment": "apps/deployments", "DaemonSet": "apps/daemonsets",
                  "StatefulSet": "apps/statefulsets", "Job": "batch/jobs"}


def documents(folder: str) -> list[dict[str, Any]]:
    out = []
    for path in sorted((MANIFESTS / folder).glob("*.yaml")):
        out += [d for d in yaml.safe_load_all(path.read_text()) if d]
    return out


NAMESPACES = {d["metadata"]["name"]: d["metadata"].get("labels") or {}
              for d in documents("rbac") if d["kind"] == "Namespace"}
WORKLOADS = [d for d in documents("deploy") if d["kind"] in TEMPLATE_KINDS]


def test_the_namespaces_are_labelled() -> None:
    assert NAMESPACES["rootdisk"]["pod-security.kubernetes.io/enforce"] == "restricted"
    assert NAMESPACES["kubevirt"]["pod-security.kubernetes.io/enforce"] == "privileged"


@pytest.mark.parametrize("workload", WORKLOADS, ids=[w["metadata"]["name"] for w in WORKLOADS])
def test_every_pod_template_passes_its_namespaces_level(workload: dict[str, Any]) -> None:
    labels = NAMESPACES[workload["metadata"]["namespace"]]
    policy, errors = podsecurity.policy_of(labels)
    assert errors == []
    template = podsecurity.pod_template(TEMPLATE_KINDS[workload["kind"]], workload)
    assert template is not None
    assert psa.evaluate(policy.enforce.level, policy.enforce.version,
                        template.get("metadata") or {}, template["spec"]) == []
