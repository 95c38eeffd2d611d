"""The node side's verbs on the project's JSON client (:mod:`kubeclient`).

The kubelet, storage, workload and Service controllers handle many kinds (core, storage,
apps, coordination) as plain JSON objects; here ``get`` raises on not found (use
``get_or_none``), ``list`` returns the whole List (its resourceVersion starts a watch),
and ``delete`` is idempotent.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

from kubeclient import (
    JSON_PATCH,
    MERGE,
    STRATEGIC,
    Client,
    KubeError,
    Obj,
    Resource,
    load_configuration,
)
from kubeclient.resources import (
    CONFIGMAPS as CONFIGMAPS,
)
from kubeclient.resources import (
    CSIDRIVERS as CSIDRIVERS,
)
from kubeclient.resources import (
    DAEMONSETS as DAEMONSETS,
)
from kubeclient.resources import (
    DEPLOYMENTS as DEPLOYMENTS,
)
from kubeclient.resources import (
    ENDPOINTS as ENDPOINTS,
)
from kubeclient.resources import (
    EVENTS as EVENTS,
)
from kubeclient.resources import (
    LEASES as LEASES,
)
from kubeclient.resources import (
    NAMESPACES as NAMESPACES,
)
from kubeclient.resources import (
    NODES as NODES,
)
from kubeclient.resources import (
    PODS as PODS,
)
from kubeclient.resources import (
    PVCS as PVCS,
)
from kubeclient.resources import (
    PVS as PVS,
)
from kubeclient.resources import (
    REPLICASETS as REPLICASETS,
)
from kubeclient.resources import (
    SECRETS as SECRETS,
)
from kubeclient.resources import (
    SERVICES as SERVICES,
)
from kubeclient.resources import (
    STORAGECLASSES as STORAGECLASSES,
)

logger = logging.getLogger(__name__)

__all__ = ["JSON_PATCH", "MERGE", "STRATEGIC", "Kube", "KubeError", "Obj", "Resource",
           "create_or_update", "is_conflict", "is_not_found", "is_stale"]


def is_not_found(err: Exception) -> bool:
    return isinstance(err, KubeError) and err.status == 404


def is_conflict(err: Exception) -> bool:
    return isinstance(err, KubeError) and err.status == 409


def is_stale(err: Exception) -> bool:
    """A write a level-triggered controller lost to a newer state of the object: a 409
    (someone wrote it since this pass read it, or it already exists) or a 404 (it was
    deleted since). The watch brings that newer state and the next pass acts on it, so
    this is not worth a warning."""
    return is_conflict(err) or is_not_found(err)




class Kube(Client):
    """Blocking calls; safe to share between threads (one urllib3 pool)."""

    def __init__(self, kubeconfig: str) -> None:
        super().__init__(load_configuration(kubeconfig, pool_size=64))

    # -- verbs -------------------------------------------------------------------------

    def get(self, res: Resource, name: str, namespace: str | None = None) -> Obj:
        result: Obj = self.request("GET", res.path(namespace, name))
        return result

    def list(self, res: Resource, namespace: str | None = None, **query: Any) -> Obj:  # type: ignore[override]  # dialect, goes
        result: Obj = self.request("GET", res.path(namespace), query=query)
        return result

    def create(self, res: Resource, obj: Obj, namespace: str | None = None) -> Obj:  # type: ignore[override]  # dialect, goes
        ns = namespace or (obj.get("metadata") or {}).get("namespace")
        result: Obj = self.request("POST", res.path(ns), body=obj)
        return result

    def replace(self, res: Resource, obj: Obj, namespace: str | None = None,  # type: ignore[override]  # dialect, goes
                subresource: str | None = None) -> Obj:
        meta = obj.get("metadata") or {}
        ns = namespace or meta.get("namespace")
        result: Obj = self.request("PUT", res.path(ns, meta["name"], subresource), body=obj)
        return result

    def patch(self, res: Resource, name: str, patch: Any, namespace: str | None = None, *,
              subresource: str | None = None, content_type: str = MERGE) -> Obj:
        result: Obj = self.request("PATCH", res.path(namespace, name, subresource), body=patch,
                                   content_type=content_type)
        return result

    def delete(self, res: Resource, name: str, namespace: str | None = None, *,  # type: ignore[override]  # dialect, goes
               grace_period: int | None = None, uid: str | None = None) -> Obj | None:
        body: Obj = {"kind": "DeleteOptions", "apiVersion": "v1"}
        if grace_period is not None:
            body["gracePeriodSeconds"] = grace_period
        if uid:
            body["preconditions"] = {"uid": uid}
        try:
            result: Obj = self.request("DELETE", res.path(namespace, name), body=body)
            return result
        except KubeError as err:
            if err.status == 404:
                return None
            raise

    def watch(self, res: Resource, *, resource_version: str, timeout: int = 300,  # type: ignore[override]  # dialect, goes
              namespace: str | None = None) -> Iterator[Obj]:
        """Watch events (``{"type", "object"}``) until the server ends the watch."""
        return Client.watch(self, res, resource_version=resource_version, timeout=timeout,
                                 namespace=namespace)


def create_or_update(kube: Kube, res: Resource, obj: Obj) -> Obj:
    """Create ``obj``, or replace the existing object of that name with it."""
    meta = obj.get("metadata") or {}
    try:
        return kube.create(res, obj)
    except KubeError as err:
        if err.status != 409:
            raise
    current = kube.get(res, meta["name"], meta.get("namespace"))
    merged = dict(obj)
    merged["metadata"] = {**meta, "resourceVersion": current["metadata"]["resourceVersion"]}
    return kube.replace(res, merged)
