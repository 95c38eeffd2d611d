"""A dict-in, dict-out Kubernetes client on top of the official ``kubernetes`` package.

The node and the controllers handle many kinds (core, storage, apps, coordination, any
CRD) and want plain JSON objects, not generated model classes: this wraps
``ApiClient.call_api`` with raw JSON bodies and a line-by-line watch, and keeps the
official client's configuration, TLS and authentication handling.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from kubernetes import client as k8s
from kubernetes import config as k8s_config
from kubernetes.client.exceptions import ApiException
from kubernetes.watch.watch import iter_resp_lines

logger = logging.getLogger(__name__)

Obj = dict[str, Any]

MERGE = "application/merge-patch+json"
STRATEGIC = "application/strategic-merge-patch+json"
JSON_PATCH = "application/json-patch+json"


class KubeError(Exception):
    """An API call failed; ``status`` is the HTTP code, ``body`` the Status object."""

    def __init__(self, status: int, reason: str, body: Any) -> None:
        self.status = status
        self.body = body
        message = body.get("message") if isinstance(body, dict) else str(body)
        super().__init__(f"{status} {reason}: {message}")


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


@dataclass(frozen=True)
class Resource:
    group: str
    version: str
    plural: str
    namespaced: bool = True

    def path(self, namespace: str | None = None, name: str | None = None,
             subresource: str | None = None) -> str:
        base = f"/api/{self.version}" if not self.group else f"/apis/{self.group}/{self.version}"
        if self.namespaced and namespace:
            base += f"/namespaces/{namespace}"
        base += f"/{self.plural}"
        if name:
            base += f"/{name}"
        if subresource:
            base += f"/{subresource}"
        return base


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
STORAGECLASSES = Resource("storage.k8s.io", "v1", "storageclasses", namespaced=False)
CSIDRIVERS = Resource("storage.k8s.io", "v1", "csidrivers", namespaced=False)
LEASES = Resource("coordination.k8s.io", "v1", "leases")
DEPLOYMENTS = Resource("apps", "v1", "deployments")
DAEMONSETS = Resource("apps", "v1", "daemonsets")
REPLICASETS = Resource("apps", "v1", "replicasets")


class Kube:
    """Blocking calls; safe to share between threads (one urllib3 pool)."""

    def __init__(self, kubeconfig: str) -> None:
        cfg = k8s.Configuration()
        k8s_config.load_kube_config(config_file=kubeconfig, client_configuration=cfg)
        cfg.connection_pool_maxsize = 64
        self.configuration = cfg
        self.api = k8s.ApiClient(cfg)

    def close(self) -> None:
        self.api.close()

    def request(self, method: str, path: str, *, body: Any = None,
                query: Mapping[str, Any] | None = None, content_type: str | None = None,
                timeout: float | tuple[float, float] | None = 30) -> Any:
        headers = {"Accept": "application/json"}
        if body is not None:
            headers["Content-Type"] = content_type or "application/json"
        try:
            resp = self.api.call_api(
                path, method, query_params=list((query or {}).items()),
                header_params=headers, body=body, auth_settings=["BearerToken"],
                _preload_content=False, _request_timeout=timeout,
            )
        except ApiException as err:
            try:
                detail = json.loads(err.body) if err.body else {}
            except ValueError:
                detail = {"message": err.body}
            raise KubeError(err.status or 0, err.reason or "", detail) from None
        raw = resp[0].data if isinstance(resp, tuple) else resp.data
        return json.loads(raw) if raw else None

    # -- verbs -------------------------------------------------------------------------

    def get(self, res: Resource, name: str, namespace: str | None = None) -> Obj:
        result: Obj = self.request("GET", res.path(namespace, name))
        return result

    def get_or_none(self, res: Resource, name: str, namespace: str | None = None) -> Obj | None:
        try:
            return self.get(res, name, namespace)
        except KubeError as err:
            if err.status == 404:
                return None
            raise

    def list(self, res: Resource, namespace: str | None = None, **query: Any) -> Obj:
        result: Obj = self.request("GET", res.path(namespace), query=query)
        return result

    def create(self, res: Resource, obj: Obj, namespace: str | None = None) -> Obj:
        ns = namespace or (obj.get("metadata") or {}).get("namespace")
        result: Obj = self.request("POST", res.path(ns), body=obj)
        return result

    def replace(self, res: Resource, obj: Obj, namespace: str | None = None,
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

    def delete(self, res: Resource, name: str, namespace: str | None = None, *,
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

    def watch(self, res: Resource, *, resource_version: str, timeout: int = 300,
              namespace: str | None = None) -> Iterator[Obj]:
        """Watch events (``{"type", "object"}``) until the server ends the watch."""
        query = {"watch": "true", "resourceVersion": resource_version,
                 "allowWatchBookmarks": "true", "timeoutSeconds": str(timeout)}
        try:
            resp = self.api.call_api(
                res.path(namespace), "GET", query_params=list(query.items()),
                header_params={"Accept": "application/json"}, auth_settings=["BearerToken"],
                _preload_content=False, _request_timeout=(10, timeout + 30),
            )
        except ApiException as err:
            raise KubeError(err.status or 0, err.reason or "", {"message": err.body}) from None
        response = resp[0] if isinstance(resp, tuple) else resp
        try:
            for line in iter_resp_lines(response):
                if line:
                    yield json.loads(line)
        finally:
            response.release_conn()


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
