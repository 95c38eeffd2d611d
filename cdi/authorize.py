"""May this DataVolume read a claim in another namespace? (pure)

As upstream: a clone in the DataVolume's own namespace is always allowed (whoever can
create the DataVolume can already mount the claim). Across namespaces the DataVolume's
creator must be allowed to ``create datavolumes/source`` (group ``cdi.kubevirt.io``) or
``create pods`` in the source namespace; from a VolumeSnapshot, ``create datavolumes/source``
or both ``create pods`` and ``create pvcs`` (upstream's resource name, word for word). The
creator is what the mutating webhook recorded
at admission (:func:`requester_annotation`); the controller asks the API server with
SubjectAccessReviews built here and refuses with upstream's message.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from vocab import cdi as api


@dataclass(frozen=True)
class Requester:
    username: str
    uid: str = ""
    groups: tuple[str, ...] = ()
    extra: Mapping[str, tuple[str, ...]] | None = None


def requester_annotation(user_info: Mapping[str, Any]) -> str:
    """The annotation value for an AdmissionReview's ``request.userInfo``."""
    out: dict[str, Any] = {"username": str(user_info.get("username") or "")}
    if user_info.get("uid"):
        out["uid"] = str(user_info["uid"])
    out["groups"] = [str(g) for g in user_info.get("groups") or []]
    extra = user_info.get("extra") or {}
    if isinstance(extra, Mapping) and extra:
        out["extra"] = {str(k): [str(v) for v in vs or []] for k, vs in extra.items()}
    return json.dumps(out, sort_keys=True, separators=(",", ":"))


def requester(dv: Mapping[str, Any]) -> Requester | None:
    """Who created ``dv`` (None: not recorded, or not readable)."""
    text = ((dv.get("metadata") or {}).get("annotations") or {}).get(api.CLONE_REQUESTER)
    if not text:
        return None
    try:
        data = json.loads(text)
    except ValueError:
        return None
    if not isinstance(data, dict) or not data.get("username"):
        return None
    extra = data.get("extra") if isinstance(data.get("extra"), dict) else None
    return Requester(username=str(data["username"]), uid=str(data.get("uid") or ""),
                     groups=tuple(str(g) for g in data.get("groups") or []),
                     extra={str(k): tuple(str(x) for x in v or [])
                            for k, v in extra.items()} if extra else None)


def service_account(namespace: str, name: str) -> Requester:
    """A ServiceAccount as the API server authenticates it (user and groups), for the
    VM controller's check of a VM's clone (upstream's ``AuthorizeSA``)."""
    return Requester(username=f"system:serviceaccount:{namespace}:{name}",
                     groups=("system:serviceaccounts", f"system:serviceaccounts:{namespace}",
                             "system:authenticated"))


def reviews(*, who: Requester, namespace: str, name: str = "") -> list[dict[str, Any]]:
    """The SubjectAccessReviews to ask about the claim ``name`` in ``namespace``, in order;
    any one allowed is enough (the name lets a Role grant clones of some claims only)."""
    base: dict[str, Any] = {"user": who.username, "groups": list(who.groups)}
    if who.uid:
        base["uid"] = who.uid
    if who.extra:
        base["extra"] = {k: list(v) for k, v in who.extra.items()}
    named = {"name": name} if name else {}
    attributes = (
        {"namespace": namespace, "verb": "create", "group": api.GROUP,
         "resource": "datavolumes", "subresource": "source", **named},
        {"namespace": namespace, "verb": "create", "group": "", "resource": "pods", **named},
    )
    return [{"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
             "spec": {**base, "resourceAttributes": attrs}} for attrs in attributes]


def snapshot_reviews(*, who: Requester, namespace: str, name: str = "",
                     ) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Upstream's ``sendSubjectAccessReviewsSnapshot``: the explicit review (``create
    datavolumes/source``), and the implicit ones that must all be allowed instead
    (``create pods`` and ``create pvcs``)."""
    explicit = reviews(who=who, namespace=namespace, name=name)[0]
    implicit = []
    for resource in ("pods", "pvcs"):
        review = json.loads(json.dumps(explicit))
        attrs = review["spec"]["resourceAttributes"]
        attrs.pop("subresource")
        attrs.update({"group": "", "resource": resource})
        implicit.append(review)
    return explicit, implicit


def allowed(*, ask: Callable[[dict[str, Any]], bool], who: Requester, namespace: str,
            name: str, snapshot: bool = False) -> bool:
    """Whether ``who`` may clone ``name`` in ``namespace`` (a claim, or a VolumeSnapshot
    when ``snapshot``); ``ask`` answers one SubjectAccessReview. Asks no more than needed,
    in upstream's order."""
    if not snapshot:
        return any(ask(r) for r in reviews(who=who, namespace=namespace, name=name))
    explicit, implicit = snapshot_reviews(who=who, namespace=namespace, name=name)
    return ask(explicit) or all(ask(r) for r in implicit)


def denied_message(*, who: Requester | None, namespace: str) -> str:
    name = who.username if who is not None else "(unknown: no creator recorded)"
    return f"User {name} has insufficient permissions in clone source namespace {namespace}"
