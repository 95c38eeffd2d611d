"""The KubeVirt object's status, as upstream's virt-operator writes it (pure).

Matched to kubevirt/kubevirt d923fdb815cd (``pkg/virt-operator/kubevirt.go`` and
``pkg/virt-operator/util/client.go``, ``readycheck.go``): while a component is not ready
the phase is Deploying with Available=False, Progressing=True, Degraded=False (reason
DeploymentInProgress, message ``Deploying version V with registry R``); once every
Deployment has a ready replica and the DaemonSet every desired pod ready, the phase is
Deployed with Available=True, Progressing=False, Degraded=False (reason
AllComponentsReady, ``All components are ready.``), Created=True (AllResourcesCreated)
and ``observedGeneration``. Only the oldest KubeVirt object is in charge (the one whose
configuration rootdisk reads, ``vm/vmi/config.py``); any other gets upstream's
Synchronized=False ExistingDeployment and nothing else.

rootdisk has no operator that installs the components (``rootdisk up`` applies
manifests/), so "created" means the component objects exist.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

# the components manifests/deploy/ installs in the KubeVirt object's namespace
DEPLOYMENTS = ("virt-api", "virt-controller")
DAEMONSETS = ("virt-handler",)

DEPLOYED = "Deployed"
DEPLOYING = "Deploying"
READY_MESSAGE = "All components are ready."
CREATED_MESSAGE = "All resources were created."
EXISTING_MESSAGE = "There is an active KubeVirt deployment"


@dataclass(frozen=True)
class Component:
    kind: str  # Deployment | DaemonSet
    name: str
    obj: Mapping[str, Any] | None  # None: not found


def component_ready(c: Component) -> bool:
    """Upstream's DeploymentIsReady / DaemonsetIsReady, from the object's status."""
    if c.obj is None:
        return False
    status = c.obj.get("status") or {}
    if c.kind == "Deployment":
        return int(status.get("replicas") or 0) > 0 and int(status.get("readyReplicas") or 0) > 0
    desired = int(status.get("desiredNumberScheduled") or 0)
    return desired > 0 and int(status.get("numberReady") or 0) >= desired


def _condition(ctype: str, status: str, reason: str, message: str,
               old: Sequence[Mapping[str, Any]], now: str) -> dict[str, Any]:
    """A condition; the probe and transition times move only when it changes, as
    upstream's SetConditionTimestamps."""
    for c in old:
        if c.get("type") == ctype and c.get("status") == status and \
                c.get("reason") == reason and c.get("message") == message:
            return dict(c)
    return {"type": ctype, "status": status, "reason": reason, "message": message,
            "lastProbeTime": now, "lastTransitionTime": now}


def in_charge(kv: Mapping[str, Any], all_kvs: Sequence[Mapping[str, Any]]) -> bool:
    """The oldest live KubeVirt object (name breaks a tie) is the one in charge."""
    live = [k for k in all_kvs if not (k.get("metadata") or {}).get("deletionTimestamp")]
    if not live:
        return False

    def key(k: Mapping[str, Any]) -> tuple[str, str, str]:
        meta = k.get("metadata") or {}
        return (str(meta.get("creationTimestamp") or ""), str(meta.get("namespace") or ""),
                str(meta.get("name") or ""))
    oldest = min(live, key=key)
    meta, mine = oldest.get("metadata") or {}, kv.get("metadata") or {}
    return bool(meta.get("uid") == mine.get("uid") and meta.get("name") == mine.get("name"))


def desired_status(kv: Mapping[str, Any], components: Sequence[Component], *,
                   in_charge_: bool, version: str, now: str) -> dict[str, Any]:
    """The whole status the KubeVirt object should have."""
    old = dict(kv.get("status") or {})
    conds: list[Mapping[str, Any]] = list(old.get("conditions") or [])
    if not in_charge_:
        return {"conditions": [_condition("Synchronized", "False", "ExistingDeployment",
                                          EXISTING_MESSAGE, conds, now)]}
    registry = str((kv.get("spec") or {}).get("imageRegistry") or "")
    status: dict[str, Any] = {
        "targetKubeVirtVersion": version, "targetKubeVirtRegistry": registry,
        "defaultArchitecture": "amd64",
    }
    created = all(c.obj is not None for c in components)
    if created and all(component_ready(c) for c in components):
        reason, msg = "AllComponentsReady", READY_MESSAGE
        status.update(phase=DEPLOYED, observedKubeVirtVersion=version,
                      observedKubeVirtRegistry=registry,
                      observedGeneration=(kv.get("metadata") or {}).get("generation"))
        flags = ("True", "False", "False")
    else:
        reason, msg = "DeploymentInProgress", f"Deploying version {version} with registry " \
                                              f"{registry}"
        status["phase"] = DEPLOYING
        for keep in ("observedKubeVirtVersion", "observedKubeVirtRegistry",
                     "observedGeneration"):
            if keep in old:
                status[keep] = old[keep]
        flags = ("False", "True", "False")
    new = [_condition(t, s, reason, msg, conds, now)
           for t, s in zip(("Available", "Progressing", "Degraded"), flags, strict=True)]
    if created:
        new.append(_condition("Created", "True", "AllResourcesCreated", CREATED_MESSAGE,
                              conds, now))
    status["conditions"] = new
    return status
