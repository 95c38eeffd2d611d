"""Kubernetes Events about objects, so ``kubectl describe`` tells what happened."""

from __future__ import annotations

import datetime
import logging
import uuid

from localcluster.controllers import client
from localcluster.controllers.client import Kube, KubeError, Obj

logger = logging.getLogger(__name__)


def now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class EventRecorder:
    def __init__(self, kube: Kube, *, component: str, host: str = "") -> None:
        self.kube = kube
        self.component = component
        self.host = host

    def emit(self, obj: Obj, etype: str, reason: str, message: str, *,
             kind: str | None = None, api_version: str = "v1") -> None:
        """Record an Event about ``obj`` (``kind`` for objects listed without one)."""
        meta = obj.get("metadata") or {}
        ns = meta.get("namespace") or "default"
        event = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": f"{meta.get('name')}.{uuid.uuid4().hex[:16]}", "namespace": ns},
            "involvedObject": {
                "apiVersion": obj.get("apiVersion") or api_version,
                "kind": obj.get("kind") or kind,
                "name": meta.get("name"), "namespace": meta.get("namespace"),
                "uid": meta.get("uid"), "resourceVersion": meta.get("resourceVersion"),
            },
            "reason": reason,
            "message": message,
            "type": etype,
            "count": 1,
            "firstTimestamp": now(),
            "lastTimestamp": now(),
            "source": {"component": self.component, "host": self.host},
            "reportingComponent": self.component,
        }
        try:
            self.kube.create(client.EVENTS, event, ns)
        except KubeError as err:
            logger.debug("could not record event %s: %s", reason, err)
