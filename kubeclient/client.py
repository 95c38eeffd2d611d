"""The client: configuration, the JSON request and the verbs every program uses."""

from __future__ import annotations

import datetime
import functools
import json
import logging
import os
from collections.abc import Iterator, Mapping
from typing import Any

from kubernetes import client as k8s
from kubernetes import config as k8s_config
from kubernetes.client.exceptions import ApiException
from kubernetes.watch.watch import iter_resp_lines

from kubeclient.errors import KubeError, api_error, is_not_found
from kubeclient.resources import EVENTS, SUBJECT_ACCESS_REVIEWS, Resource

logger = logging.getLogger(__name__)

Obj = dict[str, Any]

MERGE = "application/merge-patch+json"
STRATEGIC = "application/strategic-merge-patch+json"
JSON_PATCH = "application/json-patch+json"
TIMEOUT = 30.0
EVENT_MESSAGE_MAX = 1024
METADATA_ONLY = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1"
"""Accept header for an object's metadata without its body (a Secret without its data)."""


def load_configuration(kubeconfig: str | None = None, *,
                       pool_size: int = 32) -> k8s.Configuration:
    """In a pod (and with neither a kubeconfig given nor ``$KUBECONFIG``): the service
    account; else the kubeconfig as kubectl finds it (the argument, ``$KUBECONFIG``,
    ``~/.kube/config``)."""
    cfg = k8s.Configuration()
    in_pod = bool(os.environ.get("KUBERNETES_SERVICE_HOST"))
    if kubeconfig is None and in_pod and not os.environ.get("KUBECONFIG"):
        k8s_config.load_incluster_config(client_configuration=cfg)
    else:
        # $KUBECONFIG read now: the library's default is read when it is imported, before
        # ``python -m rootdisk.operator --kubeconfig`` sets it
        k8s_config.load_kube_config(config_file=kubeconfig or os.environ.get("KUBECONFIG"),
                                    client_configuration=cfg)
    cfg.connection_pool_maxsize = pool_size
    return cfg


def connection_params(cfg: k8s.Configuration) -> dict[str, Any]:
    """What kopf needs to log in with the same identity as a :class:`Client` on ``cfg``
    (kopf's own login reads the environment once, when the library is imported)."""
    header = cfg.get_api_key_with_prefix("BearerToken") or \
        cfg.get_api_key_with_prefix("authorization")
    scheme, _, token = (header or "").partition(" ")
    if not token:
        scheme, token = "", scheme
    return {"server": cfg.host, "ca_path": cfg.ssl_ca_cert, "insecure": not cfg.verify_ssl,
            "scheme": scheme or None, "token": token or None,
            "certificate_path": cfg.cert_file, "private_key_path": cfg.key_file}


def _error(err: ApiException) -> KubeError:
    try:
        body = json.loads(err.body) if err.body else None
    except (TypeError, ValueError):
        body = {"message": str(err.body)[:200]}
    return api_error(int(err.status or 0), str(err.reason or ""), body)


def event_body(obj: Mapping[str, Any], *, type_: str, reason: str, message: str,
               component: str, now: str | None = None) -> Obj:
    """A core/v1 Event about ``obj`` (named after it, in its namespace), stamped ``now``
    (RFC 3339, UTC) or at this second."""
    meta = obj.get("metadata") or {}
    ns = meta.get("namespace") or "default"
    stamp = now or datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return {
        "apiVersion": "v1", "kind": "Event",
        "metadata": {"generateName": f"{meta.get('name') or 'object'}.", "namespace": ns},
        "involvedObject": {"apiVersion": obj.get("apiVersion"), "kind": obj.get("kind"),
                           "name": meta.get("name"), "namespace": ns, "uid": meta.get("uid"),
                           "resourceVersion": meta.get("resourceVersion")},
        "type": type_, "reason": reason, "message": message[:EVENT_MESSAGE_MAX],
        "firstTimestamp": stamp, "lastTimestamp": stamp, "count": 1,
        "source": {"component": component}, "reportingComponent": component,
    }


