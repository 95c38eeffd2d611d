"""Events on the target PVC (pure): the populator's own, and copies of PVC''s and the
pod's, as upstream copies them, so ``kubectl describe pvc`` on the target tells the whole
story. Names are derived from what they describe, so writing one twice is a conflict,
not a duplicate (an operator restarted mid-import re-sends nothing)."""

from __future__ import annotations

import hashlib
from typing import Any

from populators.claims import Obj, meta
from populators.flow import Emit


def copied_event(*, target: Obj, event: Obj) -> dict[str, Any]:
    """``event`` (on PVC' or the pod) re-told on the target, as upstream copies them; the
    name is derived from the original's, so copying twice is a conflict, not a copy."""
    tm = meta(target)
    original = str(meta(event).get("name"))
    digest = hashlib.sha256(f"{tm.get('uid')}/{original}".encode()).hexdigest()[:16]
    involved = event.get("involvedObject") or {}
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": f"{tm.get('name')}.{digest}", "namespace": tm.get("namespace")},
        "involvedObject": {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
                           "namespace": tm.get("namespace"), "name": tm.get("name"),
                           "uid": tm.get("uid")},
        "type": event.get("type") or "Normal",
        "reason": event.get("reason") or "",
        "message": f"[{involved.get('name')}] {event.get('message') or ''}"[:1024],
        "source": {"component": "rootdisk-populator"},
        "reportingComponent": "rootdisk-populator",
        "firstTimestamp": event.get("firstTimestamp"),
        "lastTimestamp": event.get("lastTimestamp"),
        "count": event.get("count") or 1,
    }


def emitted_event(*, target: Obj, emit: Emit, now: str) -> dict[str, Any]:
    """An event of our own on the target; one per (reason, message) per target."""
    tm = meta(target)
    digest = hashlib.sha256(
        f"{tm.get('uid')}/{emit.reason}/{emit.message}".encode()).hexdigest()[:16]
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": f"{tm.get('name')}.{digest}", "namespace": tm.get("namespace")},
        "involvedObject": {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
                           "namespace": tm.get("namespace"), "name": tm.get("name"),
                           "uid": tm.get("uid")},
        "type": emit.type,
        "reason": emit.reason,
        "message": emit.message[:1024],
        "source": {"component": "rootdisk-populator"},
        "reportingComponent": "rootdisk-populator",
        "firstTimestamp": now,
        "lastTimestamp": now,
        "count": 1,
    }
