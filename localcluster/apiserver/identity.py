"""Identity endpoints over the store: bound-token checks, TokenRequest, TokenReview,
SelfSubjectRulesReview and the OIDC discovery documents of the token issuer.

A service-account token names the uids of its ServiceAccount and (when bound) pod; it
authenticates only while objects with those uids exist, so deleting the pod or the
account (even re-creating one with the same name) ends every token issued for it. The
check is two dictionary look-ups, done on every request after the cached signature check.
"""

from __future__ import annotations

import datetime
import time
from typing import Any

from .auth import rbac
from .auth.authn import Authenticator, UserInfo
from .auth.sa_tokens import MAX_EXPIRATION, MIN_EXPIRATION, TokenError
from .backend import SA_GR, Backend
from .errors import APIError
from .rules.meta import format_time
from .storage.store import Store

Obj = dict[str, Any]
DISCOVERY_PATHS = frozenset({"/.well-known/openid-configuration", "/openid/v1/jwks"})
REVIEWS = frozenset({"tokenreviews", "selfsubjectrulesreviews"})
DEFAULT_EXPIRATION = 3600


def authenticate(auth: Authenticator, backend: Backend, token: str, *,
                 audiences: tuple[str, ...] = ()) -> UserInfo | None:
    user, _ = authenticate_verbose(auth, backend, token, audiences=audiences)
    return user


def authenticate_verbose(auth: Authenticator, backend: Backend, token: str, *,
                         audiences: tuple[str, ...] = ()) -> tuple[UserInfo | None, str]:
    """(user, "") or (None, why not)."""
    user = auth.authenticate(token, audiences=audiences)
    if user is None:
        if token.count(".") != 2:
            return None, "invalid bearer token"
        try:
            auth.tokens.verify(token, now=int(time.time()), audiences=audiences)
        except TokenError as err:
            return None, str(err)
        return None, "invalid bearer token"
    if user.service_account is not None:
        ns, name = user.service_account
        sa = backend.store.get(SA_GR, ns, name)
        if sa is None or (user.uid and sa.obj["metadata"].get("uid") != user.uid):
            return None, f'service account "{ns}/{name}" (uid {user.uid}) no longer exists'
    for uid in user.bound_uids:
        if not backend.uid_alive(uid):
            return None, f"the object the token is bound to (uid {uid}) no longer exists"
    return user, ""


def discovery_document(auth: Authenticator, path: str) -> Obj:
    if path == "/openid/v1/jwks":
        return auth.tokens.jwks()
    return auth.tokens.openid_configuration()


def _invalid(field: str, message: str, name: str) -> APIError:
    return APIError(422, "Invalid", f"TokenRequest.authentication.k8s.io \"{name}\" is "
                                    f"invalid: {field}: {message}", name=name,
                    group="authentication.k8s.io", kind="TokenRequest")


def token_request(auth: Authenticator, backend: Backend, *, sa: Obj, body: Obj) -> Obj:
    """Answer a TokenRequest for the (existing) ServiceAccount ``sa``."""
    meta = sa["metadata"]
    namespace, name = str(meta["namespace"]), str(meta["name"])
    spec = body.get("spec") or {}
    if not isinstance(spec, dict):
        raise _invalid("spec", "Invalid value: must be an object", name)
    seconds = spec.get("expirationSeconds")
    if seconds is None:
        seconds = DEFAULT_EXPIRATION
    if not isinstance(seconds, int) or isinstance(seconds, bool) or seconds < MIN_EXPIRATION:
        raise _invalid("spec.expirationSeconds", "Invalid value: may not specify a duration "
                       "less than 10 minutes", name)
    if seconds > MAX_EXPIRATION:
        raise _invalid("spec.expirationSeconds", "Invalid value: may not specify a duration "
                       "larger than 2^32 seconds", name)
    audiences = spec.get("audiences") or []
    if not isinstance(audiences, list) or not all(isinstance(a, str) and a for a in audiences):
        raise _invalid("spec.audiences", "Invalid value: must be a list of non-empty strings",
                       name)
    pod_name = pod_uid = ""
    ref = spec.get("boundObjectRef")
    if ref:
        if not isinstance(ref, dict) or ref.get("kind") != "Pod":
            raise _invalid("spec.boundObjectRef.kind", f'Unsupported value: '
                           f'"{(ref or {}).get("kind") if isinstance(ref, dict) else ref}": '
                           'supported values: "Pod"', name)
        pod = backend.store.get("/pods", namespace, str(ref.get("name", "")))
        if pod is None:
            raise APIError(404, "NotFound", f'pods "{ref.get("name")}" not found',
                           name=str(ref.get("name", "")), kind="pods")
        pod_uid = str(pod.obj["metadata"]["uid"])
        if ref.get("uid") and ref["uid"] != pod_uid:
            raise APIError(409, "Conflict", f'the UID in the bound object reference '
                           f'({ref["uid"]}) does not match the UID in record ({pod_uid}). '
                           "The object might have been deleted and then recreated",
                           name=name, kind="TokenRequest")
        pod_name = str(ref.get("name"))
    now = int(time.time())
    token = auth.tokens.mint(namespace=namespace, service_account=name,
                             service_account_uid=str(meta["uid"]), now=now,
                             expiration_seconds=seconds, audiences=tuple(audiences),
                             pod_name=pod_name, pod_uid=pod_uid)
    expires = datetime.datetime.fromtimestamp(now + seconds, datetime.UTC)
    out_spec: Obj = {"audiences": audiences or list(auth.tokens.api_audiences),
                     "expirationSeconds": seconds, "boundObjectRef": ref or None}
    return {"kind": "TokenRequest", "apiVersion": "authentication.k8s.io/v1",
            "metadata": {"name": name, "namespace": namespace, "creationTimestamp": None},
            "spec": out_spec,
            "status": {"token": token, "expirationTimestamp": format_time(expires)}}


