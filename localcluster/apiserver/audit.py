"""An audit log of the writes admission annotated, as kube-apiserver's ``--audit-log-path``
writes it (one ``audit.k8s.io/v1`` Event per line, JSON), at level Metadata.

No audit policy is read: an event is written for every create or update an admission
plugin annotated (PodSecurity's ``pod-security.kubernetes.io/*`` annotations), and for
nothing else. The event is written when admission has decided, so its ``responseStatus``
is the refusal (403) or absent; request and response bodies are never written. The file
lives in the API server's data directory (0700) and is created 0600.
"""

from __future__ import annotations

import datetime
import json
import os
import threading
import uuid
from collections.abc import Mapping
from typing import Any

from .auth.authn import UserInfo


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def event(*, verb: str, user: UserInfo, object_ref: Mapping[str, str],
          annotations: Mapping[str, str], refused: str | None) -> dict[str, Any]:
    """One audit Event (pure but for its id and time)."""
    now = _now()
    ev: dict[str, Any] = {
        "kind": "Event", "apiVersion": "audit.k8s.io/v1", "level": "Metadata",
        "auditID": str(uuid.uuid4()), "stage": "ResponseComplete", "verb": verb,
        "user": user.to_dict(), "objectRef": dict(object_ref),
        "requestReceivedTimestamp": now, "stageTimestamp": now,
        "annotations": dict(annotations),
    }
    if refused is not None:
        ev["responseStatus"] = {"metadata": {}, "status": "Failure", "message": refused,
                                "reason": "Forbidden", "code": 403}
    return ev


MAX_BYTES = 10 * 1024 * 1024
"""The log rotates once past this (one previous file is kept, as ``.1``), as
kube-apiserver's ``--audit-log-maxsize``."""


class AuditLog:
    def __init__(self, path: str | os.PathLike[str], max_bytes: int = MAX_BYTES) -> None:
        self.path = os.fspath(path)
        self.max_bytes = max_bytes
        self._lock = threading.Lock()

    def write(self, ev: Mapping[str, Any]) -> None:
        line = json.dumps(ev, separators=(",", ":"), sort_keys=True) + "\n"
        with self._lock:
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC,
                         0o600)
            try:
                os.write(fd, line.encode())
                full = os.fstat(fd).st_size > self.max_bytes
            finally:
                os.close(fd)
            if full:
                os.replace(self.path, self.path + ".1")

    def read(self) -> list[dict[str, Any]]:
        """Every event so far (tests, debugging)."""
        try:
            with open(self.path, encoding="utf-8") as fh:
                return [json.loads(line) for line in fh if line.strip()]
        except FileNotFoundError:
            return []
