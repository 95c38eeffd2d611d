"""HTTP: from a Kubernetes REST request to a backend call and back.

One catch-all route parses the URL the way kube-apiserver lays it out
(``/api/v1[/namespaces/NS]/RESOURCE[/NAME[/SUBRESOURCE]]`` and the same under
``/apis/GROUP/VERSION``), authenticates the bearer token, authorizes with RBAC, and
dispatches on method and shape. Lists and watches are written from the stored JSON text
(no re-serialization) so that a busy watch costs little.
"""

from __future__ import annotations

import asyncio
import bisect
import json
import logging
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from . import identity, selectors, subresources
from .aggregation.proxy import Aggregator
from .auth import authz, escalation, impersonation
from .auth.authn import ANONYMOUS_USER, Authenticator, UserInfo, service_account_user
from .backend import (
    APPLY_PATCH,
    JSON_PATCH,
    MERGE_PATCH,
    STRATEGIC_PATCH,
    Backend,
)
from .errors import (
    STALE,
    APIError,
    bad_request,
    conflict,
    forbidden,
    method_not_allowed,
    not_found,
    too_large,
    unauthorized,
    unsupported_media_type,
)
from .kinds import discovery, openapi, openapi_proto
from .kinds.apiservices import request_attributes
from .kinds.registry import Registry, ResourceType
from .storage.store import Stored
from .streams import portforward, remotecommand
from .tables.convert import TableError, to_table
from .watch import list_options
from .watch.stream import WatchOptions, WatchStream, matches
from .wire import decoding, protobuf, warnings
from .write_path import WriteOptions

logger = logging.getLogger(__name__)

Obj = dict[str, Any]
LogProvider = subresources.LogProvider
JSON_TYPE = "application/json"
YAML_TYPE = "application/yaml"
DUPLICATES = web.RequestKey("duplicates", tuple)  # keys a JSON body repeated
TYPE_WARNINGS = web.RequestKey("type_warnings", list)  # e.g. a deprecated CRD version
# what a write collected: unknown fields under fieldValidation=Warn, webhooks' warnings
WRITE_WARNINGS = web.RequestKey("write_warnings", list)
PUBLIC_PATHS = frozenset({"/healthz", "/livez", "/readyz"})
DEFAULT_WATCH_TIMEOUT = 1800
# Built-in kinds whose DELETE answers with the deleted object rather than a Status, as
# kube-apiserver's registries do (the official clients deserialize the answer as that
# kind: a Status there fails them).
RETURNS_DELETED_OBJECT = frozenset({
    "/pods", "/persistentvolumeclaims", "/persistentvolumes", "/services",
    "/serviceaccounts", "/podtemplates", "/resourcequotas",
    "storage.k8s.io/storageclasses", "storage.k8s.io/csidrivers", "storage.k8s.io/csinodes",
    "storage.k8s.io/volumeattachments", "storage.k8s.io/volumeattributesclasses",
})


@dataclass(frozen=True)
class Target:
    rt: ResourceType
    namespace: str | None
    name: str
    subresource: str


@dataclass
class Settings:
    max_body_bytes: int = 3 * 1024 * 1024
    bookmark_interval: float = 10.0
    version: dict[str, str] | None = None


def _json_response(obj: Any, status: int = 200) -> web.Response:
    return web.Response(text=json.dumps(obj, separators=(",", ":")), status=status,
                        content_type=JSON_TYPE)


def _raw_response(text: str, status: int = 200) -> web.Response:
    return web.Response(text=text, status=status, content_type=JSON_TYPE)


def error_response(err: APIError) -> web.Response:
    return _json_response(err.to_status(), err.code)


def _wants_table(request: web.Request) -> bool:
    accept = request.headers.get("Accept", "")
    first = accept.split(",")[0]
    return "as=Table" in first


def _wants_metadata(request: web.Request) -> bool:
    """``Accept: application/json;as=PartialObjectMetadata[List];g=meta.k8s.io;v=v1``: the
    objects' metadata only (how a client asks whether a Secret exists without its data)."""
    first = request.headers.get("Accept", "").split(",")[0]
    params = {p.strip() for p in first.split(";")[1:]}
    return bool({"as=PartialObjectMetadata", "as=PartialObjectMetadataList"} & params) and (
        "g=meta.k8s.io" in params)


def _partial(obj: Obj) -> Obj:
    return {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1",
            "metadata": obj.get("metadata") or {}}


def _include_object(request: web.Request) -> str:
    return request.query.get("includeObject", "Metadata")


def _flag(value: str | None) -> bool:
    return value is not None and value.lower() in ("true", "1")


