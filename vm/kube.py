"""A small JSON client for the Kubernetes API, shared by the VM-side adapters.

It rides on the ``kubernetes`` package's ApiClient (configuration, TLS, tokens) but
speaks plain JSON on API paths, because the VM side works with custom resources and
whole objects, not generated models. Only adapter modules (``*/kube.py``) use it.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from kubernetes import client, config
from kubernetes.client.rest import ApiException

logger = logging.getLogger(__name__)

Obj = dict[str, Any]
TIMEOUT = 30


class KubeError(Exception):
    def __init__(self, status: int, reason: str, body: Any = None) -> None:
        super().__init__(f"{status} {reason}")
        self.status = status
        self.reason = reason
        self.body = body

    @property
    def message(self) -> str:
        if isinstance(self.body, Mapping):
            return str(self.body.get("message") or self.reason)
        return self.reason


@dataclass(frozen=True)
class Res:
    group: str
    version: str
    plural: str
    namespaced: bool = True

    def path(self, namespace: str | None = None, name: str | None = None,
             sub: str | None = None) -> str:
        base = f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"
        if self.namespaced and namespace:
            base += f"/namespaces/{quote(namespace, safe='')}"
        base += f"/{self.plural}"
        if name:
            base += f"/{quote(name, safe='')}"
        if sub:
            base += f"/{sub}"
        return base


VMS = Res("kubevirt.io", "v1", "virtualmachines")
VMIS = Res("kubevirt.io", "v1", "virtualmachineinstances")
KUBEVIRTS = Res("kubevirt.io", "v1", "kubevirts")
DVS = Res("cdi.kubevirt.io", "v1beta1", "datavolumes")
PODS = Res("", "v1", "pods")
PVCS = Res("", "v1", "persistentvolumeclaims")
NODES = Res("", "v1", "nodes", namespaced=False)
EVENTS = Res("", "v1", "events")


def load_config(kubeconfig: str | None = None) -> client.ApiClient:
    """In a pod: the service account; else ``kubeconfig`` or ``$KUBECONFIG``."""
    cfg = client.Configuration()
    if kubeconfig is None and os.environ.get("KUBERNETES_SERVICE_HOST") and not os.environ.get(
            "KUBECONFIG"):
        config.load_incluster_config(client_configuration=cfg)
    else:
        config.load_kube_config(config_file=kubeconfig, client_configuration=cfg)
    return client.ApiClient(configuration=cfg)


class Kube:
    def __init__(self, api: client.ApiClient) -> None:
        self.api = api

    def request(self, method: str, path: str, *, body: Any = None,
                query: Mapping[str, Any] | None = None,
                content_type: str = "application/json") -> Any:
        headers = {"Accept": "application/json"}
        if body is not None:
            headers["Content-Type"] = content_type
        try:
            resp = self.api.call_api(
                path, method, query_params=list((query or {}).items()), header_params=headers,
                body=body, auth_settings=["BearerToken"], _preload_content=False,
                _request_timeout=TIMEOUT)
        except ApiException as err:
            try:
                parsed = json.loads(err.body) if err.body else None
            except ValueError:
                parsed = None
            raise KubeError(int(err.status or 0), str(err.reason), parsed) from None
        raw = resp[0].data if isinstance(resp, tuple) else resp.data
        return json.loads(raw) if raw else None

    def get(self, res: Res, name: str, namespace: str | None = None) -> Obj | None:
        try:
            out: Obj = self.request("GET", res.path(namespace, name))
            return out
        except KubeError as err:
            if err.status == 404:
                return None
            raise

    def list(self, res: Res, namespace: str | None = None, **query: Any) -> list[Obj]:
        out = self.request("GET", res.path(namespace), query=query)
        return list(out.get("items") or [])

    def create(self, res: Res, obj: Obj, namespace: str | None = None) -> Obj:
        ns = namespace or (obj.get("metadata") or {}).get("namespace")
        out: Obj = self.request("POST", res.path(ns), body=obj)
        return out

    def replace_status(self, res: Res, obj: Obj) -> Obj:
        meta = obj["metadata"]
        out: Obj = self.request("PUT", res.path(meta.get("namespace"), meta["name"], "status"),
                                body=obj)
        return out

    def patch(self, res: Res, name: str, patch: Any, namespace: str | None = None, *,
              kind: str = "merge", sub: str | None = None) -> Obj:
        ctype = {"merge": "application/merge-patch+json",
                 "json": "application/json-patch+json"}[kind]
        out: Obj = self.request("PATCH", res.path(namespace, name, sub), body=patch,
                                content_type=ctype)
        return out

    def delete(self, res: Res, name: str, namespace: str | None = None, *,
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
              component: str, now: str) -> None:
        """Record an Event on ``obj``; failures are logged, never raised."""
        meta = obj.get("metadata") or {}
        ns = meta.get("namespace") or "default"
        event = {
            "apiVersion": "v1", "kind": "Event",
            "metadata": {"generateName": f"{meta.get('name', 'obj')}.", "namespace": ns},
            "involvedObject": {"apiVersion": obj.get("apiVersion"), "kind": obj.get("kind"),
                               "name": meta.get("name"), "namespace": ns,
                               "uid": meta.get("uid")},
            "type": type_, "reason": reason, "message": message[:1024],
            "source": {"component": component}, "firstTimestamp": now, "lastTimestamp": now,
            "count": 1, "reportingComponent": component,
        }
        try:
            self.create(EVENTS, event, ns)
        except KubeError as err:
            logger.warning("event %s on %s/%s not recorded: %s", reason, ns, meta.get("name"),
                           err)
