"""APIService objects (``apiregistration.k8s.io/v1``): which group/versions this server
serves itself and which it proxies to a Service, as kube-aggregator decides.

Pure: the validation of an APIService, the route it makes, the built-in *local*
APIServices (one per group/version served here, as kube-apiserver registers them) and
the discovery documents of proxied group/versions (classic and aggregated v2), built
from the backend's own ``APIResourceList``. The proxying is ``aggregation/proxy.py``.
"""

from __future__ import annotations

import base64
import binascii
import re
from dataclasses import dataclass
from typing import Any

from ..errors import Cause

Obj = dict[str, Any]
GROUP = "apiregistration.k8s.io"
APISERVICE_GR = f"{GROUP}/apiservices"
LOCAL_REASON = "Local"

# groupPriorityMinimum / versionPriority of the built-in group/versions, in the spirit of
# kube-apiserver's table: the core group first, then the workload groups.
_PRIORITIES: dict[str, tuple[int, int]] = {
    "": (18000, 1), "apiregistration.k8s.io": (18000, 15), "apps": (17800, 15),
    "events.k8s.io": (17750, 15), "authentication.k8s.io": (17700, 15),
    "authorization.k8s.io": (17600, 15), "batch": (17400, 15),
    "networking.k8s.io": (17200, 15), "policy": (17100, 15),
    "rbac.authorization.k8s.io": (17000, 15), "storage.k8s.io": (16800, 15),
    "admissionregistration.k8s.io": (16700, 15), "apiextensions.k8s.io": (16700, 15),
    "scheduling.k8s.io": (16600, 15), "coordination.k8s.io": (16500, 15),
    "discovery.k8s.io": (16200, 15),
}
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


@dataclass(frozen=True)
class Route:
    """Where requests for ``/apis/<group>/<version>`` go."""

    name: str
    group: str
    version: str
    service_namespace: str
    service_name: str
    service_port: int
    ca_bundle: str
    """PEM, decoded from spec.caBundle ("" when none is given)."""
    insecure: bool


def apiservice_name(group: str, version: str) -> str:
    return f"{version}.{group}"


def route_of(obj: Obj) -> Route | None:
    """The proxy route of a (validated) APIService; None for a local one."""
    spec = obj.get("spec") or {}
    svc = spec.get("service")
    if not isinstance(svc, dict) or not svc.get("name"):
        return None
    ca = spec.get("caBundle") or ""
    return Route(name=str(obj["metadata"]["name"]), group=str(spec.get("group", "")),
                 version=str(spec.get("version", "")),
                 service_namespace=str(svc.get("namespace", "")),
                 service_name=str(svc["name"]), service_port=int(svc.get("port") or 443),
                 ca_bundle=base64.b64decode(ca).decode() if ca else "",
                 insecure=bool(spec.get("insecureSkipTLSVerify")))


def validate(obj: Obj) -> list[Cause]:
    """APIService rules of kube-aggregator's validation (the ones that decide routing)."""
    causes: list[Cause] = []
    spec = obj.get("spec")
    if not isinstance(spec, dict):
        return [Cause("FieldValueRequired", "Required value", "spec")]
    name = str((obj.get("metadata") or {}).get("name") or "")
    group, version = spec.get("group", ""), spec.get("version", "")
    if not isinstance(group, str) or (group and not _DNS_SUBDOMAIN.match(group)):
        causes.append(Cause("FieldValueInvalid", f'Invalid value: "{group}": must be a DNS '
                            "subdomain", "spec.group"))
    if not isinstance(version, str) or not version:
        causes.append(Cause("FieldValueRequired", "Required value", "spec.version"))
    elif not _DNS_LABEL.match(version):
        causes.append(Cause("FieldValueInvalid", f'Invalid value: "{version}": must be a '
                            "DNS label", "spec.version"))
    if isinstance(group, str) and isinstance(version, str) and version \
            and name != apiservice_name(group, version):
        causes.append(Cause("FieldValueInvalid", f'Invalid value: "{name}": must be '
                            f'"{apiservice_name(group, version)}" (version.group)',
                            "metadata.name"))
    for fld, low, high in (("groupPriorityMinimum", 1, 20000), ("versionPriority", 1, 1000)):
        value = spec.get(fld)
        if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
            causes.append(Cause("FieldValueInvalid", f"Invalid value: {value!r}: must be an "
                                f"integer in [{low}, {high}]", f"spec.{fld}"))
    svc = spec.get("service")
    ca = spec.get("caBundle")
    insecure = spec.get("insecureSkipTLSVerify")
    if svc is not None:
        causes += _validate_service(svc)
        if insecure and ca:
            causes.append(Cause("FieldValueInvalid", "Invalid value: may not be true if "
                                "caBundle is present", "spec.insecureSkipTLSVerify"))
    elif ca or insecure:
        causes.append(Cause("FieldValueForbidden", "Forbidden: only valid with a service "
                            "(a local APIService has no backend)", "spec.caBundle"
                            if ca else "spec.insecureSkipTLSVerify"))
    if ca:
        causes += _validate_ca(ca)
    return causes


