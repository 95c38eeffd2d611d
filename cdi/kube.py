"""The CDI controllers' one door to the API server: plain JSON in, plain JSON out.

Built on the official ``kubernetes`` package (its configuration, TLS and token
handling), but calling the REST paths directly with dicts, because the controllers
handle CRDs and core kinds alike and want every field, not generated models.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from typing import Any

import kubeclient
from kubeclient import MERGE, KubeError, Obj, event_body, load_configuration
from kubeclient import Resource as Kind
from kubeclient.resources import (
    CDICONFIGS as CDICONFIGS,
)
from kubeclient.resources import (
    CDIS as CDIS,
)
from kubeclient.resources import (
    CLONE_SOURCES as CLONE_SOURCES,
)
from kubeclient.resources import (
    CONFIGMAPS as CONFIGMAPS,
)
from kubeclient.resources import (
    DATAIMPORTCRONS as DATAIMPORTCRONS,
)
from kubeclient.resources import (
    DATASOURCES as DATASOURCES,
)
from kubeclient.resources import (
    DATAVOLUMES as DATAVOLUMES,
)
from kubeclient.resources import (
    DEPLOYMENTS as DEPLOYMENTS,
)
from kubeclient.resources import (
    EVENTS as EVENTS,
)
from kubeclient.resources import (
    IMPORT_SOURCES as IMPORT_SOURCES,
)
from kubeclient.resources import (
    INGRESSES as INGRESSES,
)
from kubeclient.resources import (
    LEASES as LEASES,
)
from kubeclient.resources import (
    PVCS as PVCS,
)
from kubeclient.resources import (
    SECRETS as SECRETS,
)
from kubeclient.resources import (
    SNAPSHOT_CONTENTS as SNAPSHOT_CONTENTS,
)
from kubeclient.resources import (
    SNAPSHOTS as SNAPSHOTS,
)
from kubeclient.resources import (
    STORAGECLASSES as STORAGECLASSES,
)
from kubeclient.resources import (
    STORAGEPROFILES as STORAGEPROFILES,
)
from kubeclient.resources import (
    SUBJECT_ACCESS_REVIEWS as SUBJECT_ACCESS_REVIEWS,
)
from kubeclient.resources import (
    UPLOAD_SOURCES as UPLOAD_SOURCES,
)
from vocab import cdi as api

logger = logging.getLogger(__name__)

METADATA_ONLY = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1"
"""Accept header for an object's metadata without its body (a Secret without its data)."""

__all__ = ["CDICONFIGS", "CDIS", "CLONE_SOURCES", "CONFIGMAPS", "DATAIMPORTCRONS", "DATASOURCES",
           "DATAVOLUMES",
           "DEPLOYMENTS", "EVENTS", "IMPORT_SOURCES", "INGRESSES", "LEASES", "METADATA_ONLY",
           "PVCS", "SECRETS", "SNAPSHOTS", "SNAPSHOT_CONTENTS", "STORAGECLASSES",
           "STORAGEPROFILES", "SUBJECT_ACCESS_REVIEWS",
           "Client", "Kind", "KubeError", "Obj", "cdi_namespace", "load_configuration"]



def cdi_namespace() -> str:
    """The namespace the CDI programs run in: their pod's (POD_NAMESPACE)."""
    return os.environ.get("POD_NAMESPACE") or api.CDI_NAMESPACE


class Client(kubeclient.Client):
    """The CDI controllers' verbs: ``get`` gives None on not found, ``create`` None when
    the name is taken, ``delete`` ignores not found."""

    get = kubeclient.Client.get_or_none  # type: ignore[assignment]  # dialect, goes

    def list(self, kind: Kind, namespace: str | None = None) -> list[Obj]:  # type: ignore[override]  # dialect, goes
        out = self.request("GET", kind.path(namespace))
        return list(out.get("items") or [])

    def create(self, kind: Kind, obj: Obj) -> Obj | None:  # type: ignore[override]  # dialect, goes
        """Create ``obj``; None when an object of that name exists already."""
        ns = obj["metadata"].get("namespace")
        try:
            out: Obj = self.request("POST", kind.path(ns), body=obj)
            return out
        except KubeError as err:
            if err.status == 409:
                return None
            raise

    def patch(self, kind: Kind, name: str, patch: Any, namespace: str | None = None, *,  # type: ignore[override]  # dialect, goes
              subresource: str | None = None) -> Obj:
        out: Obj = self.request("PATCH", kind.path(namespace, name, subresource), body=patch,
                                content_type=MERGE)
        return out

    def delete(self, kind: Kind, name: str, namespace: str | None = None) -> None:  # type: ignore[override]  # dialect, goes
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
        """Whether the Secret or ConfigMap exists, read as metadata only: the webhook
        never holds a Secret's data (the server falls back to the whole object only if
        it does not serve PartialObjectMetadata)."""
        return self.metadata(kind, name, namespace) is not None

    def metadata(self, kind: str, name: str, namespace: str) -> Obj | None:  # type: ignore[override]  # dialect, goes
        """The ``metadata`` of a Secret, ConfigMap or PersistentVolumeClaim (None: not
        found), asked for as PartialObjectMetadata; only the metadata is kept."""
        target = {"Secret": SECRETS, "ConfigMap": CONFIGMAPS,
                  "PersistentVolumeClaim": PVCS}[kind]
        try:
            out = self.request("GET", target.path(namespace, name),
                               accept=f"{METADATA_ONLY},application/json")
        except KubeError as err:
            if err.status == 404:
                return None
            raise
        return dict((out or {}).get("metadata") or {})

    def event(self, obj: Mapping[str, Any], *, type_: str, reason: str, message: str,  # type: ignore[override]  # dialect, goes
              component: str = "rootdisk-cdi") -> None:
        """Record an Event about ``obj`` (best effort: a lost Event is only logged)."""
        body = event_body(obj, type_=type_, reason=reason, message=message,
                          component=component)
        ns = body["metadata"]["namespace"]
        try:
            self.request("POST", EVENTS.path(ns), body=body)
        except KubeError as err:
            logger.warning("event %s on %s/%s not recorded: %s", reason, ns,
                           body["involvedObject"]["name"], err)
