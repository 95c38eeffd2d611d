"""What the workload controllers share (pure), and the DaemonSet's desired pods.

Pods made from a template, controller references, readiness, template hashes: the
ReplicaSet (``replicasets``), Deployment (``deployments``) and DaemonSet plans all use
them. A DaemonSet has one pod per node, labelled ``controller-revision-hash``, replaced
when the template changes (no ControllerRevision objects are kept).
"""

from __future__ import annotations

import copy
import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

Obj = Mapping[str, Any]

TEMPLATE_HASH = "pod-template-hash"
REVISION_HASH = "controller-revision-hash"


def template_hash(template: Obj) -> str:
    raw = json.dumps(template, sort_keys=True, separators=(",", ":")).encode()
    return hashlib.sha256(raw).hexdigest()[:10]


def owned_by(pod: Obj, owner: Obj) -> bool:
    uid = (owner.get("metadata") or {}).get("uid")
    return any(ref.get("uid") == uid and ref.get("controller")
               for ref in (pod.get("metadata") or {}).get("ownerReferences") or [])


def phase(pod: Obj) -> str:
    return str((pod.get("status") or {}).get("phase") or "Pending")


def deleting(pod: Obj) -> bool:
    return bool((pod.get("metadata") or {}).get("deletionTimestamp"))


def is_ready(pod: Obj) -> bool:
    return phase(pod) == "Running" and not deleting(pod) and any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in (pod.get("status") or {}).get("conditions") or [])


def name_of(pod: Obj) -> str:
    return str((pod.get("metadata") or {}).get("name"))


def pod_from_template(owner: Obj, *, kind: str, labels: Mapping[str, str],
                      generate_name: str, node_name: str | None = None) -> dict[str, Any]:
    meta = owner.get("metadata") or {}
    template = copy.deepcopy(dict((owner.get("spec") or {}).get("template") or {}))
    tmeta = dict(template.get("metadata") or {})
    pod_labels = {**(tmeta.get("labels") or {}), **labels}
    spec = dict(template.get("spec") or {})
    if node_name:
        spec["nodeName"] = node_name
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "generateName": generate_name,
            "namespace": meta.get("namespace"),
            "labels": pod_labels,
            "annotations": dict(tmeta.get("annotations") or {}),
            "ownerReferences": [{
                "apiVersion": "apps/v1", "kind": kind, "name": meta.get("name"),
                "uid": meta.get("uid"), "controller": True, "blockOwnerDeletion": True,
            }],
        },
        "spec": spec,
    }


@dataclass(frozen=True)
class Plan:
    create: Sequence[Mapping[str, Any]] = ()
    delete: Sequence[str] = ()
    status: Mapping[str, Any] = field(default_factory=dict)


def condition(kind: str, ok: bool, reason: str, message: str, now: str) -> dict[str, Any]:
    return {"type": kind, "status": "True" if ok else "False", "reason": reason,
            "message": message, "lastUpdateTime": now, "lastTransitionTime": now}


def daemonset_plan(*, daemonset: Obj, pods: Sequence[Obj], nodes: Sequence[str],
                   now: str) -> Plan:
    meta, spec = daemonset.get("metadata") or {}, daemonset.get("spec") or {}
    h = template_hash(spec.get("template") or {})
    owned = [p for p in pods if owned_by(p, daemonset) and not deleting(p)]
    create, delete = [], []
    updated = ready = scheduled = 0
    for node in nodes:
        on_node = [p for p in owned if (p.get("spec") or {}).get("nodeName") == node]
        keep = None
        for p in on_node:
            current = ((p.get("metadata") or {}).get("labels") or {}).get(REVISION_HASH) == h
            if keep is None and current and phase(p) not in ("Succeeded", "Failed"):
                keep = p
            else:
                delete.append(name_of(p))
        if keep is None:
            create.append(pod_from_template(daemonset, kind="DaemonSet",
                                            labels={REVISION_HASH: h},
                                            generate_name=f"{meta.get('name')}-",
                                            node_name=node))
        else:
            scheduled += 1
            updated += 1
            ready += int(is_ready(keep))
    delete += [name_of(p) for p in owned if (p.get("spec") or {}).get("nodeName") not in nodes]
    status = {
        "observedGeneration": meta.get("generation", 1),
        "desiredNumberScheduled": len(nodes),
        "currentNumberScheduled": scheduled,
        "updatedNumberScheduled": updated,
        "numberReady": ready,
        "numberAvailable": ready,
        "numberUnavailable": len(nodes) - ready,
        "numberMisscheduled": 0,
    }
    return Plan(create=create, delete=delete, status=status)