def _int_param(query: Any, name: str) -> int | None:
    value = query.get(name)
    if value in (None, ""):
        return None
    try:
        return int(value)
    except ValueError:
        raise bad_request(f'{name}: Invalid value: "{value}": must be an integer') from None


class Handlers:
    def __init__(self, *, backend: Backend, registry: Registry, authenticator: Authenticator,
                 settings: Settings) -> None:
        self.backend = backend
        self.registry = registry
        self.auth = authenticator
        self.settings = settings
        self.log_provider: LogProvider | None = None
        self.aggregator: Aggregator | None = None
        self.exec_provider: remotecommand.ExecProvider | None = None
        self.closing = asyncio.Event()

    # -- entry ------------------------------------------------------------------------------

    async def handle(self, request: web.Request) -> web.StreamResponse:
        """The answer, with one ``Warning`` header per warning the request collected
        (an error answer too: a webhook's warnings survive its denial)."""
        response = await self._answer(request)
        if not response.prepared:
            for value in warnings.headers([*request.get(TYPE_WARNINGS, ()),
                                           *request.get(WRITE_WARNINGS, ())]):
                response.headers.add("Warning", value)
        return response

    async def _answer(self, request: web.Request) -> web.StreamResponse:
        try:
            return await self._handle(request)
        except APIError as err:
            if err.code >= 500:
                logger.warning("%s %s: %s", request.method, request.path, err.message)
            return error_response(err)
        except web.HTTPRequestEntityTooLarge:
            return error_response(too_large(self.settings.max_body_bytes))
        except (ConnectionResetError, asyncio.CancelledError):
            raise
        except Exception as err:  # a bug must still answer with a Status
            logger.exception("%s %s failed", request.method, request.path)
            return error_response(APIError(500, "InternalError", f"internal error: {err}"))

    def _user(self, request: web.Request, path: str) -> UserInfo:
        """Who the request acts as: the authenticated user, or whom it impersonates."""
        user = self._authenticate(request, path)
        wanted = impersonation.wanted_user(request.headers.items())  # 400 without a user
        if wanted is None:
            return user
        return self._impersonate(user, wanted.name, list(wanted.groups))

    def _authenticate(self, request: web.Request, path: str) -> UserInfo:
        header = request.headers.get("Authorization", "")
        if not header and request.method == "GET":
            # Anonymous requests get what RBAC grants system:unauthenticated on non-resource
            # paths (system:public-info-viewer: /version and the health checks); 401 else.
            if authz.allowed_for(self.backend.store, ANONYMOUS_USER, verb="get",
                                 path=path)[0]:
                return ANONYMOUS_USER
            raise unauthorized()
        scheme, _, token = header.partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise unauthorized()
        user = identity.authenticate(self.auth, self.backend, token.strip())
        if user is None:
            raise unauthorized()
        return user

    def _impersonate(self, user: UserInfo, target: str, groups: list[str]) -> UserInfo:
        """``kubectl --as``: act as another user, if RBAC grants ``impersonate`` on it."""
        sa = target.split(":") if target.startswith("system:serviceaccount:") else []
        checks = [("serviceaccounts", sa[3], sa[2])] if len(sa) == 4 else \
            [("users", target, "")]
        checks += [("groups", g, "") for g in groups]
        for resource, name, namespace in checks:
            if user.is_admin:
                break
            allowed, _ = authz.allowed_for(self.backend.store, user, verb="impersonate",
                                           resource=resource, name=name, namespace=namespace)
            if not allowed:
                raise forbidden(authz.forbidden_message(
                    user=user.username, verb="impersonate", resource=resource, name=name,
                    namespace=namespace), resource=resource, name=name)
        if len(sa) == 4:
            base = service_account_user(sa[2], sa[3])
            all_groups = tuple(dict.fromkeys([*groups, *base.groups]))
            return UserInfo(target, all_groups, service_account=base.service_account)
        return UserInfo(target, tuple(dict.fromkeys([*groups, "system:authenticated"])))

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        path = request.path.rstrip("/") or "/"
        user = self._user(request, path)
        if path in PUBLIC_PATHS:
            self._authorize_path(user, path)
            return web.Response(text="ok")
        if path in identity.DISCOVERY_PATHS and request.method == "GET":
            self._authorize_path(user, path)
            return _json_response(identity.discovery_document(self.auth, path))
        if request.method == "GET" and (path == "/version" or path == "/"
                                        or path.startswith("/openapi")
                                        or path in ("/api", "/apis")):
            self._authorize_path(user, path)
            return self._discovery(request, path)
        parts = path.strip("/").split("/")
        if parts[0] == "api" and len(parts) >= 2:
            group, version, rest = "", parts[1], parts[2:]
        elif parts[0] == "apis" and len(parts) >= 3:
            group, version, rest = parts[1], parts[2], parts[3:]
        elif parts[0] == "apis" and len(parts) == 2 and request.method == "GET":
            self._authorize_path(user, path)
            doc = discovery.api_group(self.registry, parts[1])
            if doc is None and self.aggregator is not None:
                doc = self.aggregator.group_doc(parts[1])
            if doc is None:
                raise not_found(resource="", group="", name=parts[1])
            return _json_response(doc)
        else:
            raise not_found(resource="", group="", name=path)
        route = self.aggregator.route_for(group, version) if self.aggregator else None
        if route is not None and self.aggregator is not None:
            self._authorize_proxied(user, request, path, rest)
            return await self.aggregator.proxy(request, user, route)
        if not rest:
            if request.method != "GET":
                raise method_not_allowed(f"{request.method} is not allowed on {path}")
            self._authorize_path(user, path)
            doc = discovery.resource_list(self.registry, group, version)
            if doc is None:
                raise not_found(resource="", group=group, name=version)
            return _json_response(doc)
        watch_path = rest[0] == "watch"
        if watch_path:
            rest = rest[1:]
        target = self._target(group, version, rest)
        return await self._resource(request, user, target, watch_path)

    def _discovery(self, request: web.Request, path: str) -> web.StreamResponse:
        if path == "/version":
            return _json_response(discovery.version_info(self.settings.version))
        if path in ("/api", "/apis") and discovery.wants_aggregated(
                request.headers.get("Accept", "")):
            doc = discovery.aggregated(self.registry, core=path == "/api")
            if path == "/apis" and self.aggregator is not None:
                doc = self.aggregator.merge_aggregated(doc)
            return web.Response(text=json.dumps(doc, separators=(",", ":")), headers={
                "Content-Type": discovery.AGGREGATED_CONTENT_TYPE})
        if path == "/api":
            return _json_response(discovery.api_versions())
        if path == "/apis":
            groups = discovery.api_group_list(self.registry)
            if self.aggregator is not None:
                groups = self.aggregator.merge_group_list(groups)
            return _json_response(groups)
        if path.startswith("/openapi"):
            accept = request.headers.get("Accept", "")
            aggregated = self.aggregator.resource_lists() if self.aggregator else {}
            spec = openapi.document(self.registry, path, request.query, aggregated)
            if spec is None:
                raise not_found(resource="", group="", name=path)
            if path == "/openapi/v2" and "protobuf" in accept and "json" not in accept \
                    and "*/*" not in accept:
                return web.Response(body=openapi_proto.document(spec), headers={
                    "Content-Type": openapi_proto.CONTENT_TYPE})
            return _json_response(spec)
        return _json_response({"paths": sorted({"/api", "/apis", "/version", "/openapi/v3",
                                                "/openapi/v2", "/healthz", "/livez", "/readyz"})})

    def _target(self, group: str, version: str, rest: list[str]) -> Target:
        namespace: str | None = None
        if rest[0] == "namespaces" and len(rest) >= 3:
            ns_rt = self.registry.get("", "v1", "namespaces")
            sub_of_namespace = group == "" and ns_rt is not None and len(rest) == 3 and \
                rest[2] in ns_rt.subresources
            if not sub_of_namespace:
                namespace, rest = rest[1], rest[2:]
        if len(rest) > 3:
            raise not_found(resource="", group=group, name="/".join(rest))
        rt = self.registry.get(group, version, rest[0])
        if rt is None:
            raise APIError(404, "NotFound", "the server could not find the requested resource "
                                            f"({group or 'core'}/{version}, {rest[0]})")
        if namespace is not None and not rt.namespaced:
            raise APIError(404, "NotFound", f"{rt.resource} is not namespaced")
        name = rest[1] if len(rest) > 1 else ""
        sub = rest[2] if len(rest) > 2 else ""
        if sub and sub not in rt.subresources:
            raise APIError(404, "NotFound", f"the server could not find the requested "
                                            f"resource ({rt.resource}/{sub})")
        return Target(rt, namespace, name, sub)

    # -- authorization ----------------------------------------------------------------------

    def _authorize(self, user: UserInfo, verb: str, t: Target) -> None:
        if user.is_admin:
            return
        attrs = {"verb": verb, "api_group": t.rt.group, "resource": t.rt.resource,
                 "subresource": t.subresource, "name": t.name, "namespace": t.namespace or ""}
        allowed, _ = authz.allowed_for(self.backend.store, user, **attrs)
        if not allowed:
            raise forbidden(authz.forbidden_message(user=user.username, **attrs),
                            resource=t.rt.resource, group=t.rt.group, name=t.name)

    def _authorize_proxied(self, user: UserInfo, request: web.Request, path: str,
                           rest: list[str]) -> None:
        """RBAC on a request for an aggregated API, as kube-apiserver checks it before
        proxying (the backend checks again with a SubjectAccessReview)."""
        attrs = request_attributes(request.method, rest,
                                   watch=_flag(request.query.get("watch")))
        if attrs is None:
            self._authorize_path(user, path)
            return
        parts = path.strip("/").split("/")
        if user.is_admin:
            return
        full = {**attrs, "api_group": parts[1]}
        allowed, _ = authz.allowed_for(self.backend.store, user, **full)
        if not allowed:
            raise forbidden(authz.forbidden_message(user=user.username, **full),
                            resource=full["resource"], group=parts[1], name=full["name"])

    def _authorize_path(self, user: UserInfo, path: str) -> None:
        if user.is_admin:
            return
        allowed, _ = authz.allowed_for(self.backend.store, user, verb="get", path=path)
        if not allowed:
            raise forbidden(authz.forbidden_message(user=user.username, verb="get", path=path))

    # -- RBAC escalation prevention ----------------------------------------------------------

    @staticmethod
    def _guarded(user: UserInfo, t: Target) -> bool:
        """A write to a Role, ClusterRole or binding by someone outside system:masters."""
        return (not user.is_admin and t.rt.group == escalation.RBAC_GROUP
                and t.rt.resource in escalation.GUARDED_RESOURCES)

    def _check_escalation(self, user: UserInfo, t: Target, obj: Any, *,
                          old: Obj | None) -> None:
        """403 when the object would grant what ``user`` does not hold (auth/escalation.py),
        checked on the object as asked for, before defaults, validation and admission."""
        if not self._guarded(user, t):
            return
        escalation.check_write(
            escalation.Policy.from_store(self.backend.store), user=user.username,
            groups=user.groups, resource=t.rt.resource, namespace=t.namespace or "",
            url_name=t.name, obj=obj, old=old)

    def _current_view(self, t: Target) -> Obj | None:
        try:
            return self.backend.view(t.rt, self.backend.get_stored(t.rt, t.namespace, t.name))
        except APIError as err:
            if err.code == 404:
                return None
            raise

    async def _patch_guarded(self, user: UserInfo, t: Target, content_type: str, patch: Any,
                             options: WriteOptions) -> Obj:
        """A PATCH of an RBAC object: the check needs the object the patch makes, so the
        patch is applied here and written as an update of the version it was applied to;
        when another write got in first, again (as the backend retries a patch)."""
        rt = t.rt
        for _ in range(16):
            current = self.backend.get_stored(rt, t.namespace, t.name)
            old = self.backend.view(rt, current)
            patched = self.backend._apply_patch(rt, old, content_type, patch)
            metadata = patched.get("metadata")
            wanted = metadata.get("resourceVersion") if isinstance(metadata, dict) else None
            if wanted and str(wanted) != str(current.rv):
                raise conflict(resource=rt.resource, group=rt.group, name=t.name, why=STALE)
            self._check_escalation(user, t, patched, old=old)
            if isinstance(metadata, dict) or "metadata" not in patched:
                patched["metadata"] = {**(metadata or {}), "resourceVersion": str(current.rv)}
            del options.warnings[:]  # a retried patch reports its last attempt
            try:
                return await self.backend.update(rt, t.namespace, t.name, patched,
                                                 subresource=t.subresource, options=options)
            except APIError as err:
                # A write that got in between: apply the patch to it (a resourceVersion
                # the patch itself names is then refused above, as the backend does).
                latest = self.backend.store.get(rt.group_resource, t.namespace or "", t.name)
                if err.code != 409 or latest is None or latest.rv == current.rv:
                    raise
        raise conflict(resource=rt.resource, group=rt.group, name=t.name,
                       why="too many concurrent writes, try again")

    # -- request bodies ---------------------------------------------------------------------

    async def _body(self, request: web.Request) -> Any:
        protobuf_body = request.content_type == protobuf.CONTENT_TYPE
        yaml_body = request.content_type == YAML_TYPE and request.method in ("POST", "PUT")
        if request.content_type not in ("application/json", "application/octet-stream", "",
                                        MERGE_PATCH, JSON_PATCH, STRATEGIC_PATCH) \
                and not protobuf_body and not yaml_body:
            raise unsupported_media_type(request.content_type)
        limit = self.settings.max_body_bytes
        if request.content_length is not None and request.content_length > limit:
            raise too_large(limit)
        raw = await request.read()
        if len(raw) > limit:
            raise too_large(limit)
        if not raw.strip():
            raise bad_request("the request body is empty")
        if protobuf_body:
            try:
                return protobuf.decode_request(raw)
            except protobuf.ProtobufError as err:
                raise APIError(415, "UnsupportedMediaType", str(err)) from None
        try:
            if yaml_body:
                return decoding.load_yaml(raw)
            body, duplicates = decoding.load_json(raw)
        except decoding.DecodeError as err:
            raise bad_request(str(err)) from None
        request[DUPLICATES] = tuple(duplicates)
        return body

    @staticmethod
    def _write_options(request: web.Request, user: UserInfo) -> WriteOptions:
        dry = request.query.getall("dryRun", [])
        for value in dry:
            if value != "All":
                raise bad_request(f'dryRun: Unsupported value: "{value}": supported values: '
                                  '"All"')
        validation = request.query.get("fieldValidation") or decoding.WARN
        if validation not in decoding.FIELD_VALIDATIONS:
            raise bad_request(f'fieldValidation: Unsupported value: "{validation}": supported '
                              'values: "Ignore", "Strict", "Warn"')
        options = WriteOptions(user=user, dry_run=bool(dry), field_validation=validation,
                               duplicates=request.get(DUPLICATES, ()))
        request[WRITE_WARNINGS] = options.warnings
        return options

    # -- dispatch ---------------------------------------------------------------------------

    async def _resource(self, request: web.Request, user: UserInfo, t: Target,
                        watch_path: bool) -> web.StreamResponse:
        method = request.method
        rt = t.rt
        if rt.deprecation_warning:
            request[TYPE_WARNINGS] = [rt.deprecation_warning]
        if rt.namespaced and t.namespace is None and method not in ("GET",):
            raise APIError(404, "NotFound", f"{rt.resource} is namespaced: use "
                                            f"/namespaces/NAMESPACE/{rt.resource}")
        if not t.name:
            if method == "GET":
                watching = watch_path or _flag(request.query.get("watch"))
                verb = "watch" if watching else "list"
                self._check_verb(rt, verb)
                self._authorize(user, verb, t)
                if watching:
                    return await self._watch(request, t)
                return self._list(request, t)
            if method == "POST":
                self._authorize(user, "create", t)
                return await self._create(request, user, t)
            if method == "DELETE":
                self._check_verb(rt, "deletecollection")
                self._authorize(user, "deletecollection", t)
                return await self._delete_collection(request, user, t)
            raise method_not_allowed(f"{method} is not allowed on a collection")
        if watch_path:
            self._check_verb(rt, "watch")
            self._authorize(user, "watch", t)
            return await self._watch(request, t, only_name=t.name)
        if t.subresource in ("log", "token", "binding"):
            return await self._special_subresource(request, user, t)
        if t.subresource == "portforward":
            if method not in ("GET", "POST"):
                raise method_not_allowed("only GET and POST are allowed on pods/portforward")
            self._authorize(user, "create", t)
            return await portforward.serve(
                request, stored=self.backend.get_stored(rt, t.namespace, t.name),
                namespace=t.namespace or "", pod=t.name)
        if t.subresource in ("exec", "attach"):
            if method not in ("GET", "POST"):
                raise method_not_allowed(f"only GET and POST are allowed on pods/{t.subresource}")
            self._authorize(user, "create", t)
            return await remotecommand.serve(
                request, stored=self.backend.get_stored(rt, t.namespace, t.name),
                namespace=t.namespace or "", pod=t.name, kind=t.subresource,
                provider=self.exec_provider)
        if t.subresource == "scale":
            return await self._scale(request, user, t)
        if method == "GET":
            self._check_verb(rt, "get")
            self._authorize(user, "get", t)
            stored = self.backend.get_stored(rt, t.namespace, t.name)
            if _wants_table(request):
                return _json_response(self._table([stored], rt, {
                    "resourceVersion": str(stored.rv)}, _include_object(request)))
            if _wants_metadata(request):
                return _json_response(_partial(self.backend.view(rt, stored)))
            return _raw_response(self.backend.view_raw(rt, stored))
        if method == "PUT":
            self._authorize(user, "update", t)
            body = await self._body(request)
            options = self._write_options(request, user)
            creates = rt.create_on_update and not t.subresource
            old = self._current_view(t) if creates or self._guarded(user, t) else None
            if creates and old is None:
                return await self._create_on_update(user, t, body, options)
            if self._guarded(user, t):
                self._check_escalation(user, t, body, old=old)
            obj = await self.backend.update(rt, t.namespace, t.name, body,
                                            subresource=t.subresource, options=options)
            return _json_response(obj)
        if method == "PATCH":
            self._authorize(user, "patch", t)
            content_type = request.content_type
            if content_type == APPLY_PATCH:
                raise APIError(415, "UnsupportedMediaType",
                               "server-side apply is not supported by this server; use "
                               "client-side apply (kubectl apply without --server-side)")
            if content_type not in (MERGE_PATCH, JSON_PATCH, STRATEGIC_PATCH):
                raise unsupported_media_type(content_type)
            body = await self._body(request)
            options = self._write_options(request, user)
            if self._guarded(user, t):
                obj = await self._patch_guarded(user, t, content_type, body, options)
                return _json_response(obj)
            obj = await self.backend.patch(rt, t.namespace, t.name, content_type, body,
                                           subresource=t.subresource, options=options)
            return _json_response(obj)
        if method == "DELETE":
            if t.subresource:
                raise method_not_allowed(f"DELETE is not allowed on {rt.resource}/"
                                         f"{t.subresource}")
            self._authorize(user, "delete", t)
            return await self._delete(request, user, t)
        raise method_not_allowed(f"{method} is not allowed on {rt.resource}")

    @staticmethod
    def _check_verb(rt: ResourceType, verb: str) -> None:
        if verb not in rt.verbs:
            raise method_not_allowed(f"{verb} is not supported on {rt.resource}")

    # -- create / delete ---------------------------------------------------------------------

    async def _create(self, request: web.Request, user: UserInfo, t: Target) -> web.Response:
        body = await self._body(request)
        options = self._write_options(request, user)
        if self.backend.is_review(t.rt):
            body = self.backend.check_body(t.rt, body, ns=t.namespace, name=None)
            if t.rt.resource in identity.REVIEWS:
                return _json_response(identity.review(self.auth, self.backend, t.rt.resource,
                                                      body, user), 201)
            if t.rt.resource == "selfsubjectreviews":
                return _json_response({"apiVersion": t.rt.api_version, "kind": t.rt.kind,
                                       "metadata": {"creationTimestamp": None},
                                       "status": {"userInfo": user.to_dict()}}, 201)
            requester = user if t.rt.resource == "selfsubjectaccessreviews" else None
            if t.rt.resource == "localsubjectaccessreviews":
                ra = (body.get("spec") or {}).get("resourceAttributes") or {}
                if ra.get("namespace") and ra["namespace"] != t.namespace:
                    raise bad_request("spec.resourceAttributes.namespace must match the "
                                      "namespace of the request")
            result = authz.review(self.backend.store, body, requester=requester,
                                  namespace=t.namespace if t.rt.namespaced else None)
            result.setdefault("metadata", {})["creationTimestamp"] = None
            return _json_response(result, 201)
        self._check_escalation(user, t, body, old=None)
        obj = await self.backend.create(t.rt, t.namespace, body, options)
        return _json_response(obj, 201)

    async def _create_on_update(self, user: UserInfo, t: Target, body: Any,
                                options: WriteOptions) -> web.Response:
        """A PUT that creates (upstream's AllowCreateOnUpdate kinds): the escalation
        check of a create, then, once the object is valid, ``create`` must be allowed too
        (upstream's withAuthorization on the create path of an update); 201."""
        self._check_escalation(user, t, body, old=None)
        obj = await self.backend.create_on_update(
            t.rt, t.namespace, t.name, body, options,
            authorize=lambda: self._authorize(user, "create", t))
        return _json_response(obj, 201)

    async def _delete_options(self, request: web.Request) -> Obj:
        opts: Obj = {}
        if request.can_read_body:
            raw = await request.read()
            if len(raw) > self.settings.max_body_bytes:
                raise too_large(self.settings.max_body_bytes)
            if raw.strip():
                try:
                    opts = json.loads(raw)
                except ValueError as err:
                    raise bad_request(f"the DeleteOptions body is not valid JSON: {err}") \
                        from None
                if not isinstance(opts, dict):
                    raise bad_request("DeleteOptions must be a JSON object")
        grace = _int_param(request.query, "gracePeriodSeconds")
        if grace is not None:
            opts["gracePeriodSeconds"] = grace
        if "propagationPolicy" in request.query:
            opts["propagationPolicy"] = request.query["propagationPolicy"]
        if "orphanDependents" in request.query:
            opts["orphanDependents"] = _flag(request.query["orphanDependents"])
        return opts

    async def _delete(self, request: web.Request, user: UserInfo, t: Target) -> web.Response:
        opts = await self._delete_options(request)
        obj, removed = await self.backend.delete(t.rt, t.namespace, t.name,
                                                 delete_options=opts,
                                                 options=self._write_options(request, user))
        if not removed:
            return _json_response(obj, 202 if t.rt.custom else 200)
        if t.rt.custom or t.rt.group_resource in RETURNS_DELETED_OBJECT:
            return _json_response(obj)
        return _json_response({
            "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success",
            "details": {"name": t.name, "group": t.rt.group, "kind": t.rt.resource,
                        "uid": obj["metadata"].get("uid", "")}})

    async def _delete_collection(self, request: web.Request, user: UserInfo,
                                 t: Target) -> web.Response:
        opts = await self._delete_options(request)
        options = self._write_options(request, user)
        label_sel, field_sel = self._selectors(request, t.rt)
        deleted = []
        for _, stored in self.backend.list_stored(t.rt, t.namespace):
            view = self.backend.view(t.rt, stored)
            if not matches(view, label_sel, field_sel):
                continue
            m = view["metadata"]
            try:
                obj, _ = await self.backend.delete(t.rt, m.get("namespace"), m["name"],
                                                   delete_options=opts, options=options)
            except APIError as err:
                if err.code == 404:
                    continue
                raise
            deleted.append(obj)
        return _json_response({"kind": t.rt.list_kind, "apiVersion": t.rt.api_version,
                               "metadata": {"resourceVersion": str(self.backend.store.rv)},
                               "items": deleted})

    # -- list -------------------------------------------------------------------------------

    def _selectors(self, request: web.Request, rt: ResourceType) -> tuple[Any, Any]:
        try:
            label = request.query.get("labelSelector")
            field = request.query.get("fieldSelector")
            field_sel = selectors.parse_field_selector(field) if field else None
            if field_sel is not None:
                field_sel.check_supported(selectors.selectable_fields(
                    rt.kind, rt.selectable_fields))
            return (selectors.parse_label_selector(label) if label else None, field_sel)
        except selectors.SelectorError as err:
            raise bad_request(f"invalid selector: {err}") from None

    def _list_items(self, t: Target, plan: list_options.ListPlan
                    ) -> tuple[int, list[tuple[tuple[str, str], Stored]]]:
        """The resourceVersion the list is read at and its items (sorted by key)."""
        store = self.backend.store
        current = self.backend.list_stored(t.rt, t.namespace)
        if plan.min_rv is not None and plan.min_rv > store.rv:
            raise list_options.too_large(plan.min_rv, store.rv)
        if plan.read_rv is None or plan.read_rv == store.rv:
            return store.rv, current
        if plan.read_rv > store.rv:
            raise list_options.too_large(plan.read_rv, store.rv)
        ns = t.namespace if t.rt.namespaced else None
        return plan.read_rv, self.backend.watchcache.state_at(
            plan.read_rv, gr=t.rt.group_resource, ns=ns, current=current, current_rv=store.rv)

    def _list(self, request: web.Request, t: Target) -> web.Response:
        rt = t.rt
        if self.backend.is_review(rt):
            raise method_not_allowed(f"list is not supported on {rt.resource}")
        label_sel, field_sel = self._selectors(request, t.rt)
        limit = _int_param(request.query, "limit") or 0
        if limit < 0:
            raise bad_request("limit: Invalid value: must be non-negative")
        plan = list_options.list_plan(request.query, limit=limit)
        rv, items = self._list_items(t, plan)
        start = plan.start
        selected: list[tuple[tuple[str, str], Stored]] = []
        more = False
        remaining: int | None = None
        needs_view = rt.from_storage is not None
        if label_sel is None and field_sel is None:
            first = bisect.bisect_right(items, start, key=lambda item: item[0]) \
                if start is not None else 0
            stop = first + limit if limit else len(items)
            selected = items[first:stop]
            more = stop < len(items)
            remaining = len(items) - stop if more else None
        else:
            for key, stored in items:
                if start is not None and key <= start:
                    continue
                obj = self.backend.view(rt, stored) if needs_view or field_sel else stored.obj
                if not matches(obj, label_sel, field_sel):
                    continue
                if limit and len(selected) == limit:
                    more = True
                    break
                selected.append((key, stored))
        list_meta: Obj = {"resourceVersion": str(rv)}
        if more:
            last = selected[-1][0]
            list_meta["continue"] = list_options.encode_continue(rv, *last)
            if remaining is not None:
                list_meta["remainingItemCount"] = remaining
        if _wants_table(request):
            return _json_response(self._table([s for _, s in selected], rt, list_meta,
                                              _include_object(request)))
        if _wants_metadata(request):
            return _json_response({
                "kind": "PartialObjectMetadataList", "apiVersion": "meta.k8s.io/v1",
                "metadata": list_meta,
                "items": [_partial(self.backend.view(rt, s)) for _, s in selected]})
        items_text = ",".join(self.backend.view_raw(rt, s) for _, s in selected)
        head = json.dumps({"kind": rt.list_kind, "apiVersion": rt.api_version,
                           "metadata": list_meta}, separators=(",", ":"))
        return _raw_response(head[:-1] + ',"items":[' + items_text + "]}")

    def _table(self, stored: list[Stored], rt: ResourceType, list_meta: Obj,
               include_object: str) -> Obj:
        objects = [self.backend.view(rt, s) for s in stored]
        columns = list(rt.printer_columns) if rt.printer_columns is not None else None
        try:
            table: Obj = to_table(objects, columns=columns, kind=rt.kind,
                                         list_meta=list_meta, include_object=include_object)
        except TableError as err:
            raise bad_request(str(err)) from None
        return table

    # -- watch ------------------------------------------------------------------------------

    async def _watch(self, request: web.Request, t: Target, *,
                     only_name: str = "") -> web.StreamResponse:
        label_sel, field_sel = self._selectors(request, t.rt)
        timeout = _int_param(request.query, "timeoutSeconds")
        bookmarks = _flag(request.query.get("allowWatchBookmarks"))
        plan = list_options.watch_plan(request.query, bookmarks=bookmarks)
        if plan.min_rv is not None and plan.min_rv > self.backend.store.rv:
            raise list_options.too_large(plan.min_rv, self.backend.store.rv)
        options = WatchOptions(
            resource_version=request.query.get("resourceVersion", ""),
            timeout=float(timeout) if timeout and timeout > 0 else DEFAULT_WATCH_TIMEOUT,
            bookmarks=bookmarks, send_initial_events=plan.send_initial_events,
            bookmark_interval=self.settings.bookmark_interval,
            label_selector=label_sel, field_selector=field_sel, only_name=only_name,
            table=_include_object(request) if _wants_table(request) else None)
        ns = t.namespace if t.rt.namespaced else None
        stream = WatchStream(self.backend, t.rt, ns, options, closing=self.closing,
                                   render_table=self._table, warnings=tuple(
                                       decoding.warning_header(text)
                                       for text in request.get(TYPE_WARNINGS, ())))
        return await stream.serve(request)

    # -- subresources with their own bodies ------------------------------------------------

    async def _scale(self, request: web.Request, user: UserInfo, t: Target) -> web.Response:
        method = request.method
        verb = {"GET": "get", "PUT": "update", "PATCH": "patch"}.get(method)
        if verb is None:
            raise method_not_allowed(f"{method} is not allowed on {t.rt.resource}/scale")
        self._authorize(user, verb, t)
        if method == "GET":
            return _json_response(await self.backend.scale(t.rt, t.namespace, t.name))
        content_type = request.content_type if method == "PATCH" else None
        if content_type is not None and content_type not in (MERGE_PATCH, JSON_PATCH,
                                                             STRATEGIC_PATCH):
            raise unsupported_media_type(content_type)
        body = await self._body(request)
        return _json_response(await self.backend.scale(
            t.rt, t.namespace, t.name, content_type=content_type, body=body,
            options=self._write_options(request, user)))

    async def _special_subresource(self, request: web.Request, user: UserInfo,
                                   t: Target) -> web.StreamResponse:
        if t.subresource == "log":
            if request.method != "GET":
                raise method_not_allowed("only GET is allowed on pods/log")
            self._authorize(user, "get", t)
            query = request.query
            return await subresources.pod_logs(
                request, stored=self.backend.get_stored(t.rt, t.namespace, t.name),
                namespace=t.namespace or "", pod=t.name, provider=self.log_provider,
                query={"container": query.get("container"),
                       "follow": _flag(query.get("follow")),
                       "tail_lines": _int_param(query, "tailLines"),
                       "previous": _flag(query.get("previous")),
                       "timestamps": _flag(query.get("timestamps")),
                       "since_seconds": _int_param(query, "sinceSeconds"),
                       "limit_bytes": _int_param(query, "limitBytes")})
        if request.method != "POST":
            raise method_not_allowed(f"only POST is allowed on {t.rt.resource}/"
                                     f"{t.subresource}")
        self._authorize(user, "create", t)
        body = await self._body(request)
        if not isinstance(body, dict):
            raise bad_request("the body must be a JSON object")
        if t.subresource == "token":
            sa = self.backend.get_stored(t.rt, t.namespace, t.name)
            return _json_response(identity.token_request(
                self.auth, self.backend, sa=sa.obj, body=body), 201)
        return _json_response(await subresources.bind_pod(
            self.backend, t.rt, namespace=t.namespace or "", name=t.name, body=body,
            user=user), 201)
