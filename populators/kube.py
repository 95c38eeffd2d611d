"""The populators' only door to the Kubernetes API (and the only module importing
``kubernetes``): plain JSON objects in and out, the few verbs the flow needs, with the
idempotence it relies on (create: "already exists" is fine; delete: "not found" is fine,
with a UID precondition so a namesake made later is never removed).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import kubeclient
from kubeclient import MERGE, KubeError, Obj, Resource, load_configuration
from kubeclient.resources import EVENTS, PODS, PVCS, PVS, SECRETS, SERVICES, STORAGECLASSES

logger = logging.getLogger(__name__)

__all__ = ["Kube", "KubeError", "Obj", "connection_params", "load_configuration"]


def _path(group: str, version: str, plural: str, namespace: str | None = None,
          name: str | None = None) -> str:
    return Resource(group, version, plural, namespaced=bool(namespace)).path(namespace, name)


def connection_params(kubeconfig: str | None = None) -> dict[str, Any]:
    """What kopf needs to log in, from the same configuration :class:`Kube` uses."""
    return kubeclient.connection_params(load_configuration(kubeconfig))


class Kube(kubeclient.Client):
    """Blocking calls, safe to share between threads (one connection pool)."""

    def _get(self, path: str) -> Obj | None:
        try:
            result: Obj = self.request("GET", path)
            return result
        except KubeError as err:
            if err.status == 404:
                return None
            raise

    def _create(self, path: str, obj: Mapping[str, Any]) -> bool:
        """True if created, False if an object of that name exists already."""
        try:
            self.request("POST", path, body=obj)
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
            self.request("DELETE", path, body=body)
        except KubeError as err:
            # 404: gone already; 409: the UID precondition failed (a namesake, not ours).
            if err.status not in (404, 409):
                raise

    # -- reads ---------------------------------------------------------------------------

    def claim(self, namespace: str, name: str) -> Obj | None:
        return self._get(PVCS.path(namespace, name))

    def pod(self, namespace: str, name: str) -> Obj | None:
        return self._get(PODS.path(namespace, name))

    def volume(self, name: str) -> Obj | None:
        return self._get(PVS.path(None, name))

    def storage_class(self, name: str) -> Obj | None:
        return self._get(STORAGECLASSES.path(None, name))

    def custom(self, group: str, version: str, plural: str, namespace: str | None,
               name: str) -> Obj | None:
        try:
            return self._get(_path(group, version, plural, namespace, name))
        except KubeError as err:
            if err.status == 404:  # the CRD itself is not installed
                return None
            raise

    def custom_list(self, group: str, version: str, plural: str) -> list[Obj]:
        """Every object of a cluster-scoped custom kind; none when the kind is not served."""
        try:
            result = self.request("GET", _path(group, version, plural))
        except KubeError as err:
            if err.status == 404:
                return []
            raise
        return list(result.get("items") or [])

    def secret(self, namespace: str, name: str) -> Obj | None:
        return self._get(SECRETS.path(namespace, name))

    def pods(self, namespace: str) -> list[Obj]:
        result = self.request("GET", PODS.path(namespace))
        return list(result.get("items") or [])

    def events_about(self, namespace: str, uid: str) -> list[Obj]:
        result = self.request("GET", EVENTS.path(namespace),
                            query={"fieldSelector": f"involvedObject.uid={uid}"})
        return [e for e in result.get("items") or []
                if (e.get("involvedObject") or {}).get("uid") == uid]

    # -- writes --------------------------------------------------------------------------

    def create_claim(self, obj: Mapping[str, Any]) -> bool:
        ns = obj["metadata"]["namespace"]
        return self._create(PVCS.path(ns), obj)

    def create_pod(self, obj: Mapping[str, Any]) -> bool:
        return self._create(PODS.path(obj["metadata"]["namespace"]), obj)

    def create_secret(self, obj: Mapping[str, Any]) -> bool:
        return self._create(SECRETS.path(obj["metadata"]["namespace"]), obj)

    def create_custom(self, group: str, version: str, plural: str,
                      obj: Mapping[str, Any]) -> bool:
        return self._create(_path(group, version, plural, obj["metadata"]["namespace"]), obj)

    def delete_custom(self, group: str, version: str, plural: str, namespace: str, name: str,
                      uid: str) -> None:
        self._delete(_path(group, version, plural, namespace, name), uid)

    def create_service(self, obj: Mapping[str, Any]) -> bool:
        return self._create(SERVICES.path(obj["metadata"]["namespace"]), obj)

    def replace_secret(self, obj: Mapping[str, Any]) -> bool:
        """An Update at the object's resourceVersion; False when the Secret changed
        meanwhile (409): look again."""
        m = obj["metadata"]
        try:
            self.request("PUT", SECRETS.path(m["namespace"], m["name"]), body=obj)
            return True
        except KubeError as err:
            if err.status == 409:
                return False
            raise

    def delete_secret(self, namespace: str, name: str, uid: str) -> None:
        self._delete(SECRETS.path(namespace, name), uid)

    def create_event(self, obj: Mapping[str, Any]) -> bool:
        return self._create(EVENTS.path(obj["metadata"]["namespace"]), obj)

    def delete_pod(self, namespace: str, name: str, uid: str) -> None:
        self._delete(PODS.path(namespace, name), uid)

    def delete_claim(self, namespace: str, name: str, uid: str) -> None:
        self._delete(PVCS.path(namespace, name), uid)

    def annotate_claim(self, namespace: str, name: str, changes: Mapping[str, str]) -> None:
        """Merge ``changes`` into the claim's annotations."""
        patch = {"metadata": {"annotations": dict(changes)}}
        self.request("PATCH", PVCS.path(namespace, name),
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
            self.request("PUT", PVS.path(None, name), body=pv)
            return True
        except KubeError as err:
            if err.status == 409:
                return False
            raise
