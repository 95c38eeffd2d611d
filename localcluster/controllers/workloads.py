"""Desired pods of Deployments and DaemonSets (pure).

Deployments here own their pods directly, without ReplicaSets: each pod carries the
``pod-template-hash`` of the template it was made from, so a template change is seen as
"old pods" to replace. Rollout: new pods are created up to ``replicas``; old pods are
deleted as new ones become ready (``Recreate``: old pods go first). Finished pods
(Succeeded/Failed) are deleted and replaced. A DaemonSet has one pod per node, labelled
``controller-revision-hash``, replaced when the template changes.
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


def _phase(pod: Obj) -> str:
    return str((pod.get("status") or {}).get("phase") or "Pending")


def _deleting(pod: Obj) -> bool:
    return bool((pod.get("metadata") or {}).get("deletionTimestamp"))


def is_ready(pod: Obj) -> bool:
    return _phase(pod) == "Running" and not _deleting(pod) and any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in (pod.get("status") or {}).get("conditions") or [])


def _name(pod: Obj) -> str:
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


def _condition(kind: str, ok: bool, reason: str, message: str, now: str) -> dict[str, Any]:
    return {"type": kind, "status": "True" if ok else "False", "reason": reason,
            "message": message, "lastUpdateTime": now, "lastTransitionTime": now}


def deployment_plan(*, deployment: Obj, pods: Sequence[Obj], now: str) -> Plan:
    meta, spec = deployment.get("metadata") or {}, deployment.get("spec") or {}
    replicas = int(spec.get("replicas", 1))
    h = template_hash(spec.get("template") or {})
    owned = [p for p in pods if owned_by(p, deployment)]
    finished = [p for p in owned if _phase(p) in ("Succeeded", "Failed") and not _deleting(p)]
    live = [p for p in owned if p not in finished and not _deleting(p)]
    new = [p for p in live if ((p.get("metadata") or {}).get("labels") or {}).get(
        TEMPLATE_HASH) == h]
    old = [p for p in live if p not in new]
    delete = [_name(p) for p in finished]
    recreate = (spec.get("strategy") or {}).get("type") == "Recreate"
    create_n = 0
    if spec.get("paused"):
        pass
    elif recreate and old:
        delete += [_name(p) for p in old]
    else:
        if len(new) > replicas:
            extra = sorted(new, key=lambda p: (is_ready(p), _name(p)))[: len(new) - replicas]
            delete += [_name(p) for p in extra]
        create_n = max(0, replicas - len(new))
        # Keep enough old pods to make up for new ones that are not ready yet.
        ready_new = sum(1 for p in new if is_ready(p))
        surplus = len(old) - max(0, replicas - ready_new)
        if surplus > 0:
            doomed = sorted(old, key=lambda p: (is_ready(p), _name(p)))[:surplus]
            delete += [_name(p) for p in doomed]
    pod = pod_from_template(deployment, kind="Deployment", labels={TEMPLATE_HASH: h},
                            generate_name=f"{meta.get('name')}-{h}-")
    counted = [p for p in owned if not _deleting(p) and p not in finished]
    ready = sum(1 for p in counted if is_ready(p))
    available = ready >= replicas
    status = {
        "observedGeneration": meta.get("generation", 1),
        "replicas": len(counted),
        "updatedReplicas": len(new),
        "readyReplicas": ready,
        "availableReplicas": ready,
        "unavailableReplicas": max(0, replicas - ready),
        "conditions": [
            _condition("Available", available,
                       "MinimumReplicasAvailable" if available else "MinimumReplicasUnavailable",
                       "Deployment has minimum availability." if available else
                       "Deployment does not have minimum availability.", now),
            _condition("Progressing", True,
                       "NewReplicaSetAvailable" if available and not old else "ReplicaSetUpdated",
                       f'pods with template hash "{h}" are progressing', now),
        ],
    }
    return Plan(create=[pod] * create_n, delete=delete, status=status)


def daemonset_plan(*, daemonset: Obj, pods: Sequence[Obj], nodes: Sequence[str],
                   now: str) -> Plan:
    meta, spec = daemonset.get("metadata") or {}, daemonset.get("spec") or {}
    h = template_hash(spec.get("template") or {})
    owned = [p for p in pods if owned_by(p, daemonset) and not _deleting(p)]
    create, delete = [], []
    updated = ready = scheduled = 0
    for node in nodes:
        on_node = [p for p in owned if (p.get("spec") or {}).get("nodeName") == node]
        keep = None
        for p in on_node:
            current = ((p.get("metadata") or {}).get("labels") or {}).get(REVISION_HASH) == h
            if keep is None and current and _phase(p) not in ("Succeeded", "Failed"):
                keep = p
            else:
                delete.append(_name(p))
        if keep is None:
            create.append(pod_from_template(daemonset, kind="DaemonSet",
                                            labels={REVISION_HASH: h},
                                            generate_name=f"{meta.get('name')}-",
                                            node_name=node))
        else:
            scheduled += 1
            updated += 1
            ready += int(is_ready(keep))
    delete += [_name(p) for p in owned if (p.get("spec") or {}).get("nodeName") not in nodes]
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
