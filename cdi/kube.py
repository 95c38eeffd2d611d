"""What the CDI programs add to :class:`kubeclient.Client`, as functions over it: the
namespace they run in, the component their Events name, and the webhook's look-up of a
referenced Secret, ConfigMap or claim by kind name (metadata only)."""

from __future__ import annotations

import os

from kubeclient import Client, Obj
from kubeclient.resources import CONFIGMAPS, PVCS, SECRETS
from vocab import cdi as api

COMPONENT = "rootdisk-cdi"
"""The ``source.component`` of the Events the CDI controllers record."""

_BY_KIND = {"Secret": SECRETS, "ConfigMap": CONFIGMAPS, "PersistentVolumeClaim": PVCS}


def cdi_namespace() -> str:
    """The namespace the CDI programs run in: their pod's (POD_NAMESPACE)."""
    return os.environ.get("POD_NAMESPACE") or api.CDI_NAMESPACE


def metadata(client: Client, kind: str, name: str, namespace: str) -> Obj | None:
    """The ``metadata`` of a Secret, ConfigMap or PersistentVolumeClaim (None: not
    found), read as PartialObjectMetadata: the webhook never holds a Secret's data."""
    return client.metadata(_BY_KIND[kind], name, namespace)


def exists(client: Client, kind: str, name: str, namespace: str) -> bool:
    """Whether the Secret, ConfigMap or claim exists (its metadata read only)."""
    return metadata(client, kind, name, namespace) is not None
