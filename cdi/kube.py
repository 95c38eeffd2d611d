"""The CDI controllers' one door to the API server: plain JSON in, plain JSON out.

Built on the official ``kubernetes`` package (its configuration, TLS and token
handling), but calling the REST paths directly with dicts, because the controllers
handle CRDs and core kinds alike and want every field, not generated models.
"""

from __future__ import annotations

import contextlib
import datetime
import json
import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kubernetes import client as k8s
from kubernetes import config as k8s_config
from kubernetes.client.exceptions import ApiException

from cdi import api

logger = logging.getLogger(__name__)

Obj = dict[str, Any]
MERGE = "application/merge-patch+json"


class KubeError(Exception):
    """An API call failed; ``status`` is the HTTP status code."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"{status}: {message}")
        self.status = status
        self.message = message


@dataclass(frozen=True)
class Kind:
    group: str
    version: str
    plural: str
    namespaced: bool = True

    def path(self, namespace: str | None = None, name: str | None = None,
             subresource: str | None = None) -> str:
        out = f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"
        if self.namespaced and namespace:
            out += f"/namespaces/{namespace}"
        out += f"/{self.plural}"
        if name:
            out += f"/{name}"
        if subresource:
            out += f"/{subresource}"
        return out


DATAVOLUMES = Kind(api.GROUP, api.VERSION, "datavolumes")
IMPORT_SOURCES = Kind(api.GROUP, api.VERSION, "volumeimportsources")
UPLOAD_SOURCES = Kind(api.GROUP, api.VERSION, "volumeuploadsources")
CLONE_SOURCES = Kind(api.GROUP, api.VERSION, "volumeclonesources")
DATASOURCES = Kind(api.GROUP, api.VERSION, "datasources")
SUBJECT_ACCESS_REVIEWS = Kind("authorization.k8s.io", "v1", "subjectaccessreviews",
                              namespaced=False)
CDICONFIGS = Kind(api.GROUP, api.VERSION, "cdiconfigs", namespaced=False)
STORAGEPROFILES = Kind(api.GROUP, api.VERSION, "storageprofiles", namespaced=False)
PVCS = Kind("", "v1", "persistentvolumeclaims")
SECRETS = Kind("", "v1", "secrets")
CONFIGMAPS = Kind("", "v1", "configmaps")
EVENTS = Kind("", "v1", "events")
STORAGECLASSES = Kind("storage.k8s.io", "v1", "storageclasses", namespaced=False)
LEASES = Kind("coordination.k8s.io", "v1", "leases")


def load_configuration(kubeconfig: str | None = None) -> k8s.Configuration:
    """In a pod the service account; else the given kubeconfig (or kubectl's default)."""
    cfg = k8s.Configuration()
    if kubeconfig is None and os.environ.get("KUBERNETES_SERVICE_HOST"):
        k8s_config.load_incluster_config(client_configuration=cfg)
    else:
        k8s_config.load_kube_config(config_file=kubeconfig, client_configuration=cfg)
    cfg.connection_pool_maxsize = 32
    return cfg


class Client:
    """Blocking calls, safe to share between threads."""

    def __init__(self, configuration: k8s.Configuration) -> None:
        self.api = k8s.ApiClient(configuration)

    def close(self) -> None:
        self.api.close()

    def request(self, method: str, path: str, *, body: Any = None,
                query: Mapping[str, str] | None = None, content_type: str | None = None,
                timeout: float = 30) -> Any:
        headers = {"Accept": "application/json"}
        if body is not None:
            headers["Content-Type"] = content_type or "application/json"
        try:
            resp = self.api.call_api(
                path, method, query_params=list((query or {}).items()), header_params=headers,
                body=body, auth_settings=["BearerToken"], _preload_content=False,
                _request_timeout=timeout)
        except ApiException as err:
            message = err.reason or ""
            with contextlib.suppress(TypeError, ValueError, AttributeError):
                message = json.loads(err.body).get("message") or message
            raise KubeError(err.status or 0, message) from None
        raw = (resp[0] if isinstance(resp, tuple) else resp).data
        return json.loads(raw) if raw else None

    def get(self, kind: Kind, name: str, namespace: str | None = None) -> Obj | None:
        try:
            out: Obj = self.request("GET", kind.path(namespace, name))
            return out
        except KubeError as err:
            if err.status == 404:
                return None
            raise

    def list(self, kind: Kind, namespace: str | None = None) -> list[Obj]:
        out = self.request("GET", kind.path(namespace))
        return list(out.get("items") or [])

    def create(self, kind: Kind, obj: Obj) -> Obj | None:
        """Create ``obj``; None when an object of that name exists already."""
        ns = obj["metadata"].get("namespace")
        try:
            out: Obj = self.request("POST", kind.path(ns), body=obj)
            return out
        except KubeError as err:
            if err.status == 409:
                return None
            raise

    def patch(self, kind: Kind, name: str, patch: Any, namespace: str | None = None, *,
              subresource: str | None = None) -> Obj:
        out: Obj = self.request("PATCH", kind.path(namespace, name, subresource), body=patch,
                                content_type=MERGE)
        return out

    def delete(self, kind: Kind, name: str, namespace: str | None = None) -> None:
        try:
            self.request("DELETE", kind.path(namespace, name),
                         body={"apiVersion": "v1", "kind": "DeleteOptions",
                               "propagationPolicy": "Background"})
        except KubeError as err:
            if err.status != 404:
                raise

    def allowed(self, review: Obj) -> bool:
        """Ask the API server a SubjectAccessReview; True when it allows."""
        out = self.request("POST", SUBJECT_ACCESS_REVIEWS.path(), body=review)
        return bool(((out or {}).get("status") or {}).get("allowed"))

    def exists(self, kind: str, name: str, namespace: str) -> bool:
        target = {"Secret": SECRETS, "ConfigMap": CONFIGMAPS}[kind]
        return self.get(target, name, namespace) is not None

    def event(self, obj: Mapping[str, Any], *, type_: str, reason: str, message: str,
              component: str = "rootdisk-cdi") -> None:
        """Record an Event about ``obj`` (best effort: a lost Event is only logged)."""
        meta = obj["metadata"]
        now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        ns = meta.get("namespace") or "default"
        body = {
            "apiVersion": "v1", "kind": "Event",
            "metadata": {"generateName": f"{meta['name']}.", "namespace": ns},
            "involvedObject": {"apiVersion": obj.get("apiVersion"), "kind": obj.get("kind"),
                               "name": meta["name"], "namespace": ns, "uid": meta.get("uid"),
                               "resourceVersion": meta.get("resourceVersion")},
            "type": type_, "reason": reason, "message": message[:1024],
            "firstTimestamp": now, "lastTimestamp": now, "count": 1,
            "source": {"component": component}, "reportingComponent": component,
        }
        try:
            self.request("POST", EVENTS.path(ns), body=body)
        except KubeError as err:
            logger.warning("event %s on %s/%s not recorded: %s", reason, ns, meta["name"], err)
