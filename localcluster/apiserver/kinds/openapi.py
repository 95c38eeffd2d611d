"""OpenAPI documents (``/openapi/v3``, ``/openapi/v3/<gv>``, ``/openapi/v2``): what
kubectl reads to validate on the server and to ``explain``.

kubectl (1.27+) decides how to validate ``apply``/``create`` input from ``/openapi/v3``:
when the PATCH operation of a kind accepts the ``fieldValidation`` query parameter, it
leaves validation to the server (which decodes built-in kinds against their schemas and
prunes/validates custom resources against theirs, rejecting unknown fields under
``fieldValidation=Strict``). So every served type gets its paths with that parameter.
Built-in kinds are described by Kubernetes' own definitions for the release this server
stands for (``builtin_schemas``), with everything they reference; custom resources by
their structural schema, their ``metadata`` by ObjectMeta; an aggregated API's kinds (an
APIService's group/version, from the APIResourceList its backend serves, as the
aggregator keeps it) by an object of any fields, with the paths its verbs allow, since
the backends here publish no OpenAPI of their own (kube-aggregator merges theirs).
Strategic merge patch is
deliberately not advertised: kubectl then builds it from its own compiled-in types, which
know the merge keys. Documents are cached per group/version until its types change.
"""

from __future__ import annotations

import copy
import hashlib
import json
from collections.abc import Mapping
from typing import Any

from . import builtin_schemas
from .registry import Registry, ResourceType

Obj = dict[str, Any]
Aggregated = Mapping[tuple[str, str], Obj]
"""(group, version) of an APIService -> the APIResourceList its backend serves."""

_PATCH_TYPES = ("application/json-patch+json", "application/merge-patch+json",
                "application/apply-patch+yaml")
_QUERY = ("dryRun", "fieldManager", "fieldValidation")


def aggregated_types(group: str, version: str, resources: Obj) -> tuple[ResourceType, ...]:
    """The kinds of an aggregated group/version's APIResourceList (subresources left
    out), as types without a schema."""
    out = []
    for item in resources.get("resources") or []:
        if not isinstance(item, Mapping):
            continue
        name, kind = item.get("name"), item.get("kind")
        if not isinstance(name, str) or not name or "/" in name or not isinstance(kind, str) \
                or not kind:
            continue
        verbs = tuple(v for v in item.get("verbs") or [] if isinstance(v, str))
        out.append(ResourceType(group, version, name, kind, bool(item.get("namespaced")),
                                verbs=verbs, custom=True))
    return tuple(sorted(out, key=lambda r: r.resource))


def _types(registry: Registry, aggregated: Aggregated, group: str,
           version: str) -> tuple[ResourceType, ...]:
    served = tuple(sorted(registry.in_group_version(group, version), key=lambda r: r.resource))
    if served or (group, version) not in aggregated:
        return served
    return aggregated_types(group, version, aggregated[(group, version)])


def _group_versions(registry: Registry, aggregated: Aggregated) -> list[tuple[str, str]]:
    out = [(g, v) for g, versions in registry.groups().items() for v in versions]
    return out + sorted(gv for gv in aggregated if gv not in set(out))


def _gv_path(group: str, version: str) -> str:
    return f"apis/{group}/{version}" if group else f"api/{version}"


def _builtin_name(rt: ResourceType) -> str | None:
    return None if rt.custom else builtin_schemas.definition_name(rt.group, rt.version,
                                                                   rt.kind)


def _schema_name(rt: ResourceType) -> str:
    builtin = _builtin_name(rt)
    if builtin is not None:
        return builtin
    group = ".".join(reversed(rt.group.split("."))) if rt.group else "io.k8s.api.core"
    return f"{group}.{rt.version}.{rt.kind}"


def _gvk(rt: ResourceType) -> Obj:
    return {"group": rt.group, "version": rt.version, "kind": rt.kind}


