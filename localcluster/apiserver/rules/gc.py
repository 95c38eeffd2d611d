"""Pure garbage-collection decisions on ownerReferences.

The collector itself (``controllers.py``) reacts to removals and to the ``orphan`` /
``foregroundDeletion`` finalizers; what it does to each dependent is decided here.
"""

from __future__ import annotations

import copy
from typing import Any, Literal

Obj = dict[str, Any]


def owner_uids(obj: Obj) -> set[str]:
    refs = (obj.get("metadata") or {}).get("ownerReferences") or []
    return {str(r["uid"]) for r in refs if isinstance(r, dict) and r.get("uid")}


def without_owner(obj: Obj, owner_uid: str) -> Obj:
    """``obj`` with its references to ``owner_uid`` removed."""
    out = copy.deepcopy(obj)
    meta = out["metadata"]
    refs = [r for r in meta.get("ownerReferences") or [] if r.get("uid") != owner_uid]
    if refs:
        meta["ownerReferences"] = refs
    else:
        meta.pop("ownerReferences", None)
    return out


def on_owner_gone(dependent: Obj, *, owner_uid: str,
                  live_uids: set[str]) -> Literal["delete", "detach", "keep"]:
    """What happens to ``dependent`` once its owner ``owner_uid`` has left the store.

    It is deleted when none of its owners is alive any more; otherwise only the dangling
    reference is dropped.
    """
    owners = owner_uids(dependent)
    if owner_uid not in owners:
        return "keep"
    if (owners - {owner_uid}) & live_uids:
        return "detach"
    return "delete"


def blocks_foreground(dependent: Obj, owner_uid: str) -> bool:
    """A dependent with ``blockOwnerDeletion: true`` keeps a Foreground owner waiting."""
    refs = (dependent.get("metadata") or {}).get("ownerReferences") or []
    return any(r.get("uid") == owner_uid and r.get("blockOwnerDeletion") for r in refs)
