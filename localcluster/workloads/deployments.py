"""What a Deployment wants of its ReplicaSets (pure), as kube-controller-manager's
deployment controller decides it.

The ReplicaSet whose template equals the Deployment's (ignoring the ``pod-template-hash``
label) is the new one, named ``<deployment>-<hash>``; all others it owns are old. Each
carries its revision in ``deployment.kubernetes.io/revision``: a new ReplicaSet, or an old
one whose template comes back (``kubectl rollout undo``), gets the highest revision + 1.

- RollingUpdate: the new ReplicaSet grows while all pods stay within
  ``replicas + maxSurge``; old ones shrink while at least ``replicas - maxUnavailable``
  pods stay available (unavailable old pods go first). Percentages round up for surge and
  down for unavailability; both zero means one may be unavailable, as upstream.
- Recreate: old ReplicaSets go to zero, and the new one grows once their pods are gone.
- Paused: no rollout; only the status is kept.
- Old ReplicaSets scaled to zero beyond ``revisionHistoryLimit`` are deleted, oldest first.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from localcluster.workloads.shared import (
    TEMPLATE_HASH,
    Obj,
    condition,
    deleting,
    owned_by,
    template_hash,
)

REVISION = "deployment.kubernetes.io/revision"
DESIRED_REPLICAS = "deployment.kubernetes.io/desired-replicas"
MAX_REPLICAS = "deployment.kubernetes.io/max-replicas"
CHANGE_CAUSE = "kubernetes.io/change-cause"


@dataclass(frozen=True)
class DeploymentPlan:
    create: Mapping[str, Any] | None = None
    """A new ReplicaSet to create."""
    scale: Mapping[str, int] = field(default_factory=dict)
    """ReplicaSet name → the ``spec.replicas`` it should have."""
    annotate: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    """ReplicaSet name → annotations to set (revision, desired and max replicas)."""
    delete: Sequence[str] = ()
    """Old ReplicaSets beyond the revision history."""
    revision: str | None = None
    """The Deployment's own ``deployment.kubernetes.io/revision``."""
    status: Mapping[str, Any] = field(default_factory=dict)


def _int_or_percent(value: Any, total: int, *, round_up: bool, name: str) -> int:
    if isinstance(value, bool):
        raise ValueError(f"{name}: {value!r} is neither an integer nor a percentage")
    if isinstance(value, int):
        return max(0, value)
    text = str(value)
    if not text.endswith("%") or not text[:-1].isdigit():
        raise ValueError(f'{name}: "{text}" is neither an integer nor a percentage')
    scaled = int(text[:-1]) * total / 100
    return math.ceil(scaled) if round_up else math.floor(scaled)


def fenceposts(spec: Mapping[str, Any], replicas: int) -> tuple[int, int]:
    """``(maxSurge, maxUnavailable)`` in pods for a RollingUpdate."""
    rolling = (spec.get("strategy") or {}).get("rollingUpdate") or {}
    surge = _int_or_percent(rolling.get("maxSurge", "25%"), replicas, round_up=True,
                            name="spec.strategy.rollingUpdate.maxSurge")
    unavailable = _int_or_percent(rolling.get("maxUnavailable", "25%"), replicas,
                                  round_up=False,
                                  name="spec.strategy.rollingUpdate.maxUnavailable")
    if surge == 0 and unavailable == 0:
        unavailable = 1
    return surge, min(unavailable, replicas)


def _pruned(value: Any) -> Any:
    """``value`` without nulls and empty objects or lists, at any depth: clients written
    in Go send a template back with ``creationTimestamp: null`` and ``resources: {}``
    (``kubectl rollout undo`` does), which mean the same as leaving them out."""
    if isinstance(value, Mapping):
        out = {k: _pruned(v) for k, v in value.items()}
        return {k: v for k, v in out.items() if v not in (None, {}, [])}
    if isinstance(value, list):
        return [_pruned(v) for v in value]
    return value


def _template_key(template: Mapping[str, Any]) -> str:
    """The hash of a pod template, ignoring its pod-template-hash label and whatever
    :func:`_pruned` folds away."""
    plain = copy.deepcopy(dict(template))
    labels = (plain.get("metadata") or {}).get("labels")
    if isinstance(labels, dict):
        labels.pop(TEMPLATE_HASH, None)
    return template_hash(_pruned(plain))


