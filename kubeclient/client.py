"""The shared client: paths, errors, configuration, the JSON request, watch, Events."""

from __future__ import annotations

import datetime
import json
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from kubernetes import client as k8s
from kubernetes import config as k8s_config
from kubernetes.client.exceptions import ApiException
from kubernetes.watch.watch import iter_resp_lines

Obj = dict[str, Any]

MERGE = "application/merge-patch+json"
STRATEGIC = "application/strategic-merge-patch+json"
JSON_PATCH = "application/json-patch+json"
TIMEOUT = 30.0
EVENT_MESSAGE_MAX = 1024


class KubeError(Exception):
    """An API call failed: ``status`` is the HTTP code (0 when no answer came), ``reason``
    its phrase, ``body`` the Status object when the server sent one."""

    def __init__(self, status: int, reason: str, body: Any = None) -> None:
        self.status = status
        self.reason = reason
        self.body = body
        super().__init__(f"{status} {reason}: {self.message}" if body else
                         f"{status} {reason}")

    @property
    def message(self) -> str:
        """The Status message the API server gave, else the reason."""
        if isinstance(self.body, Mapping):
            return str(self.body.get("message") or self.reason)
        return self.reason


def _segment(value: str) -> str:
    # ':' stays (RBAC names such as system:node); '/', '?', '#' and '%' cannot pass.
    return quote(value, safe=":")


@dataclass(frozen=True)
class Resource:
    group: str
    version: str
    plural: str
    namespaced: bool = True

    def path(self, namespace: str | None = None, name: str | None = None,
             subresource: str | None = None) -> str:
        out = f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"
        if self.namespaced and namespace:
            out += f"/namespaces/{_segment(namespace)}"
        out += f"/{self.plural}"
        if name:
            out += f"/{_segment(name)}"
        if subresource:
            out += f"/{subresource}"
        return out


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
    return KubeError(int(err.status or 0), str(err.reason or ""), body)


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

    def close(self) -> None:
        self.api.close()

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

    def get_or_none(self, res: Resource, name: str, namespace: str | None = None) -> Obj | None:
        try:
            out: Obj = self.request("GET", res.path(namespace, name))
            return out
        except KubeError as err:
            if err.status == 404:
                return None
            raise

    def watch_events(self, res: Resource, *, resource_version: str, timeout: int = 300,
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