def _validate_service(svc: Any) -> list[Cause]:
    if not isinstance(svc, dict):
        return [Cause("FieldValueInvalid", "Invalid value: must be an object", "spec.service")]
    causes = []
    for fld in ("namespace", "name"):
        value = svc.get(fld)
        if not isinstance(value, str) or not value:
            causes.append(Cause("FieldValueRequired", "Required value", f"spec.service.{fld}"))
        elif not _DNS_LABEL.match(value):
            causes.append(Cause("FieldValueInvalid", f'Invalid value: "{value}": must be a '
                                "DNS label", f"spec.service.{fld}"))
    port = svc.get("port", 443)
    if not isinstance(port, int) or isinstance(port, bool) or not 1 <= port <= 65535:
        causes.append(Cause("FieldValueInvalid", f"Invalid value: {port!r}: must be between "
                            "1 and 65535, inclusive", "spec.service.port"))
    return causes


def _validate_ca(ca: Any) -> list[Cause]:
    if not isinstance(ca, str):
        return [Cause("FieldValueInvalid", "Invalid value: must be base64 text",
                      "spec.caBundle")]
    try:
        pem = base64.b64decode(ca, validate=True).decode()
    except (binascii.Error, UnicodeDecodeError):
        return [Cause("FieldValueInvalid", "Invalid value: not valid base64",
                      "spec.caBundle")]
    if "-----BEGIN CERTIFICATE-----" not in pem:
        return [Cause("FieldValueInvalid", "Invalid value: holds no PEM certificate",
                      "spec.caBundle")]
    return []


def local_apiservices(groups: dict[str, list[str]]) -> list[Obj]:
    """One local APIService per group/version served here (``v1.`` for the core group)."""
    out = []
    for group, versions in sorted(groups.items()):
        group_prio, version_prio = _PRIORITIES.get(group, (1000, 100))
        for version in versions:
            out.append({
                "apiVersion": f"{GROUP}/v1", "kind": "APIService",
                "metadata": {"name": apiservice_name(group, version),
                             "labels": {"kube-aggregator.kubernetes.io/automanaged": "onstart"}},
                "spec": {"group": group, "version": version,
                         "groupPriorityMinimum": group_prio, "versionPriority": version_prio},
                "status": {"conditions": [available_condition(
                    status=True, reason=LOCAL_REASON, message="Local APIServices are always "
                    "available", now="")]},
            })
    return out


def available_condition(*, status: bool, reason: str, message: str, now: str) -> Obj:
    return {"type": "Available", "status": "True" if status else "False", "reason": reason,
            "message": message, "lastTransitionTime": now or None}


def with_available(obj: Obj, condition: Obj) -> Obj:
    """``obj`` with its Available condition set (the transition time kept when the status
    did not change)."""
    out = dict(obj)
    status = dict(out.get("status") or {})
    conditions = [c for c in status.get("conditions") or [] if c.get("type") != "Available"]
    old = [c for c in status.get("conditions") or [] if c.get("type") == "Available"]
    new = dict(condition)
    if old and old[0].get("status") == new["status"]:
        new["lastTransitionTime"] = old[0].get("lastTransitionTime")
    status["conditions"] = [*conditions, new]
    out["status"] = status
    return out


