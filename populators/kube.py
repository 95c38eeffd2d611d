"""The populators' only door to the Kubernetes API (and the only module importing
``kubernetes``): plain JSON objects in and out, the few verbs the flow needs, with the
idempotence it relies on (create: "already exists" is fine; delete: "not found" is fine,
with a UID precondition so a namesake made later is never removed).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from typing import Any

from kubernetes import client as k8s
from kubernetes import config as k8s_config
from kubernetes.client.exceptions import ApiException

logger = logging.getLogger(__name__)

Obj = dict[str, Any]
MERGE = "application/merge-patch+json"
TIMEOUT = 30


class KubeError(Exception):
    def __init__(self, status: int, reason: str, body: Any) -> None:
        self.status = status
        self.body = body
        message = body.get("message") if isinstance(body, dict) else str(body)
        super().__init__(f"{status} {reason}: {message}")


def _path(group: str, version: str, plural: str, namespace: str | None = None,
          name: str | None = None) -> str:
    base = f"/api/{version}" if not group else f"/apis/{group}/{version}"
    if namespace:
        base += f"/namespaces/{namespace}"
    base += f"/{plural}"
    return f"{base}/{name}" if name else base


def load_configuration(kubeconfig: str | None = None) -> k8s.Configuration:
    """In a pod: the service account; else the kubeconfig (KUBECONFIG or ~/.kube/config)."""
    cfg = k8s.Configuration()
    if kubeconfig is None:
        try:
            k8s_config.load_incluster_config(client_configuration=cfg)
            return cfg
        except k8s_config.ConfigException:
            pass
    k8s_config.load_kube_config(config_file=kubeconfig, client_configuration=cfg)
    return cfg


def connection_params(kubeconfig: str | None = None) -> dict[str, Any]:
    """What kopf needs to log in, from the same configuration :class:`Kube` uses (kopf's
    own client login reads KUBECONFIG once, when the client library is imported)."""
    cfg = load_configuration(kubeconfig)
    header = cfg.get_api_key_with_prefix("BearerToken") or \
        cfg.get_api_key_with_prefix("authorization")
    scheme, _, token = (header or "").partition(" ")
    if not token:
        scheme, token = "", scheme
    return {"server": cfg.host, "ca_path": cfg.ssl_ca_cert, "insecure": not cfg.verify_ssl,
            "scheme": scheme or None, "token": token or None,
            "certificate_path": cfg.cert_file, "private_key_path": cfg.key_file}


class Kube:
    """Blocking calls, safe to share between threads (one connection pool)."""

    def __init__(self, configuration: k8s.Configuration) -> None:
        configuration.connection_pool_maxsize = 32
        self.api = k8s.ApiClient(configuration)

    def close(self) -> None:
        self.api.close()

    def _call(self, method: str, path: str, *, body: Any = None,
              query: Mapping[str, str] | None = None, content_type: str | None = None) -> Any:
        headers = {"Accept": "application/json"}
        if body is not None:
            headers["Content-Type"] = content_type or "application/json"
        try:
            resp = self.api.call_api(
                path, method, query_params=list((query or {}).items()),
                header_params=headers, body=body, auth_settings=["BearerToken"],
                _preload_content=False, _request_timeout=TIMEOUT)
        except ApiException as err:
            try:
                detail = json.loads(err.body) if err.body else {}
            except ValueError:
                detail = {"message": str(err.body)[:200]}
            raise KubeError(err.status or 0, err.reason or "", detail) from None
        raw = resp[0].data if isinstance(resp, tuple) else resp.data
        return json.loads(raw) if raw else None

    def _get(self, path: str) -> Obj | None:
        try:
            result: Obj = self._call("GET", path)
            return result
        except KubeError as err:
            if err.status == 404:
                return None
            raise

    def _create(self, path: str, obj: Mapping[str, Any]) -> bool:
        """True if created, False if an object of that name exists already."""
        try:
            self._call("POST", path, body=obj)
            return True
        except KubeError as err:
            if err.status == 409:
                return False
            raise

    def _delete(self, path: str, uid: str | None) -> None:
        body: Obj = {"kind": "DeleteOptions", "apiVersion": "v1",
                     "propagationPolicy": "Background"}
        if uid:
            body["preconditions"] = {"uid": uid}
        try:
            self._call("DELETE", path, body=body)
        except KubeError as err:
            # 404: gone already; 409: the UID precondition failed (a namesake, not ours).
            if err.status not in (404, 409):
                raise

    # -- reads ---------------------------------------------------------------------------

    def claim(self, namespace: str, name: str) -> Obj | None:
        return self._get(_path("", "v1", "persistentvolumeclaims", namespace, name))

    def pod(self, namespace: str, name: str) -> Obj | None:
        return self._get(_path("", "v1", "pods", namespace, name))

    def volume(self, name: str) -> Obj | None:
        return self._get(_path("", "v1", "persistentvolumes", None, name))

    def storage_class(self, name: str) -> Obj | None:
        return self._get(_path("storage.k8s.io", "v1", "storageclasses", None, name))

    def custom(self, group: str, version: str, plural: str, namespace: str | None,
               name: str) -> Obj | None:
        try:
            return self._get(_path(group, version, plural, namespace, name))
        except KubeError as err:
            if err.status == 404:  # the CRD itself is not installed
                return None
            raise

    def pods(self, namespace: str) -> list[Obj]:
        result = self._call("GET", _path("", "v1", "pods", namespace))
        return list(result.get("items") or [])

    def events_about(self, namespace: str, uid: str) -> list[Obj]:
        result = self._call("GET", _path("", "v1", "events", namespace),
                            query={"fieldSelector": f"involvedObject.uid={uid}"})
        return [e for e in result.get("items") or []
                if (e.get("involvedObject") or {}).get("uid") == uid]

    # -- writes --------------------------------------------------------------------------

    def create_claim(self, obj: Mapping[str, Any]) -> bool:
        ns = obj["metadata"]["namespace"]
        return self._create(_path("", "v1", "persistentvolumeclaims", ns), obj)

    def create_pod(self, obj: Mapping[str, Any]) -> bool:
        return self._create(_path("", "v1", "pods", obj["metadata"]["namespace"]), obj)

    def secret(self, namespace: str, name: str) -> Obj | None:
        return self._get(_path("", "v1", "secrets", namespace, name))

    def create_secret(self, obj: Mapping[str, Any]) -> bool:
        return self._create(_path("", "v1", "secrets", obj["metadata"]["namespace"]), obj)

    def create_service(self, obj: Mapping[str, Any]) -> bool:
        return self._create(_path("", "v1", "services", obj["metadata"]["namespace"]), obj)

    def create_event(self, obj: Mapping[str, Any]) -> bool:
        return self._create(_path("", "v1", "events", obj["metadata"]["namespace"]), obj)

    def delete_pod(self, namespace: str, name: str, uid: str) -> None:
        self._delete(_path("", "v1", "pods", namespace, name), uid)

    def delete_claim(self, namespace: str, name: str, uid: str) -> None:
        self._delete(_path("", "v1", "persistentvolumeclaims", namespace, name), uid)

    def annotate_claim(self, namespace: str, name: str, changes: Mapping[str, str]) -> None:
        """Merge ``changes`` into the claim's annotations."""
        patch = {"metadata": {"annotations": dict(changes)}}
        self._call("PATCH", _path("", "v1", "persistentvolumeclaims", namespace, name),
                   body=patch, content_type=MERGE)

    def set_claim_ref(self, name: str, claim_ref: Mapping[str, Any],
                      resource_version: str) -> bool:
        """Point the PV at another claim (an Update with the PV's resourceVersion).
        False when the PV changed meanwhile (409): look again."""
        pv = self.volume(name)
        if pv is None:
            return False
        if resource_version and pv["metadata"].get("resourceVersion") != resource_version:
            return False
        pv["spec"]["claimRef"] = dict(claim_ref)
        try:
            self._call("PUT", _path("", "v1", "persistentvolumes", None, name), body=pv)
            return True
        except KubeError as err:
            if err.status == 409:
                return False
            raise
