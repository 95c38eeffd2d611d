"""Authorization of requests and the answers to (Self/Local)SubjectAccessReviews.

The decision itself is ``rbac.authorize`` (pure, over the RBAC objects); this module
gathers those objects from the store and builds the request attributes. Discovery and
self-reviews are open to every authenticated user through the bootstrap bindings
(``rbac_defaults``), as upstream.
"""

from __future__ import annotations

from typing import Any

from ..storage.store import Store
from . import rbac
from .authn import UserInfo

Obj = dict[str, Any]



def _objects(store: Store, resource: str) -> list[Obj]:
    return [s.obj for _, s in store.items(f"rbac.authorization.k8s.io/{resource}")]


def decide(store: Store, *, user: str, groups: list[str] | tuple[str, ...], verb: str,
           api_group: str = "", resource: str = "", subresource: str = "", name: str = "",
           namespace: str = "", path: str = "") -> tuple[bool, str]:
    attrs = rbac.Attributes(user=user, groups=tuple(groups), verb=verb, api_group=api_group,
                            resource=resource, subresource=subresource, name=name,
                            namespace=namespace, non_resource_path=path)
    decision = rbac.authorize(attrs, roles=_objects(store, "roles"),
                              cluster_roles=_objects(store, "clusterroles"),
                              role_bindings=_objects(store, "rolebindings"),
                              cluster_role_bindings=_objects(store, "clusterrolebindings"))
    return bool(decision.allowed), str(decision.reason)


def forbidden_message(*, user: str, verb: str, api_group: str = "", resource: str = "",
                      subresource: str = "", name: str = "", namespace: str = "",
                      path: str = "") -> str:
    return rbac.forbidden_message(rbac.Attributes(
        user=user, verb=verb, api_group=api_group, resource=resource,
        subresource=subresource, name=name, namespace=namespace, non_resource_path=path))


def allowed_for(store: Store, user: UserInfo, **attrs: str) -> tuple[bool, str]:
    return decide(store, user=user.username, groups=user.groups, **attrs)


def review(store: Store, body: Obj, *, requester: UserInfo | None,
           namespace: str | None) -> Obj:
    """Fill ``status`` of a SubjectAccessReview-like body.

    ``requester``: for SelfSubjectAccessReview, the caller is the subject.
    ``namespace``: for LocalSubjectAccessReview, the namespace of the URL.
    """
    spec = body.get("spec") or {}
    if requester is not None:
        user, groups = requester.username, list(requester.groups)
    else:
        user, groups = str(spec.get("user") or ""), list(spec.get("groups") or [])
        if user.startswith("system:serviceaccount:"):
            sa_ns = user.split(":")[2]
            for group in ("system:serviceaccounts", f"system:serviceaccounts:{sa_ns}"):
                if group not in groups:
                    groups.append(group)
        if user and "system:authenticated" not in groups:
            groups.append("system:authenticated")
    res = spec.get("resourceAttributes")
    non_res = spec.get("nonResourceAttributes")
    if isinstance(res, dict):
        ns = namespace if namespace is not None else str(res.get("namespace") or "")
        allowed, reason = decide(store, user=user, groups=groups, verb=str(res.get("verb", "")),
                                 api_group=str(res.get("group", "")),
                                 resource=str(res.get("resource", "")),
                                 subresource=str(res.get("subresource", "")),
                                 name=str(res.get("name", "")), namespace=ns)
    elif isinstance(non_res, dict):
        allowed, reason = decide(store, user=user, groups=groups,
                                 verb=str(non_res.get("verb", "")),
                                 path=str(non_res.get("path", "")))
    else:
        allowed, reason = False, "neither resourceAttributes nor nonResourceAttributes given"
    out = dict(body)
    out["status"] = {"allowed": allowed, "reason": reason}
    return out