def is_available(obj: Obj) -> bool:
    return any(c.get("type") == "Available" and c.get("status") == "True"
               for c in (obj.get("status") or {}).get("conditions") or [])


def group_versions(objs: list[Obj]) -> dict[str, list[str]]:
    """Group -> versions of the proxied, available APIServices, the preferred version
    (highest versionPriority) first."""
    by_group: dict[str, list[tuple[int, str]]] = {}
    for obj in objs:
        spec = obj.get("spec") or {}
        if route_of(obj) is None or not is_available(obj):
            continue
        by_group.setdefault(str(spec["group"]), []).append(
            (-int(spec.get("versionPriority") or 0), str(spec["version"])))
    return {g: [v for _, v in sorted(vs)] for g, vs in by_group.items()}


def aggregated_group(group: str, versions: dict[str, Obj]) -> Obj:
    """An APIGroupDiscovery (apidiscovery.k8s.io/v2) item for a proxied group, from each
    version's APIResourceList as the backend answered it."""
    items = []
    for version, resource_list in versions.items():
        resources: dict[str, Obj] = {}
        listed = resource_list.get("resources")
        for res in listed if isinstance(listed, list) else []:
            if not isinstance(res, dict) or not isinstance(res.get("name"), str):
                continue  # a backend's malformed entry must not break discovery for all
            name = str(res.get("name", ""))
            base, _, sub = name.partition("/")
            kind = {"group": res.get("group", group), "version": res.get("version", version),
                    "kind": res.get("kind", "")}
            entry = resources.setdefault(base, {
                "resource": base, "responseKind": kind,
                "scope": "Namespaced" if res.get("namespaced") else "Cluster",
                "singularResource": res.get("singularName", ""), "verbs": []})
            if sub:
                entry.setdefault("subresources", []).append(
                    {"subresource": sub, "responseKind": kind,
                     "verbs": [str(v) for v in res.get("verbs") or [] if isinstance(v, str)]})
                continue
            entry.update({"responseKind": kind,
                          "verbs": [str(v) for v in res.get("verbs") or []
                                    if isinstance(v, str)],
                          "singularResource": res.get("singularName", "")})
            for key, out_key in (("shortNames", "shortNames"), ("categories", "categories")):
                if isinstance(res.get(key), list):
                    entry[out_key] = [str(v) for v in res[key] if isinstance(v, str)]
        items.append({"version": version, "freshness": "Current",
                      "resources": list(resources.values())})
    return {"metadata": {"name": group, "creationTimestamp": None}, "versions": items}


_COLLECTION_VERBS = {"GET": "list", "POST": "create", "DELETE": "deletecollection"}
_OBJECT_VERBS = {"GET": "get", "PUT": "update", "PATCH": "patch", "DELETE": "delete",
                 "POST": "create"}


def request_attributes(method: str, rest: list[str], *, watch: bool) -> dict[str, str] | None:
    """RBAC attributes of a request under ``/apis/<group>/<version>/`` + ``rest``, parsed
    as kube-apiserver's request info does; None when it names no resource (discovery)."""
    parts = list(rest)
    if not parts:
        return None
    if parts[0] == "watch":
        watch, parts = True, parts[1:]
    namespace = ""
    if len(parts) >= 3 and parts[0] == "namespaces":
        namespace, parts = parts[1], parts[2:]
    elif len(parts) == 2 and parts[0] == "namespaces":
        namespace = parts[1]
    if not parts:
        return None
    resource, name = parts[0], parts[1] if len(parts) > 1 else ""
    subresource = parts[2] if len(parts) > 2 else ""
    if name:
        verb = _OBJECT_VERBS.get(method, method.lower())
    else:
        verb = _COLLECTION_VERBS.get(method, method.lower())
    if watch and method == "GET":
        verb = "watch"
    return {"verb": verb, "resource": resource, "subresource": subresource, "name": name,
            "namespace": namespace}
