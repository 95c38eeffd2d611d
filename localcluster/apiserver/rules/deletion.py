"""Pure decision of what a DELETE does to one object.

A DELETE does not always remove: finalizers keep the object (with a deletionTimestamp)
until controllers remove them; Foreground/Orphan propagation adds the garbage collector's
own finalizers; a Pod bound to a node gets a grace period that the kubelet ends by deleting
again with ``gracePeriodSeconds=0``; a Namespace is emptied first (``spec.finalizers``).
"""

from __future__ import annotations

import copy
import datetime
from dataclasses import dataclass
from typing import Any

from .meta import format_time, ready_to_remove

Obj = dict[str, Any]

ORPHAN = "orphan"
FOREGROUND = "foregroundDeletion"
CRD_CLEANUP = "customresourcecleanup.apiextensions.k8s.io"
NAMESPACE_FINALIZER = "kubernetes"
PROPAGATIONS = ("Background", "Foreground", "Orphan")
DEFAULT_POD_GRACE = 30


@dataclass(frozen=True)
class DeletePlan:
    remove: bool
    """True: the object leaves the store now; False: it is stored as ``obj``."""
    obj: Obj


def _pod_grace(obj: Obj, requested: int | None) -> int:
    spec = obj.get("spec") or {}
    phase = (obj.get("status") or {}).get("phase")
    if not spec.get("nodeName") or phase in ("Succeeded", "Failed"):
        return 0
    if requested is not None:
        return max(0, requested)
    default = spec.get("terminationGracePeriodSeconds")
    return int(default) if isinstance(default, int) else DEFAULT_POD_GRACE


def plan_delete(obj: Obj, *, propagation: str | None, grace_seconds: int | None,
                now: datetime.datetime) -> DeletePlan:
    """What deleting ``obj`` with these options does (``obj`` is not modified)."""
    kind = obj.get("kind")
    out = copy.deepcopy(obj)
    meta = out.setdefault("metadata", {})
    finalizers: list[str] = list(meta.get("finalizers") or [])
    if propagation == "Orphan" and ORPHAN not in finalizers:
        finalizers.append(ORPHAN)
    elif propagation == "Foreground" and FOREGROUND not in finalizers:
        finalizers.append(FOREGROUND)
    if kind == "CustomResourceDefinition" and CRD_CLEANUP not in finalizers:
        finalizers.append(CRD_CLEANUP)
    if finalizers:
        meta["finalizers"] = finalizers
    grace = _pod_grace(obj, grace_seconds) if kind == "Pod" else 0
    if meta.get("deletionTimestamp"):
        current = int(meta.get("deletionGracePeriodSeconds") or 0)
        if grace < current:  # a second DELETE may only shorten the grace period
            meta["deletionGracePeriodSeconds"] = grace
            meta["deletionTimestamp"] = format_time(now + datetime.timedelta(seconds=grace))
    else:
        meta["deletionTimestamp"] = format_time(now + datetime.timedelta(seconds=grace))
        meta["deletionGracePeriodSeconds"] = grace
    if kind == "Namespace":
        out.setdefault("status", {})["phase"] = "Terminating"
    if ready_to_remove(out):
        return DeletePlan(True, copy.deepcopy(obj))
    return DeletePlan(False, out)


def precondition_error(obj: Obj, preconditions: dict[str, Any] | None) -> str | None:
    """DeleteOptions.preconditions (uid, resourceVersion) that ``obj`` fails, or None."""
    if not preconditions:
        return None
    meta = obj.get("metadata", {})
    uid = preconditions.get("uid")
    if uid and uid != meta.get("uid"):
        return (f"Precondition failed: UID in precondition: {uid}, UID in object meta: "
                f"{meta.get('uid')}")
    rv = preconditions.get("resourceVersion")
    if rv and str(rv) != str(meta.get("resourceVersion")):
        return (f"Precondition failed: ResourceVersion in precondition: {rv}, "
                f"ResourceVersion in object meta: {meta.get('resourceVersion')}")
    return None