class Client:
    """Blocking calls, safe to share between threads (one connection pool)."""

    def __init__(self, configuration: k8s.Configuration) -> None:
        self.configuration = configuration
        self.api = k8s.ApiClient(configuration)

    @classmethod
    def connect(cls, kubeconfig: str | None = None, *, pool_size: int = 32) -> Client:
        """A client on :func:`load_configuration`'s configuration."""
        return cls(load_configuration(kubeconfig, pool_size=pool_size))

    def close(self) -> None:
        """Its thread pool and its pooled connections: ``ApiClient.close`` stops only the
        former, and a pooled socket left to the garbage collector is an unraisable
        ResourceWarning in whatever runs then (a connection its server closed first)."""
        self.api.close()
        self.api.rest_client.pool_manager.clear()

    def request(self, method: str, path: str, *, body: Any = None,
                query: Mapping[str, Any] | None = None, content_type: str | None = None,
                timeout: float | tuple[float, float] | None = TIMEOUT,
                accept: str = "application/json") -> Any:
        """One call; the decoded JSON answer (None when empty), or :class:`KubeError`.
        ``accept`` asks for another representation (``as=PartialObjectMetadata``...)."""
        headers = {"Accept": accept}
        if body is not None:
            headers["Content-Type"] = content_type or "application/json"
        try:
            resp = self.api.call_api(
                path, method, query_params=list((query or {}).items()), header_params=headers,
                body=body, auth_settings=["BearerToken"], _preload_content=False,
                _request_timeout=timeout)
        except ApiException as err:
            raise _error(err) from None
        raw = (resp[0] if isinstance(resp, tuple) else resp).data
        return json.loads(raw) if raw else None

    # -- reads ---------------------------------------------------------------------------

    def get(self, res: Resource, name: str, namespace: str | None = None) -> Obj:
        """The object; :class:`~kubeclient.errors.NotFound` when there is none."""
        out: Obj = self.request("GET", res.path(namespace, name))
        return out

    def get_or_none(self, res: Resource, name: str, namespace: str | None = None) -> Obj | None:
        """The object, or None when there is none."""
        try:
            out: Obj = self.request("GET", res.path(namespace, name))
            return out
        except KubeError as err:
            if is_not_found(err):
                return None
            raise

    def metadata(self, res: Resource, name: str, namespace: str | None = None) -> Obj | None:
        """The object's ``metadata`` only (None: not found), asked for as
        PartialObjectMetadata: a Secret's data never reaches the caller (a server that does
        not serve PartialObjectMetadata sends the whole object; only metadata is kept)."""
        try:
            out = self.request("GET", res.path(namespace, name),
                               accept=f"{METADATA_ONLY},application/json")
        except KubeError as err:
            if is_not_found(err):
                return None
            raise
        return dict((out or {}).get("metadata") or {})

    def list(self, res: Resource, namespace: str | None = None, **query: Any) -> list[Obj]:
        """The items (every namespace when ``namespace`` is None); ``query`` as
        ``labelSelector=...``, ``fieldSelector=...``."""
        return list(self.list_object(res, namespace, **query).get("items") or [])

    def list_object(self, res: Resource, namespace: str | None = None, **query: Any) -> Obj:
        """The whole List (its ``metadata.resourceVersion`` starts a watch)."""
        out: Obj = self.request("GET", res.path(namespace), query=query)
        return out

    # -- writes --------------------------------------------------------------------------

    def create(self, res: Resource, obj: Mapping[str, Any],
               namespace: str | None = None) -> Obj:
        """Create ``obj`` (in ``namespace`` or its own);
        :class:`~kubeclient.errors.AlreadyExists` when the name is taken."""
        ns = namespace or (obj.get("metadata") or {}).get("namespace")
        out: Obj = self.request("POST", res.path(ns), body=obj)
        return out

    def create_if_absent(self, res: Resource, obj: Mapping[str, Any],
                         namespace: str | None = None) -> Obj | None:
        """Create ``obj``; None when an object of that name exists already (409)."""
        try:
            return self.create(res, obj, namespace)
        except KubeError as err:
            if err.status == 409:
                return None
            raise

    def replace(self, res: Resource, obj: Mapping[str, Any], namespace: str | None = None,
                subresource: str | None = None) -> Obj:
        """An Update (PUT) of ``obj``, at its resourceVersion when it carries one
        (:class:`~kubeclient.errors.Conflict` when the object changed meanwhile)."""
        meta = obj.get("metadata") or {}
        ns = namespace or meta.get("namespace")
        out: Obj = self.request("PUT", res.path(ns, meta["name"], subresource), body=obj)
        return out

    def replace_status(self, res: Resource, obj: Mapping[str, Any]) -> Obj:
        """An Update of the status subresource."""
        return self.replace(res, obj, subresource="status")

    def patch(self, res: Resource, name: str, patch: Any, namespace: str | None = None, *,
              subresource: str | None = None, content_type: str = MERGE) -> Obj:
        """A PATCH, a JSON merge patch unless ``content_type`` says otherwise."""
        out: Obj = self.request("PATCH", res.path(namespace, name, subresource), body=patch,
                                content_type=content_type)
        return out

    def patch_status(self, res: Resource, name: str, patch: Any,
                     namespace: str | None = None) -> Obj:
        """A merge patch of the status subresource."""
        return self.patch(res, name, patch, namespace, subresource="status")

    def delete(self, res: Resource, name: str, namespace: str | None = None, *,
               grace_period: int | None = None, uid: str | None = None) -> bool:
        """Delete in the background (dependents are collected after); with ``uid``, only
        that object, never a namesake made since. True when deleted; False when it was
        gone already (404) or the UID precondition failed (409)."""
        body: Obj = {"kind": "DeleteOptions", "apiVersion": "v1",
                     "propagationPolicy": "Background"}
        if grace_period is not None:
            body["gracePeriodSeconds"] = grace_period
        if uid:
            body["preconditions"] = {"uid": uid}
        try:
            self.request("DELETE", res.path(namespace, name), body=body)
            return True
        except KubeError as err:
            if err.status in (404, 409):
                return False
            raise

    def create_or_replace(self, res: Resource, obj: Obj) -> Obj:
        """Create ``obj``, or replace the existing object of that name with it."""
        meta = obj.get("metadata") or {}
        try:
            return self.create(res, obj)
        except KubeError as err:
            if err.status != 409:
                raise
        current = self.get(res, meta["name"], meta.get("namespace"))
        merged = dict(obj)
        merged["metadata"] = {**meta, "resourceVersion": current["metadata"]["resourceVersion"]}
        return self.replace(res, merged)

    def event(self, obj: Mapping[str, Any], *, type_: str, reason: str, message: str,
              component: str, now: str | None = None) -> None:
        """Record an Event about ``obj`` (best effort: a lost Event is only logged)."""
        body = event_body(obj, type_=type_, reason=reason, message=message,
                          component=component, now=now)
        ns = body["metadata"]["namespace"]
        try:
            self.create(EVENTS, body, ns)
        except KubeError as err:
            logger.warning("event %s on %s/%s not recorded: %s", reason, ns,
                           body["involvedObject"]["name"], err)

    def allowed(self, review: Obj) -> bool:
        """Ask the API server a SubjectAccessReview; True when it allows."""
        out = self.request("POST", SUBJECT_ACCESS_REVIEWS.path(), body=review)
        return bool(((out or {}).get("status") or {}).get("allowed"))

    # -- watch ---------------------------------------------------------------------------

    def watch(self, res: Resource, *, resource_version: str, timeout: int = 300,
              namespace: str | None = None,
              field_selector: str | None = None) -> Iterator[Obj]:
        """Watch events (``{"type", "object"}``) until the server ends the watch."""
        query = {"watch": "true", "resourceVersion": resource_version,
                 "allowWatchBookmarks": "true", "timeoutSeconds": str(timeout)}
        if field_selector:
            query["fieldSelector"] = field_selector
        try:
            resp = self.api.call_api(
                res.path(namespace), "GET", query_params=list(query.items()),
                header_params={"Accept": "application/json"}, auth_settings=["BearerToken"],
                _preload_content=False, _request_timeout=(10, timeout + 30))
        except ApiException as err:
            raise _error(err) from None
        response = resp[0] if isinstance(resp, tuple) else resp
        try:
            for line in iter_resp_lines(response):
                if line:
                    yield json.loads(line)
        finally:
            response.release_conn()


@functools.cache
def shared() -> Client:
    """The process's one client, made on first use (in a pod: the service account)."""
    return Client.connect()