def revision_of(rs: Obj) -> int:
    raw = ((rs.get("metadata") or {}).get("annotations") or {}).get(REVISION, "0")
    return int(raw) if str(raw).isdigit() else 0


def _spec_replicas(rs: Obj) -> int:
    return int((rs.get("spec") or {}).get("replicas", 0))


def _status(rs: Obj, key: str) -> int:
    return int((rs.get("status") or {}).get(key) or 0)


def new_replicaset(deployment: Obj, *, replicas: int, revision: int, max_surge: int) -> Obj:
    """The ReplicaSet for the Deployment's current template."""
    meta, spec = deployment.get("metadata") or {}, deployment.get("spec") or {}
    template = copy.deepcopy(dict(spec.get("template") or {}))
    h = _template_key(template)
    tmeta = template.setdefault("metadata", {})
    tmeta["labels"] = {**(tmeta.get("labels") or {}), TEMPLATE_HASH: h}
    selector = copy.deepcopy(dict(spec.get("selector") or {}))
    selector["matchLabels"] = {**(selector.get("matchLabels") or {}), TEMPLATE_HASH: h}
    desired = int(spec.get("replicas", 1))
    annotations = {REVISION: str(revision), DESIRED_REPLICAS: str(desired),
                   MAX_REPLICAS: str(desired + max_surge)}
    cause = (meta.get("annotations") or {}).get(CHANGE_CAUSE)
    if cause:
        annotations[CHANGE_CAUSE] = cause
    return {
        "apiVersion": "apps/v1",
        "kind": "ReplicaSet",
        "metadata": {
            "name": f"{meta.get('name')}-{h}",
            "namespace": meta.get("namespace"),
            "labels": dict(tmeta["labels"]),
            "annotations": annotations,
            "ownerReferences": [{
                "apiVersion": "apps/v1", "kind": "Deployment", "name": meta.get("name"),
                "uid": meta.get("uid"), "controller": True, "blockOwnerDeletion": True,
            }],
        },
        "spec": {"replicas": replicas, "selector": selector, "template": template,
                 "minReadySeconds": int(spec.get("minReadySeconds", 0))},
    }


def deployment_plan(*, deployment: Obj, replicasets: Sequence[Obj], now: str) -> DeploymentPlan:
    spec = deployment.get("spec") or {}
    replicas = int(spec.get("replicas", 1))
    recreate = (spec.get("strategy") or {}).get("type") == "Recreate"
    surge, unavailable = (0, replicas) if recreate else fenceposts(spec, replicas)
    owned = [rs for rs in replicasets if owned_by(rs, deployment) and not deleting(rs)]
    key = _template_key(spec.get("template") or {})
    new = next((rs for rs in owned
                if _template_key((rs.get("spec") or {}).get("template") or {}) == key), None)
    old = sorted((rs for rs in owned if rs is not new), key=revision_of)
    max_old_revision = max((revision_of(rs) for rs in old), default=0)

    scale: dict[str, int] = {}
    annotate: dict[str, dict[str, str]] = {}
    create: Obj | None = None
    target: dict[str, int] = {rs["metadata"]["name"]: _spec_replicas(rs) for rs in owned}
    old_pods = sum(_status(rs, "replicas") for rs in old)

    if not spec.get("paused"):
        if new is None:
            if recreate:
                first = 0 if any(target[rs["metadata"]["name"]] or _status(rs, "replicas")
                                 for rs in old) else replicas
            else:
                first = min(replicas, max(0, replicas + surge - sum(target.values())))
            create = new_replicaset(deployment, replicas=first,
                                    revision=max_old_revision + 1, max_surge=surge)
            new_name = str(create["metadata"]["name"])
            target[new_name] = first
        else:
            new_name = new["metadata"]["name"]
            want = {REVISION: str(max(revision_of(new), max_old_revision + 1)),
                    DESIRED_REPLICAS: str(replicas), MAX_REPLICAS: str(replicas + surge)}
            have = (new["metadata"].get("annotations") or {})
            if any(have.get(k) != v for k, v in want.items()):
                annotate[new_name] = want
            current = target[new_name]
            if recreate:
                grow_to = replicas if not any(target[rs["metadata"]["name"]] for rs in old) \
                    and old_pods == 0 else current
            elif current > replicas:
                grow_to = replicas
            else:
                room = replicas + surge - sum(target.values())
                grow_to = current + max(0, min(replicas - current, room))
            target[new_name] = grow_to
        _shrink_old(old, target, new=new, new_name=new_name, replicas=replicas,
                    unavailable=unavailable, recreate=recreate)
        for rs in owned:
            name = rs["metadata"]["name"]
            if target[name] != _spec_replicas(rs):
                scale[name] = target[name]

    limit = int(spec.get("revisionHistoryLimit", 10))
    idle = [rs for rs in old if target[rs["metadata"]["name"]] == 0 and
            _status(rs, "replicas") == 0]
    delete = [rs["metadata"]["name"] for rs in idle[: max(0, len(idle) - limit)]]

    revision = None
    if create is not None:
        revision = create["metadata"]["annotations"][REVISION]
    elif new is not None:
        revision = annotate.get(new["metadata"]["name"], {}).get(REVISION) or \
            str(revision_of(new))
    status = _status_of(deployment, new=new, created=create, owned=owned, replicas=replicas,
                        unavailable=unavailable, now=now)
    return DeploymentPlan(create=create, scale=scale, annotate=annotate, delete=delete,
                          revision=revision, status=status)


