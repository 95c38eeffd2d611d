"""Discovery documents (/version, /api, /apis, group and group-version resource lists).

Built from the registry on every request, so CRDs appear and disappear at once. Clients
that ask for aggregated discovery (apidiscovery.k8s.io/v2, kubectl does) get every group,
version and resource in the answers to ``/api`` and ``/apis``; the others get the classic
documents and then one request per group-version.
"""

from __future__ import annotations

from typing import Any

from .registry import Registry, ResourceType

Obj = dict[str, Any]

_SUBRESOURCE_KINDS = {"token": ("authentication.k8s.io", "v1", "TokenRequest"),
                      "binding": ("", "v1", "Binding"),
                      "scale": ("autoscaling", "v1", "Scale")}
_SUBRESOURCE_VERBS = {
    "status": ["get", "patch", "update"],
    "log": ["get"],
    "exec": ["create", "get"],
    "attach": ["create", "get"],
    "portforward": ["create", "get"],
    "token": ["create"],
    "binding": ["create"],
    "finalize": ["update"],
    "scale": ["get", "patch", "update"],
}


def version_info(override: dict[str, str] | None = None) -> Obj:
    info = {"major": "1", "minor": "32", "gitVersion": "v1.32.0+localcluster",
            "gitCommit": "0000000000000000000000000000000000000000",
            "gitTreeState": "clean", "buildDate": "2026-01-01T00:00:00Z",
            "goVersion": "go1.23.0", "compiler": "gc", "platform": "linux/amd64"}
    info.update(override or {})
    return info


def api_versions() -> Obj:
    return {"kind": "APIVersions", "versions": ["v1"], "serverAddressByClientCIDRs": [
        {"clientCIDR": "0.0.0.0/0", "serverAddress": "127.0.0.1"}]}


def _group(name: str, versions: list[str]) -> Obj:
    gvs = [{"groupVersion": f"{name}/{v}", "version": v} for v in versions]
    return {"name": name, "versions": gvs, "preferredVersion": gvs[0]}


def api_group_list(registry: Registry) -> Obj:
    groups = [_group(g, vs) for g, vs in sorted(registry.groups().items()) if g and vs]
    return {"kind": "APIGroupList", "apiVersion": "v1", "groups": groups}


def api_group(registry: Registry, name: str) -> Obj | None:
    versions = registry.groups().get(name)
    if not name or not versions:
        return None
    return {"kind": "APIGroup", "apiVersion": "v1", **_group(name, versions)}


def _resource_entry(rt: ResourceType) -> Obj:
    entry: Obj = {"name": rt.resource, "singularName": rt.singular or rt.kind.lower(),
                  "namespaced": rt.namespaced, "kind": rt.kind, "verbs": list(rt.verbs)}
    if rt.short_names:
        entry["shortNames"] = list(rt.short_names)
    if rt.categories:
        entry["categories"] = list(rt.categories)
    return entry


def resource_list(registry: Registry, group: str, version: str) -> Obj | None:
    types = sorted(registry.in_group_version(group, version), key=lambda rt: rt.resource)
    if not types:
        return None
    resources: list[Obj] = []
    for rt in types:
        resources.append(_resource_entry(rt))
        for sub in rt.subresources:
            entry = {"name": f"{rt.resource}/{sub}", "singularName": "",
                     "namespaced": rt.namespaced,
                     "kind": {"token": "TokenRequest", "binding": "Binding"}.get(sub, rt.kind),
                     "verbs": _SUBRESOURCE_VERBS.get(sub, ["get"])}
            if sub in _SUBRESOURCE_KINDS:
                sub_group, sub_version, entry["kind"] = _SUBRESOURCE_KINDS[sub]
                if (sub_group, sub_version) != (group, version):
                    entry.update(group=sub_group, version=sub_version)
            resources.append(entry)
    return {"kind": "APIResourceList", "apiVersion": "v1",
            "groupVersion": f"{group}/{version}" if group else version,
            "resources": resources}


AGGREGATED_CONTENT_TYPE = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"


def wants_aggregated(accept: str) -> bool:
    """Whether the Accept header asks for apidiscovery.k8s.io/v2 before plain JSON."""
    for choice in accept.split(","):
        params = {p.strip() for p in choice.split(";")[1:]}
        if {"g=apidiscovery.k8s.io", "v=v2", "as=APIGroupDiscoveryList"} <= params:
            return True
        if choice.strip().split(";")[0] in ("application/json", "*/*"):
            return False
    return False




def _aggregated_resource(rt: ResourceType) -> Obj:
    kind = {"group": rt.group, "version": rt.version, "kind": rt.kind}
    entry: Obj = {"resource": rt.resource, "responseKind": kind,
                  "scope": "Namespaced" if rt.namespaced else "Cluster",
                  "singularResource": rt.singular or rt.kind.lower(), "verbs": list(rt.verbs)}
    if rt.short_names:
        entry["shortNames"] = list(rt.short_names)
    if rt.categories:
        entry["categories"] = list(rt.categories)
    subs = []
    for sub in rt.subresources:
        group, version, sub_kind = _SUBRESOURCE_KINDS.get(sub, (rt.group, rt.version, rt.kind))
        subs.append({"subresource": sub, "verbs": _SUBRESOURCE_VERBS.get(sub, ["get"]),
                     "responseKind": {"group": group, "version": version, "kind": sub_kind}})
    if subs:
        entry["subresources"] = subs
    return entry


def aggregated(registry: Registry, *, core: bool) -> Obj:
    """APIGroupDiscoveryList of the core group (``/api``) or of all named groups."""
    items = []
    for group, versions in sorted(registry.groups().items()):
        if bool(group) == core or not versions:
            continue
        items.append({"metadata": {"name": group, "creationTimestamp": None}, "versions": [
            {"version": v, "freshness": "Current", "resources": [
                _aggregated_resource(rt) for rt in sorted(
                    registry.in_group_version(group, v), key=lambda r: r.resource)]}
            for v in versions]})
    return {"kind": "APIGroupDiscoveryList", "apiVersion": "apidiscovery.k8s.io/v2",
            "metadata": {}, "items": items}
