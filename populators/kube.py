"""What the populators add to :class:`kubeclient.Client`, as functions over it: the
volume's rebinding (an Update at the resourceVersion the decision saw), a Secret's
Update that yields to a newer one, the Events about an object, the list of a kind that
may not be served, and the resource of a populator's source kind. Everything else is a
plain verb of the client (``get_or_none``, ``create_if_absent``, ``delete`` with a UID
precondition, ...)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kubeclient import Client, Conflict, NotFound, Obj, Resource
from kubeclient.resources import EVENTS, PVS
from vocab import cdi as api


def source_resource(plural: str) -> Resource:
    """The resource of a populator's source kind (``volumeimportsources``, ...)."""
    return Resource(api.GROUP, api.VERSION, plural)


def list_served(kube: Client, res: Resource) -> list[Obj]:
    """Every object of a cluster-scoped kind; none when the kind is not served."""
    try:
        return kube.list(res)
    except NotFound:
        return []


def events_about(kube: Client, namespace: str, uid: str) -> list[Obj]:
    """The Events of ``namespace`` about the object with this UID."""
    found = kube.list(EVENTS, namespace, fieldSelector=f"involvedObject.uid={uid}")
    return [e for e in found if (e.get("involvedObject") or {}).get("uid") == uid]


def replaced(kube: Client, res: Resource, obj: Mapping[str, Any]) -> bool:
    """An Update at the object's resourceVersion; False when it changed meanwhile (409):
    look again."""
    try:
        kube.replace(res, obj)
        return True
    except Conflict:
        return False


def set_claim_ref(kube: Client, name: str, claim_ref: Mapping[str, Any],
                  resource_version: str) -> bool:
    """Point the PV at another claim (an Update with the PV's resourceVersion). False when
    the PV is gone or changed meanwhile: look again."""
    pv = kube.get_or_none(PVS, name)
    if pv is None:
        return False
    if resource_version and pv["metadata"].get("resourceVersion") != resource_version:
        return False
    pv["spec"]["claimRef"] = dict(claim_ref)
    return replaced(kube, PVS, pv)