def _shrink_old(old: Sequence[Obj], target: dict[str, int], *, new: Obj | None,
                new_name: str, replicas: int, unavailable: int, recreate: bool) -> None:
    """Lower the old ReplicaSets' targets in ``target`` as far as availability allows."""
    if recreate:
        for rs in old:
            target[rs["metadata"]["name"]] = 0
        return
    min_available = replicas - unavailable
    new_unavailable = target[new_name] - (_status(new, "availableReplicas") if new else 0)
    budget = sum(target.values()) - min_available - max(0, new_unavailable)
    if budget <= 0:
        return
    # Unavailable old pods first: removing them costs no availability.
    for rs in old:
        name = rs["metadata"]["name"]
        unhealthy = max(0, target[name] - _status(rs, "availableReplicas"))
        take = min(unhealthy, budget)
        target[name] -= take
        budget -= take
    available = sum(_status(rs, "availableReplicas") for rs in old) + \
        (_status(new, "availableReplicas") if new else 0)
    budget = min(budget, available - min_available)
    for rs in old:
        if budget <= 0:
            break
        name = rs["metadata"]["name"]
        take = min(target[name], budget)
        target[name] -= take
        budget -= take


def _status_of(deployment: Obj, *, new: Obj | None, created: Obj | None, owned: Sequence[Obj],
               replicas: int, unavailable: int, now: str) -> dict[str, Any]:
    meta, spec = deployment.get("metadata") or {}, deployment.get("spec") or {}
    total = sum(_status(rs, "replicas") for rs in owned)
    updated = _status(new, "replicas") if new else 0
    ready = sum(_status(rs, "readyReplicas") for rs in owned)
    available = sum(_status(rs, "availableReplicas") for rs in owned)
    has_minimum = available >= replicas - unavailable
    name = (created or new or {}).get("metadata", {}).get("name", "")
    if spec.get("paused"):
        progressing = condition("Progressing", False, "DeploymentPaused",
                                "Deployment is paused", now)
        progressing["status"] = "Unknown"
    elif created is not None:
        progressing = condition("Progressing", True, "NewReplicaSetCreated",
                                f'Created new replica set "{name}"', now)
    elif updated == replicas == total and available >= replicas and new is not None and \
            _status(new, "observedGeneration") >= int(
                (new.get("metadata") or {}).get("generation", 1)):
        progressing = condition("Progressing", True, "NewReplicaSetAvailable",
                                f'ReplicaSet "{name}" has successfully progressed.', now)
    else:
        progressing = condition("Progressing", True, "ReplicaSetUpdated",
                                f'ReplicaSet "{name}" is progressing.', now)
    return {
        "observedGeneration": meta.get("generation", 1),
        "replicas": total,
        "updatedReplicas": updated,
        "readyReplicas": ready,
        "availableReplicas": available,
        "unavailableReplicas": max(0, replicas - available),
        "conditions": [
            condition("Available", has_minimum,
                      "MinimumReplicasAvailable" if has_minimum else
                      "MinimumReplicasUnavailable",
                      "Deployment has minimum availability." if has_minimum else
                      "Deployment does not have minimum availability.", now),
            progressing,
        ],
    }
