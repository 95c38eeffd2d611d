"""OpenAPI v3 documents: enough for kubectl to validate on the server and to explain.

kubectl (1.27+) decides how to validate ``apply``/``create`` input from ``/openapi/v3``:
when the PATCH operation of a kind accepts the ``fieldValidation`` query parameter, it
leaves validation to the server (which prunes/validates custom resources against their
schema and rejects unknown fields under ``fieldValidation=Strict``). So every served type
gets its paths with that parameter; custom resources get their structural schema as the
component schema (``kubectl explain``); built-in kinds get an open object schema.
Strategic merge patch is deliberately not advertised: kubectl then builds it from its
own compiled-in types, which know the merge keys.
"""

from __future__ import annotations

import copy
import hashlib
import json
from collections.abc import Mapping
from typing import Any

from .registry import Registry, ResourceType

Obj = dict[str, Any]

_PATCH_TYPES = ("application/json-patch+json", "application/merge-patch+json",
                "application/apply-patch+yaml")
_QUERY = ("dryRun", "fieldManager", "fieldValidation")


def _gv_path(group: str, version: str) -> str:
    return f"apis/{group}/{version}" if group else f"api/{version}"


def _schema_name(rt: ResourceType) -> str:
    group = ".".join(reversed(rt.group.split("."))) if rt.group else "io.k8s.api.core"
    return f"{group}.{rt.version}.{rt.kind}"


def _gvk(rt: ResourceType) -> Obj:
    return {"group": rt.group, "version": rt.version, "kind": rt.kind}


def _component(rt: ResourceType) -> Obj:
    if rt.schema is not None:
        body = copy.deepcopy(rt.schema)
        props = body.setdefault("properties", {})
        props.setdefault("apiVersion", {"type": "string"})
        props.setdefault("kind", {"type": "string"})
        props["metadata"] = {"type": "object"}
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


def group_version_document(registry: Registry, group: str, version: str) -> Obj | None:
    types = registry.in_group_version(group, version)
    if not types:
        return None
    paths: dict[str, Obj] = {}
    schemas: dict[str, Obj] = {}
    for rt in sorted(types, key=lambda r: r.resource):
        paths.update(_paths(rt))
        schemas[_schema_name(rt)] = _component(rt)
    return {"openapi": "3.0.0",
            "info": {"title": "Kubernetes", "version": "v1.32.0+localcluster"},
            "paths": paths, "components": {"schemas": schemas}}


def document(registry: Registry, path: str, query: Mapping[str, str]) -> Obj | None:
    """The document at ``path`` (``/openapi/v3`` or ``/openapi/v3/<gv>``), or None."""
    parts = path.strip("/").split("/")
    if parts[:2] != ["openapi", "v3"]:
        return None
    if len(parts) == 2:
        index: dict[str, Obj] = {}
        for group, versions in registry.groups().items():
            for version in versions:
                doc = group_version_document(registry, group, version)
                digest = hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()
                gv = _gv_path(group, version)
                index[gv] = {"serverRelativeURL": f"/openapi/v3/{gv}?hash={digest[:32]}"}
        return {"paths": index}
    rest = parts[2:]
    if rest[0] == "api" and len(rest) == 2:
        return group_version_document(registry, "", rest[1])
    if rest[0] == "apis" and len(rest) == 3:
        return group_version_document(registry, rest[1], rest[2])
    return None
