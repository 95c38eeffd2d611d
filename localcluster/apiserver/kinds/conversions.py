"""events.k8s.io/v1 Events <-> core v1 Events: one stored object, two shapes.

kube-apiserver keeps both APIs over the same storage, so an Event written through one is
read through the other (``kubectl describe`` reads core Events, newer controllers write
events.k8s.io ones). Only field names differ; this module renames them both ways.
"""

from __future__ import annotations

import copy
from typing import Any

# events.k8s.io/v1 field -> core/v1 field
_RENAMES = (
    ("regarding", "involvedObject"),
    ("note", "message"),
    ("deprecatedSource", "source"),
    ("deprecatedFirstTimestamp", "firstTimestamp"),
    ("deprecatedLastTimestamp", "lastTimestamp"),
    ("deprecatedCount", "count"),
    ("reportingController", "reportingComponent"),
)


def event_to_core(obj: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(obj)
    for new, old in _RENAMES:
        if new in out:
            out[old] = out.pop(new)
    out["apiVersion"] = "v1"
    out["kind"] = "Event"
    return out


def event_from_core(obj: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(obj)
    for new, old in _RENAMES:
        if old in out:
            out[new] = out.pop(old)
    out["apiVersion"] = "events.k8s.io/v1"
    out["kind"] = "Event"
    return out
