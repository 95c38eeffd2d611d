"""Kubernetes Events about objects, so ``kubectl describe`` tells what happened."""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Mapping
from typing import Any

from kubeclient import Client, KubeError, resources
from localcluster.kube.times import now

logger = logging.getLogger(__name__)


class EventRecorder:
    DEDUP_SECONDS = 60.0
    """The same event about the same object is recorded at most once a minute (a crash
    loop or a failing provisioning pass would otherwise flood the namespace)."""

    def __init__(self, kube: Client, *, component: str, host: str = "") -> None:
        self.kube = kube
        self.component = component
        self.host = host
        self._recent: dict[tuple[str, str, str], float] = {}
        self._lock = threading.Lock()

    def _duplicate(self, uid: str, reason: str, message: str) -> bool:
        now = time.monotonic()
        with self._lock:
            if len(self._recent) > 10000:
                self._recent = {k: t for k, t in self._recent.items()
                                if now - t < self.DEDUP_SECONDS}
            key = (uid, reason, message)
            last = self._recent.get(key)
            if last is not None and now - last < self.DEDUP_SECONDS:
                return True
            self._recent[key] = now
            return False

    def emit(self, obj: Mapping[str, Any], etype: str, reason: str, message: str, *,
             kind: str | None = None, api_version: str = "v1") -> None:
        """Record an Event about ``obj`` (``kind`` for objects listed without one)."""
        meta = obj.get("metadata") or {}
        if self._duplicate(str(meta.get("uid")), reason, message):
            return
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
            self.kube.create(resources.EVENTS, event, ns)
        except KubeError as err:
            logger.debug("could not record event %s: %s", reason, err)
