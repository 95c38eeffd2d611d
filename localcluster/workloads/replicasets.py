"""Desired pods of a ReplicaSet (pure).

A ReplicaSet keeps ``spec.replicas`` live pods made from its template, owned by it
(controller reference). Finished pods (Succeeded/Failed) no longer count and are replaced;
surplus pods go not-ready first, then by name. Its status counts what it owns, as the
Deployment controller reads it to roll out.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from localcluster.workloads.shared import (
    Obj,
    Plan,
    deleting,
    is_ready,
    name_of,
    owned_by,
    phase,
    pod_from_template,
)


def replicaset_plan(*, replicaset: Obj, pods: Sequence[Obj]) -> Plan:
    meta, spec = replicaset.get("metadata") or {}, replicaset.get("spec") or {}
    replicas = int(spec.get("replicas", 1))
    owned = [p for p in pods if owned_by(p, replicaset) and not deleting(p)]
    finished = [p for p in owned if phase(p) in ("Succeeded", "Failed")]
    live = [p for p in owned if p not in finished]
    delete = [name_of(p) for p in finished]
    create: list[dict[str, Any]] = []
    if len(live) > replicas:
        surplus = sorted(live, key=lambda p: (is_ready(p), name_of(p)))[: len(live) - replicas]
        delete += [name_of(p) for p in surplus]
    elif len(live) < replicas:
        pod = pod_from_template(replicaset, kind="ReplicaSet", labels={},
                                generate_name=f"{meta.get('name')}-")
        create = [pod] * (replicas - len(live))
    ready = sum(1 for p in live if is_ready(p))
    template_labels = ((spec.get("template") or {}).get("metadata") or {}).get("labels") or {}
    labelled = sum(1 for p in live if template_labels.items() <=
                   ((p.get("metadata") or {}).get("labels") or {}).items())
    status = {
        "observedGeneration": meta.get("generation", 1),
        "replicas": len(live),
        "fullyLabeledReplicas": labelled,
        "readyReplicas": ready,
        "availableReplicas": ready,
    }
    return Plan(create=create, delete=delete, status=status)
