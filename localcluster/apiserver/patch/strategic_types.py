"""Where strategic merge patch merges lists instead of replacing them.

kube-apiserver reads this from the ``patchStrategy``/``patchMergeKey`` tags of the Go
types; we have no Go types, so the few that matter are written down here as a small type
graph. A struct maps field names to either another struct (by name) or a :class:`ListRule`.
Fields not listed behave as in a JSON merge patch: maps merge, lists are atomic.

Only the built-in kinds have this; custom resources are patched with merge patch (the
server answers 415 to a strategic patch for them, as kube-apiserver does).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ListRule:
    """How a list field is patched."""

    merge: bool
    """True for ``patchStrategy: merge``; False for atomic (replace the whole list)."""
    key: str | None = None
    """``patchMergeKey``: the field identifying an element of a list of maps."""
    elem: str | None = None
    """Struct type of the elements, for nested rules."""


def _by(key: str, elem: str | None = None) -> ListRule:
    return ListRule(merge=True, key=key, elem=elem)


_SET = ListRule(merge=True)  # a list of primitives merged as a set (finalizers)
ATOMIC = ListRule(merge=False)

Field = ListRule | str

STRUCTS: dict[str, dict[str, Field]] = {
    "ObjectMeta": {"finalizers": _SET, "ownerReferences": _by("uid")},
    "Container": {
        "ports": _by("containerPort"),
        "env": _by("name"),
        "volumeMounts": _by("mountPath"),
        "volumeDevices": _by("devicePath"),
        "resizePolicy": ATOMIC,
    },
    "PodSpec": {
        "containers": _by("name", "Container"),
        "initContainers": _by("name", "Container"),
        "ephemeralContainers": _by("name", "Container"),
        "volumes": _by("name"),
        "imagePullSecrets": _by("name"),
        "hostAliases": _by("ip"),
        "topologySpreadConstraints": _by("topologyKey"),
        "schedulingGates": _by("name"),
        "resourceClaims": _by("name"),
        "tolerations": ATOMIC,
        "readinessGates": ATOMIC,
    },
    "PodStatus": {
        "conditions": _by("type"),
        "podIPs": _by("ip"),
        "hostIPs": _by("ip"),
        "resourceClaimStatuses": _by("name"),
    },
    "PodTemplateSpec": {"metadata": "ObjectMeta", "spec": "PodSpec"},
    "Pod": {"spec": "PodSpec", "status": "PodStatus"},
    "PodTemplate": {"template": "PodTemplateSpec"},
    "WorkloadSpec": {"template": "PodTemplateSpec"},
    "ConditionsStatus": {"conditions": _by("type")},
    "Deployment": {"spec": "WorkloadSpec", "status": "ConditionsStatus"},
    "DaemonSet": {"spec": "WorkloadSpec", "status": "ConditionsStatus"},
    "ReplicaSet": {"spec": "WorkloadSpec", "status": "ConditionsStatus"},
    "StatefulSet": {"spec": "WorkloadSpec", "status": "ConditionsStatus"},
    "ReplicationController": {"spec": "WorkloadSpec", "status": "ConditionsStatus"},
    "Job": {"spec": "WorkloadSpec", "status": "ConditionsStatus"},
    "JobTemplateSpec": {"metadata": "ObjectMeta", "spec": "WorkloadSpec"},
    "CronJobSpec": {"jobTemplate": "JobTemplateSpec"},
    "CronJob": {"spec": "CronJobSpec"},
    "ServiceSpec": {"ports": _by("port")},
    "Service": {"spec": "ServiceSpec", "status": "ConditionsStatus"},
    "PersistentVolumeClaim": {"status": "ConditionsStatus"},
    "PersistentVolume": {},
    "NodeSpec": {"podCIDRs": _SET, "taints": ATOMIC},
    "NodeStatus": {"conditions": _by("type"), "addresses": _by("type")},
    "Node": {"spec": "NodeSpec", "status": "NodeStatus"},
    "Namespace": {"status": "ConditionsStatus"},
    "ServiceAccount": {"secrets": _by("name")},
    "ValidatingWebhookConfiguration": {"webhooks": _by("name")},
    "MutatingWebhookConfiguration": {"webhooks": _by("name")},
}

_INTERNAL = {
    "ObjectMeta", "Container", "PodSpec", "PodStatus", "PodTemplateSpec", "WorkloadSpec",
    "ConditionsStatus", "JobTemplateSpec", "CronJobSpec", "ServiceSpec", "NodeSpec",
    "NodeStatus",
}

# Kinds kube-apiserver serves from Go types, hence accepting strategic merge patch.
BUILTIN_KINDS = frozenset(
    {
        "Binding", "ConfigMap", "CSIDriver", "CSINode", "CSIStorageCapacity", "ClusterRole",
        "ClusterRoleBinding", "ControllerRevision", "CustomResourceDefinition", "Endpoints",
        "EndpointSlice", "Event", "Lease", "LimitRange", "PriorityClass", "ResourceQuota",
        "Role", "RoleBinding", "Secret", "StorageClass", "VolumeAttachment", "APIService",
        "Ingress", "IngressClass", "NetworkPolicy", "PodDisruptionBudget",
        "HorizontalPodAutoscaler", "SubjectAccessReview", "TokenReview",
        "SelfSubjectAccessReview",
    }
    | (STRUCTS.keys() - _INTERNAL)
)


def field_rule(struct: str | None, name: str) -> Field | None:
    """The rule for field ``name`` of ``struct`` (None: merge-patch behaviour)."""
    if struct is None:
        return None
    return STRUCTS.get(struct, {}).get(name)
