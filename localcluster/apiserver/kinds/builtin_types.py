"""The built-in types the embedded server serves: what rootdisk and its operators use.

Only the shape of each type lives here (scope, short names, subresources, whether a PUT
may create: upstream's AllowCreateOnUpdate, true for Events, Services, Endpoints,
LimitRanges, Leases and the four RBAC kinds, false for every other kind here); behaviour
that is specific to a kind (pod graceful deletion, namespace finalization, immutable fields)
lives in ``rules/`` (``meta``, ``deletion``, ``immutability``).
"""

from __future__ import annotations

from .conversions import event_from_core, event_to_core
from .registry import ResourceType

_CREATE_ONLY = ("create",)
_RO = ("get", "list", "watch")

BUILTIN_TYPES: tuple[ResourceType, ...] = (
    # core/v1
    ResourceType("", "v1", "namespaces", "Namespace", False, "namespace", ("ns",),
                 subresources=("status", "finalize"), name_rule="label",
                 verbs=("create", "delete", "get", "list", "patch", "update", "watch")),
    ResourceType("", "v1", "configmaps", "ConfigMap", True, "configmap", ("cm",)),
    ResourceType("", "v1", "secrets", "Secret", True, "secret"),
    ResourceType("", "v1", "serviceaccounts", "ServiceAccount", True, "serviceaccount",
                 ("sa",), subresources=("token",)),
    ResourceType("", "v1", "pods", "Pod", True, "pod", ("po",), ("all",),
                 subresources=("status", "log", "binding", "exec", "attach", "portforward")),
    ResourceType("", "v1", "persistentvolumeclaims", "PersistentVolumeClaim", True,
                 "persistentvolumeclaim", ("pvc",), subresources=("status",)),
    ResourceType("", "v1", "persistentvolumes", "PersistentVolume", False,
                 "persistentvolume", ("pv",), subresources=("status",)),
    ResourceType("", "v1", "events", "Event", True, "event", ("ev",), create_on_update=True),
    ResourceType("", "v1", "nodes", "Node", False, "node", ("no",), subresources=("status",)),
    ResourceType("", "v1", "services", "Service", True, "service", ("svc",), ("all",),
                 subresources=("status",), name_rule="label", create_on_update=True,
                 verbs=("create", "delete", "deletecollection", "get", "list", "patch",
                        "update", "watch")),
    ResourceType("", "v1", "endpoints", "Endpoints", True, "endpoints", ("ep",),
                 create_on_update=True),
    # events.k8s.io/v1: the same objects as core Events, other field names
    ResourceType("events.k8s.io", "v1", "events", "Event", True, "event", ("ev",),
                 storage_group="", storage_resource="events",
                 to_storage=event_to_core, from_storage=event_from_core, create_on_update=True),
    # storage.k8s.io/v1
    ResourceType("storage.k8s.io", "v1", "storageclasses", "StorageClass", False,
                 "storageclass", ("sc",)),
    ResourceType("storage.k8s.io", "v1", "csidrivers", "CSIDriver", False, "csidriver"),
    # rbac.authorization.k8s.io/v1
    ResourceType("rbac.authorization.k8s.io", "v1", "roles", "Role", True, "role",
                 name_rule="path", create_on_update=True),
    ResourceType("rbac.authorization.k8s.io", "v1", "rolebindings", "RoleBinding", True,
                 "rolebinding", name_rule="path", create_on_update=True),
    ResourceType("rbac.authorization.k8s.io", "v1", "clusterroles", "ClusterRole", False,
                 "clusterrole", name_rule="path", create_on_update=True),
    ResourceType("rbac.authorization.k8s.io", "v1", "clusterrolebindings",
                 "ClusterRoleBinding", False, "clusterrolebinding", name_rule="path",
                 create_on_update=True),
    # authorization.k8s.io/v1: reviews are answered, never stored
    ResourceType("authorization.k8s.io", "v1", "subjectaccessreviews", "SubjectAccessReview",
                 False, "subjectaccessreview", verbs=_CREATE_ONLY),
    ResourceType("authorization.k8s.io", "v1", "selfsubjectaccessreviews",
                 "SelfSubjectAccessReview", False, "selfsubjectaccessreview",
                 verbs=_CREATE_ONLY),
    ResourceType("authorization.k8s.io", "v1", "localsubjectaccessreviews",
                 "LocalSubjectAccessReview", True, "localsubjectaccessreview",
                 verbs=_CREATE_ONLY),
    # authentication.k8s.io/v1: who am I (kubectl auth whoami)
    ResourceType("authentication.k8s.io", "v1", "selfsubjectreviews", "SelfSubjectReview",
                 False, "selfsubjectreview", verbs=_CREATE_ONLY),
    ResourceType("authorization.k8s.io", "v1", "selfsubjectrulesreviews",
                 "SelfSubjectRulesReview", False, "selfsubjectrulesreview", verbs=_CREATE_ONLY),
    ResourceType("authentication.k8s.io", "v1", "tokenreviews", "TokenReview", False,
                 "tokenreview", verbs=_CREATE_ONLY),
    # apiregistration.k8s.io/v1: aggregated APIs (aggregation/proxy.py)
    ResourceType("apiregistration.k8s.io", "v1", "apiservices", "APIService", False,
                 "apiservice", categories=("api-extensions",), subresources=("status",)),
    # coordination.k8s.io/v1
    ResourceType("coordination.k8s.io", "v1", "leases", "Lease", True, "lease",
                 create_on_update=True),
    # apps/v1
    ResourceType("apps", "v1", "deployments", "Deployment", True, "deployment", ("deploy",),
                 ("all",), subresources=("status", "scale")),
    ResourceType("apps", "v1", "daemonsets", "DaemonSet", True, "daemonset", ("ds",),
                 ("all",), subresources=("status",)),
    # Stored and served without a controller behind them here (as on a cluster missing
    # that controller), so manifests and kubectl commands that touch them still work.
    ResourceType("", "v1", "resourcequotas", "ResourceQuota", True, "resourcequota",
                 ("quota",), subresources=("status",)),
    ResourceType("", "v1", "limitranges", "LimitRange", True, "limitrange", ("limits",),
                 create_on_update=True),
    ResourceType("", "v1", "podtemplates", "PodTemplate", True, "podtemplate"),
    ResourceType("apps", "v1", "replicasets", "ReplicaSet", True, "replicaset", ("rs",),
                 ("all",), subresources=("status", "scale")),
    ResourceType("apps", "v1", "statefulsets", "StatefulSet", True, "statefulset", ("sts",),
                 ("all",), subresources=("status", "scale")),
    ResourceType("apps", "v1", "controllerrevisions", "ControllerRevision", True,
                 "controllerrevision"),
    ResourceType("batch", "v1", "jobs", "Job", True, "job", (), ("all",),
                 subresources=("status",)),
    ResourceType("batch", "v1", "cronjobs", "CronJob", True, "cronjob", ("cj",), ("all",),
                 subresources=("status",)),
    ResourceType("policy", "v1", "poddisruptionbudgets", "PodDisruptionBudget", True,
                 "poddisruptionbudget", ("pdb",), subresources=("status",)),
    ResourceType("scheduling.k8s.io", "v1", "priorityclasses", "PriorityClass", False,
                 "priorityclass", ("pc",)),
    ResourceType("discovery.k8s.io", "v1", "endpointslices", "EndpointSlice", True,
                 "endpointslice"),
    ResourceType("networking.k8s.io", "v1", "networkpolicies", "NetworkPolicy", True,
                 "networkpolicy", ("netpol",)),
    ResourceType("networking.k8s.io", "v1", "ingresses", "Ingress", True, "ingress", ("ing",),
                 subresources=("status",)),
    ResourceType("networking.k8s.io", "v1", "ingressclasses", "IngressClass", False,
                 "ingressclass"),
    ResourceType("storage.k8s.io", "v1", "volumeattachments", "VolumeAttachment", False,
                 "volumeattachment", subresources=("status",)),
    ResourceType("storage.k8s.io", "v1", "csinodes", "CSINode", False, "csinode"),
    # apiextensions.k8s.io/v1
    ResourceType("apiextensions.k8s.io", "v1", "customresourcedefinitions",
                 "CustomResourceDefinition", False, "customresourcedefinition",
                 ("crd", "crds"), ("api-extensions",), subresources=("status",)),
    # admissionregistration.k8s.io/v1
    ResourceType("admissionregistration.k8s.io", "v1", "validatingwebhookconfigurations",
                 "ValidatingWebhookConfiguration", False, "validatingwebhookconfiguration",
                 categories=("api-extensions",)),
    ResourceType("admissionregistration.k8s.io", "v1", "mutatingwebhookconfigurations",
                 "MutatingWebhookConfiguration", False, "mutatingwebhookconfiguration",
                 categories=("api-extensions",)),
)

# Reviews are computed on create and returned, never stored or listed.
REVIEW_RESOURCES = frozenset({
    "authorization.k8s.io/subjectaccessreviews",
    "authorization.k8s.io/selfsubjectaccessreviews",
    "authorization.k8s.io/localsubjectaccessreviews",
    "authentication.k8s.io/selfsubjectreviews",
    "authentication.k8s.io/tokenreviews",
    "authorization.k8s.io/selfsubjectrulesreviews",
})

# Namespaces that always exist (recreated at start if missing).
SYSTEM_NAMESPACES = ("default", "kube-system", "kube-public", "kube-node-lease")