def review(auth: Authenticator, backend: Backend, resource: str, body: Obj,
           requester: UserInfo) -> Obj:
    spec = body.get("spec") or {}
    out = dict(body)
    out.setdefault("metadata", {})["creationTimestamp"] = None
    if resource == "tokenreviews":
        token = spec.get("token")
        audiences = spec.get("audiences") or []
        if not isinstance(token, str) or not token:
            raise APIError(422, "Invalid", "spec.token: Required value", kind="TokenReview",
                           group="authentication.k8s.io")
        if not isinstance(audiences, list) or not all(isinstance(a, str) for a in audiences):
            raise APIError(422, "Invalid", "spec.audiences: must be a list of strings",
                           kind="TokenReview", group="authentication.k8s.io")
        user, why = authenticate_verbose(auth, backend, token, audiences=tuple(audiences))
        if user is None:
            out["status"] = {"authenticated": False, "error": why}
        else:
            wanted = audiences or list(auth.tokens.api_audiences)
            out["status"] = {"authenticated": True, "user": user.to_dict(),
                             "audiences": wanted}
        return out
    namespace = str(spec.get("namespace") or "")
    resource_rules, non_resource_rules = rules_for(backend.store, requester,
                                                   namespace=namespace)
    out["status"] = {"resourceRules": resource_rules, "nonResourceRules": non_resource_rules,
                     "incomplete": False}
    return out


def rules_for(store: Store, user: UserInfo, *, namespace: str) -> tuple[list[Obj], list[Obj]]:
    """What ``user`` may do in ``namespace`` (cluster bindings and that namespace's role
    bindings), as SelfSubjectRulesReview lists it."""
    def objects(resource: str) -> list[Obj]:
        return [s.obj for _, s in store.items(f"rbac.authorization.k8s.io/{resource}")]

    attrs = rbac.Attributes(user=user.username, groups=tuple(user.groups), verb="",
                            namespace=namespace)
    roles, cluster_roles = objects("roles"), objects("clusterroles")
    bindings = [(b, "") for b in objects("clusterrolebindings")]
    if namespace:
        bindings += [(b, namespace) for b in objects("rolebindings")
                     if (b.get("metadata") or {}).get("namespace") == namespace]
    resource_rules: list[Obj] = []
    non_resource_rules: list[Obj] = []
    for binding, ns in bindings:
        if not any(rbac._subject_matches(s, attrs, ns) for s in binding.get("subjects") or []):
            continue
        _, rules = rbac._role_rules(binding, roles, cluster_roles)
        for rule in rules or []:
            if rule.get("nonResourceURLs"):
                entry = {"verbs": list(rule.get("verbs") or []),
                         "nonResourceURLs": list(rule["nonResourceURLs"])}
                if entry not in non_resource_rules:
                    non_resource_rules.append(entry)
            elif rule.get("resources"):
                entry = {"verbs": list(rule.get("verbs") or []),
                         "apiGroups": list(rule.get("apiGroups") or []),
                         "resources": list(rule["resources"])}
                if rule.get("resourceNames"):
                    entry["resourceNames"] = list(rule["resourceNames"])
                if entry not in resource_rules:
                    resource_rules.append(entry)
    return resource_rules, non_resource_rules