def _component(rt: ResourceType, prefix: str) -> Obj:
    if rt.schema is not None:
        body = copy.deepcopy(rt.schema)
        props = body.setdefault("properties", {})
        props.setdefault("apiVersion", {"type": "string"})
        props.setdefault("kind", {"type": "string"})
        props["metadata"] = {"allOf": [{"$ref": prefix + builtin_schemas.OBJECT_META}],
                             "description": "Standard object's metadata."}
    else:
        body = {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
    body["x-kubernetes-group-version-kind"] = [_gvk(rt)]
    return body


def _operation(rt: ResourceType, action: str, *, with_body: bool, patch: bool = False) -> Obj:
    ref = {"$ref": f"#/components/schemas/{_schema_name(rt)}"}
    op: Obj = {
        "operationId": f"{action}{rt.kind}",
        "x-kubernetes-action": action,
        "x-kubernetes-group-version-kind": _gvk(rt),
        "parameters": [{"name": q, "in": "query", "schema": {"type": "string",
                                                             "uniqueItems": True}}
                       for q in _QUERY] if with_body else [],
        "responses": {"200": {"description": "OK",
                              "content": {"application/json": {"schema": ref}}}},
    }
    if with_body:
        types = _PATCH_TYPES if patch else ("application/json",)
        op["requestBody"] = {"content": {t: {"schema": ref if not patch else {
            "type": "object"}} for t in types}, "required": True}
    return op


def _paths(rt: ResourceType) -> dict[str, Obj]:
    base = "/" + _gv_path(rt.group, rt.version)
    collection = f"{base}/namespaces/{{namespace}}/{rt.resource}" if rt.namespaced \
        else f"{base}/{rt.resource}"
    paths: dict[str, Obj] = {}
    coll: Obj = {}
    if "list" in rt.verbs:
        coll["get"] = _operation(rt, "list", with_body=False)
    if "create" in rt.verbs:
        coll["post"] = _operation(rt, "post", with_body=True)
    paths[collection] = coll
    if "get" in rt.verbs:
        paths[collection + "/{name}"] = {
            "get": _operation(rt, "get", with_body=False),
            "put": _operation(rt, "put", with_body=True),
            "patch": _operation(rt, "patch", with_body=True, patch=True),
            "delete": _operation(rt, "delete", with_body=False),
        }
    for sub in rt.subresources:
        if sub == "status":
            paths[collection + "/{name}/status"] = {
                "get": _operation(rt, "get", with_body=False),
                "put": _operation(rt, "put", with_body=True),
                "patch": _operation(rt, "patch", with_body=True, patch=True),
            }
    return paths


_TITLE = {"title": "Kubernetes", "version": f"{builtin_schemas.KUBERNETES_VERSION}+localcluster"}
_V3_PREFIX = "#/components/schemas/"
_V2_PREFIX = "#/definitions/"


def _schemas(types: list[ResourceType], *, v2: bool) -> dict[str, Obj]:
    """Component schemas of ``types``: built-ins' definitions with all they reference."""
    prefix = _V2_PREFIX if v2 else _V3_PREFIX
    builtin = [n for n in (_builtin_name(rt) for rt in types) if n is not None]
    if any(rt.schema is not None for rt in types):
        builtin.append(builtin_schemas.OBJECT_META)
    schemas = builtin_schemas.referenced(builtin, v2=v2)
    for rt in types:
        if _builtin_name(rt) is None:
            schemas[_schema_name(rt)] = _component(rt, prefix)
    return schemas


# (group, version) -> (the types it was made from, the document, its digest)
_cache: dict[tuple[str, str], tuple[tuple[ResourceType, ...], Obj, str]] = {}


def _cached(registry: Registry, group: str, version: str,
            aggregated: Aggregated) -> tuple[Obj, str] | None:
    types = _types(registry, aggregated, group, version)
    if not types:
        _cache.pop((group, version), None)
        return None
    hit = _cache.get((group, version))
    if hit is not None and len(hit[0]) == len(types) and all(
            a is b or (a == b and a.schema is None and b.schema is None)
            for a, b in zip(hit[0], types, strict=True)):
        return hit[1], hit[2]
    paths: dict[str, Obj] = {}
    for rt in types:
        paths.update(_paths(rt))
    doc = {"openapi": "3.0.0", "info": dict(_TITLE), "paths": paths,
           "components": {"schemas": _schemas(list(types), v2=False)}}
    digest = hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()[:32]
    _cache[(group, version)] = (types, doc, digest)
    return doc, digest


def group_version_document(registry: Registry, group: str, version: str,
                           aggregated: Aggregated | None = None) -> Obj | None:
    """The v3 document of one group/version (shared: callers must not modify it)."""
    hit = _cached(registry, group, version, aggregated or {})
    return hit[0] if hit is not None else None


def _v2_operation(op: Obj, rt: ResourceType) -> Obj:
    ref = {"$ref": _V2_PREFIX + _schema_name(rt)}
    out: Obj = {k: op[k] for k in ("operationId", "x-kubernetes-action",
                                   "x-kubernetes-group-version-kind")}
    out["consumes"] = list(op["requestBody"]["content"]) if "requestBody" in op else ["*/*"]
    out["produces"] = ["application/json", "application/yaml"]
    params: list[Obj] = [{"name": p["name"], "in": "query", "type": "string",
                          "uniqueItems": True} for p in op["parameters"]]
    if "requestBody" in op:
        body_schema = ref if op["x-kubernetes-action"] != "patch" else {"type": "object"}
        params.append({"name": "body", "in": "body", "required": True,
                       "schema": body_schema})
    out["parameters"] = params
    out["responses"] = {"200": {"description": "OK", "schema": ref}}
    return out


def swagger_v2(registry: Registry, aggregated: Aggregated | None = None) -> Obj:
    """``/openapi/v2``: every served type, in the Swagger 2.0 form older clients read."""
    paths: dict[str, Obj] = {}
    types: list[ResourceType] = []
    for group, version in _group_versions(registry, aggregated or {}):
        for rt in _types(registry, aggregated or {}, group, version):
            types.append(rt)
            for path, ops in _paths(rt).items():
                paths[path] = {verb: _v2_operation(op, rt) for verb, op in ops.items()}
    return {"swagger": "2.0", "info": dict(_TITLE), "paths": paths,
            "definitions": _schemas(types, v2=True)}


def document(registry: Registry, path: str, query: Mapping[str, str],
             aggregated: Aggregated | None = None) -> Obj | None:
    """The document at ``path`` (``/openapi/v3`` or ``/openapi/v3/<gv>``), or None."""
    del query
    aggregated = aggregated or {}
    parts = path.strip("/").split("/")
    if parts == ["openapi", "v2"]:
        return swagger_v2(registry, aggregated)
    if parts[:2] != ["openapi", "v3"]:
        return None
    if len(parts) == 2:
        index: dict[str, Obj] = {}
        for group, version in _group_versions(registry, aggregated):
            hit = _cached(registry, group, version, aggregated)
            if hit is None:
                continue
            gv = _gv_path(group, version)
            index[gv] = {"serverRelativeURL": f"/openapi/v3/{gv}?hash={hit[1]}"}
        return {"paths": index}
    rest = parts[2:]
    if rest[0] == "api" and len(rest) == 2:
        return group_version_document(registry, "", rest[1], aggregated)
    if rest[0] == "apis" and len(rest) == 3:
        return group_version_document(registry, rest[1], rest[2], aggregated)
    return None
