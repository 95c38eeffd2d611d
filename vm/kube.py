"""A small JSON client for the Kubernetes API, shared by the VM-side adapters.

It rides on the ``kubernetes`` package's ApiClient (configuration, TLS, tokens) but
speaks plain JSON on API paths, because the VM side works with custom resources and
whole objects, not generated models. Only adapter modules (``*/kube.py``) use it.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Mapping
from typing import Any

from kubeclient import JSON_PATCH, MERGE, Client, KubeError, Obj, event_body
from kubeclient import Resource as Res
from kubeclient import load_configuration as load_config
from kubeclient.resources import DATASOURCES, EVENTS, KUBEVIRTS, NODES, PODS, PVCS, VMIS, VMS
from kubeclient.resources import DATAVOLUMES as DVS
from kubeclient.resources import SUBJECT_ACCESS_REVIEWS as SARS

logger = logging.getLogger(__name__)

__all__ = ["DATASOURCES", "DVS", "EVENTS", "KUBEVIRTS", "NODES", "PODS", "PVCS", "SARS", "VMIS",
           "VMS", "Kube", "KubeError", "Obj", "Res", "load_config", "shared"]



@functools.cache
def shared() -> Kube:
    """The process's one client, made on first use (the kopf wiring's: in a pod, the
    service account)."""
    return Kube(load_config())


class Kube(Client):
    """The VM side's verbs: ``get`` gives None on not found, ``delete`` False when the
    object is gone or its UID precondition failed."""

    get = Client.get_or_none  # type: ignore[assignment]  # dialect, goes

    def list(self, res: Res, namespace: str | None = None, **query: Any) -> list[Obj]:
        out = self.request("GET", res.path(namespace), query=query)
        return list(out.get("items") or [])

    def create(self, res: Res, obj: Obj, namespace: str | None = None) -> Obj:  # type: ignore[override]  # dialect, goes
        ns = namespace or (obj.get("metadata") or {}).get("namespace")
        out: Obj = self.request("POST", res.path(ns), body=obj)
        return out

    def replace_status(self, res: Res, obj: Obj) -> Obj:  # type: ignore[override]  # dialect, goes
        meta = obj["metadata"]
        out: Obj = self.request("PUT", res.path(meta.get("namespace"), meta["name"], "status"),
                                body=obj)
        return out

    def patch(self, res: Res, name: str, patch: Any, namespace: str | None = None, *,  # type: ignore[override]  # dialect, goes
              kind: str = "merge", sub: str | None = None) -> Obj:
        ctype = {"merge": MERGE, "json": JSON_PATCH}[kind]
        out: Obj = self.request("PATCH", res.path(namespace, name, sub), body=patch,
                                content_type=ctype)
        return out

    def delete(self, res: Res, name: str, namespace: str | None = None, *,  # type: ignore[override]  # dialect, goes
               grace: int | None = None, uid: str | None = None) -> bool:
        body: Obj = {"kind": "DeleteOptions", "apiVersion": "v1",
                     "propagationPolicy": "Background"}
        if grace is not None:
            body["gracePeriodSeconds"] = grace
        if uid:
            body["preconditions"] = {"uid": uid}
        try:
            self.request("DELETE", res.path(namespace, name), body=body)
            return True
        except KubeError as err:
            if err.status in (404, 409):
                return False
            raise

    def event(self, obj: Mapping[str, Any], *, type_: str, reason: str, message: str,
              component: str, now: str | None = None) -> None:
        """Record an Event on ``obj``; failures are logged, never raised."""
        event = event_body(obj, type_=type_, reason=reason, message=message,
                           component=component, now=now)
        ns = event["metadata"]["namespace"]
        try:
            self.create(EVENTS, event, ns)
        except KubeError as err:
            logger.warning("event %s on %s/%s not recorded: %s", reason, ns,
                           event["involvedObject"]["name"], err)
