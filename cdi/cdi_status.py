"""The ``CDI`` object's status, as upstream's cdi-operator writes it (pure).

Matched to CDI c07cdb6fb, whose operator uses controller-lifecycle-operator-sdk
(``pkg/sdk/reconciler/reconciler.go``, ``pkg/sdk/cr-status.go``): a new object is
Deploying (Available=False, Progressing=True with reason DeployStarted, message
``Started Deployment``, Degraded=False); once every Deployment of the install is ready
(``CheckDeploymentReady``: the desired replicas, default 1, all present and all ready) it
is Deployed (Available=True with reason DeployCompleted, ``Deployment Completed``,
Progressing=False, Degraded=False) with ``observedVersion``; a Deployed object whose
Deployments stop being ready keeps its phase and gets Degraded=True, as upstream's
``CheckDegraded``. Conditions carry ``lastHeartbeatTime`` and ``lastTransitionTime`` as
openshift's custom-resource-status conditions do (the heartbeat moves only when the
condition changes here, so an unchanged status is not rewritten every pass).

rootdisk installs its CDI from manifests/ (``rootdisk up`` or ``kubectl apply``), not by
an operator reconciling the object: the status reports that install.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

# the Deployments manifests/deploy/ installs in the CDI namespace
DEPLOYMENTS = ("rootdisk-cdi-operator", "cdi-apiserver", "cdi-uploadproxy")
NAME = "cdi"

DEPLOYING, DEPLOYED = "Deploying", "Deployed"
STARTED = ("DeployStarted", "Started Deployment")
COMPLETED = ("DeployCompleted", "Deployment Completed")


def deployment_ready(obj: Mapping[str, Any] | None) -> bool:
    """Upstream's ``CheckDeploymentReady``; a missing Deployment is not ready."""
    if obj is None:
        return False
    desired = (obj.get("spec") or {}).get("replicas")
    desired = 1 if desired is None else int(desired)
    status = obj.get("status") or {}
    replicas = int(status.get("replicas") or 0)
    return desired == replicas and replicas == int(status.get("readyReplicas") or 0)


def _set(conds: list[dict[str, Any]], ctype: str, status: str, now: str,
         reason: str = "", message: str = "") -> None:
    """openshift's SetStatusCondition: a changed status moves the transition time; a
    changed reason or message moves the heartbeat."""
    for c in conds:
        if c.get("type") == ctype:
            if c.get("status") != status:
                c.update(status=status, lastTransitionTime=now, lastHeartbeatTime=now)
            if c.get("reason", "") != reason or c.get("message", "") != message:
                c.update(reason=reason, message=message, lastHeartbeatTime=now)
            return
    conds.append({"type": ctype, "status": status, "reason": reason, "message": message,
                  "lastTransitionTime": now, "lastHeartbeatTime": now})


def desired_status(cdi: Mapping[str, Any], deployments: Sequence[Mapping[str, Any] | None], *,
                   version: str, now: str) -> dict[str, Any]:
    """The whole status the CDI object should have, given its install's Deployments."""
    old = dict(cdi.get("status") or {})
    conds = [dict(c) for c in old.get("conditions") or []]
    ready = all(deployment_ready(d) for d in deployments)
    status: dict[str, Any] = {k: v for k, v in old.items() if k != "conditions"}
    status.setdefault("operatorVersion", version)
    status.setdefault("targetVersion", version)
    phase = old.get("phase") or ""
    if phase != DEPLOYED:
        if ready:
            _set(conds, "Available", "True", now, *COMPLETED)
            _set(conds, "Progressing", "False", now)
            _set(conds, "Degraded", "False", now)
            status.update(phase=DEPLOYED, observedVersion=version)
        else:
            _set(conds, "Available", "False", now)
            _set(conds, "Progressing", "True", now, *STARTED)
            _set(conds, "Degraded", "False", now)
            status["phase"] = DEPLOYING
    else:
        _set(conds, "Degraded", "False" if ready else "True", now)
    status["conditions"] = conds
    return status
