"""Every API resource the project reads or writes, defined once (pure): group, version,
plural, scope. The controllers (cdi, populators, vm), the CLI and localcluster's node side
call :class:`kubeclient.Client` with these; a kind the project starts to call gets its line
here. The CDI and KubeVirt groups come from :mod:`vocab`.
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import quote

from vocab import cdi, kubevirt


def _segment(value: str) -> str:
    # ':' stays (RBAC names such as system:node); '/', '?', '#' and '%' cannot pass.
    return quote(value, safe=":")


@dataclass(frozen=True)
class Resource:
    """What a verb needs to build a path: group ("" for core), version, plural, scope."""

    group: str
    version: str
    plural: str
    namespaced: bool = True

    def path(self, namespace: str | None = None, name: str | None = None,
             subresource: str | None = None) -> str:
        """The REST path (names quoted, so a name can never add a path segment or a
        query)."""
        out = f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"
        if self.namespaced and namespace:
            out += f"/namespaces/{_segment(namespace)}"
        out += f"/{self.plural}"
        if name:
            out += f"/{_segment(name)}"
        if subresource:
            out += f"/{subresource}"
        return out


# -- core ------------------------------------------------------------------------------
PODS = Resource("", "v1", "pods")
PVCS = Resource("", "v1", "persistentvolumeclaims")
PVS = Resource("", "v1", "persistentvolumes", namespaced=False)
NODES = Resource("", "v1", "nodes", namespaced=False)
SERVICES = Resource("", "v1", "services")
ENDPOINTS = Resource("", "v1", "endpoints")
SECRETS = Resource("", "v1", "secrets")
CONFIGMAPS = Resource("", "v1", "configmaps")
NAMESPACES = Resource("", "v1", "namespaces", namespaced=False)
EVENTS = Resource("", "v1", "events")
SERVICEACCOUNTS = Resource("", "v1", "serviceaccounts")

# -- Kubernetes groups -------------------------------------------------------------------
STORAGECLASSES = Resource("storage.k8s.io", "v1", "storageclasses", namespaced=False)
CSIDRIVERS = Resource("storage.k8s.io", "v1", "csidrivers", namespaced=False)
LEASES = Resource("coordination.k8s.io", "v1", "leases")
DEPLOYMENTS = Resource("apps", "v1", "deployments")
DAEMONSETS = Resource("apps", "v1", "daemonsets")
REPLICASETS = Resource("apps", "v1", "replicasets")
INGRESSES = Resource("networking.k8s.io", "v1", "ingresses")
SUBJECT_ACCESS_REVIEWS = Resource("authorization.k8s.io", "v1", "subjectaccessreviews",
                                  namespaced=False)
ROLES = Resource("rbac.authorization.k8s.io", "v1", "roles")
ROLEBINDINGS = Resource("rbac.authorization.k8s.io", "v1", "rolebindings")
CLUSTERROLES = Resource("rbac.authorization.k8s.io", "v1", "clusterroles", namespaced=False)
CLUSTERROLEBINDINGS = Resource("rbac.authorization.k8s.io", "v1", "clusterrolebindings",
                               namespaced=False)
CRDS = Resource("apiextensions.k8s.io", "v1", "customresourcedefinitions", namespaced=False)
APISERVICES = Resource("apiregistration.k8s.io", "v1", "apiservices", namespaced=False)
VALIDATING_WEBHOOKS = Resource("admissionregistration.k8s.io", "v1",
                               "validatingwebhookconfigurations", namespaced=False)
MUTATING_WEBHOOKS = Resource("admissionregistration.k8s.io", "v1",
                             "mutatingwebhookconfigurations", namespaced=False)

# -- volume snapshots (snapshot.storage.k8s.io) -------------------------------------------
SNAPSHOT_GROUP = "snapshot.storage.k8s.io"
SNAPSHOTS = Resource(SNAPSHOT_GROUP, "v1", "volumesnapshots")
SNAPSHOT_CONTENTS = Resource(SNAPSHOT_GROUP, "v1", "volumesnapshotcontents", namespaced=False)
SNAPSHOT_CLASSES = Resource(SNAPSHOT_GROUP, "v1", "volumesnapshotclasses", namespaced=False)

# -- CDI (cdi.kubevirt.io) ------------------------------------------------------------------
DATAVOLUMES = Resource(cdi.GROUP, cdi.VERSION, cdi.DV_PLURAL)
IMPORT_SOURCES = Resource(cdi.GROUP, cdi.VERSION, "volumeimportsources")
UPLOAD_SOURCES = Resource(cdi.GROUP, cdi.VERSION, "volumeuploadsources")
CLONE_SOURCES = Resource(cdi.GROUP, cdi.VERSION, "volumeclonesources")
DATASOURCES = Resource(cdi.GROUP, cdi.VERSION, "datasources")
DATAIMPORTCRONS = Resource(cdi.GROUP, cdi.VERSION, cdi.DATAIMPORTCRON_PLURAL)
CDICONFIGS = Resource(cdi.GROUP, cdi.VERSION, "cdiconfigs", namespaced=False)
STORAGEPROFILES = Resource(cdi.GROUP, cdi.VERSION, "storageprofiles", namespaced=False)
CDIS = Resource(cdi.GROUP, cdi.VERSION, "cdis", namespaced=False)

# -- KubeVirt (kubevirt.io) -------------------------------------------------------------------
VMS = Resource(kubevirt.GROUP, kubevirt.VERSION, kubevirt.VM_PLURAL)
VMIS = Resource(kubevirt.GROUP, kubevirt.VERSION, kubevirt.VMI_PLURAL)
KUBEVIRTS = Resource(kubevirt.GROUP, kubevirt.VERSION, kubevirt.KUBEVIRT_PLURAL)
