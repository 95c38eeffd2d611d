"""Which pods back a Service, and on which ports (pure).

Endpoints list the ready pods matched by the Service's selector; a ``targetPort`` is a
number or the name of a container port. This is also what "resolving" a Service means
here: there is no proxy, so a client that needs ``<service>:<port>`` (the API server
calling an admission webhook) is given the first ready endpoint's address and port.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

Obj = Mapping[str, Any]


def matches(selector: Mapping[str, str], labels: Mapping[str, str]) -> bool:
    return bool(selector) and all(labels.get(k) == v for k, v in selector.items())


def pod_ready(pod: Obj) -> bool:
    st = pod.get("status") or {}
    if st.get("phase") != "Running" or not st.get("podIP"):
        return False
    if (pod.get("metadata") or {}).get("deletionTimestamp"):
        return False
    return any(c.get("type") == "Ready" and c.get("status") == "True"
               for c in st.get("conditions") or [])


def target_port(pod: Obj, port: Mapping[str, Any]) -> int | None:
    target = port.get("targetPort", port.get("port"))
    if isinstance(target, int):
        return target
    if isinstance(target, str) and target.isdigit():
        return int(target)
    for c in (pod.get("spec") or {}).get("containers") or []:
        for p in c.get("ports") or []:
            if p.get("name") == target:
                return int(p["containerPort"])
    return None


def endpoints_for(service: Obj, pods: Sequence[Obj]) -> dict[str, Any]:
    """The Endpoints object of ``service`` given the pods of its namespace."""
    meta = service.get("metadata") or {}
    spec = service.get("spec") or {}
    selector = spec.get("selector") or {}
    subsets = []
    for port in spec.get("ports") or []:
        addresses: list[dict[str, Any]] = []
        not_ready: list[dict[str, Any]] = []
        resolved = None
        for pod in sorted(pods, key=lambda p: (p.get("metadata") or {}).get("name", "")):
            pmeta = pod.get("metadata") or {}
            if not matches(selector, pmeta.get("labels") or {}):
                continue
            tp = target_port(pod, port)
            if tp is None:
                continue
            resolved = tp
            addr = {"ip": (pod.get("status") or {}).get("podIP") or "",
                    "nodeName": (pod.get("spec") or {}).get("nodeName"),
                    "targetRef": {"kind": "Pod", "name": pmeta.get("name"),
                                  "namespace": pmeta.get("namespace"), "uid": pmeta.get("uid")}}
            (addresses if pod_ready(pod) else not_ready).append(addr)
        if resolved is None:
            continue
        subset: dict[str, Any] = {"ports": [{"name": port.get("name", ""), "port": resolved,
                                             "protocol": port.get("protocol", "TCP")}]}
        if addresses:
            subset["addresses"] = addresses
        if [a for a in not_ready if a["ip"]]:
            subset["notReadyAddresses"] = [a for a in not_ready if a["ip"]]
        if addresses or subset.get("notReadyAddresses"):
            subsets.append(subset)
    return {"apiVersion": "v1", "kind": "Endpoints",
            "metadata": {"name": meta.get("name"), "namespace": meta.get("namespace"),
                         "labels": dict(meta.get("labels") or {})},
            "subsets": subsets}


def resolve(service: Obj, pods: Sequence[Obj], port: int) -> tuple[str, int] | None:
    """A ready endpoint (address, port) for ``service:port``, or None."""
    for p in (service.get("spec") or {}).get("ports") or []:
        if int(p.get("port", 0)) != port:
            continue
        for pod in sorted(pods, key=lambda p: (p.get("metadata") or {}).get("name", "")):
            if matches((service.get("spec") or {}).get("selector") or {},
                       (pod.get("metadata") or {}).get("labels") or {}) and pod_ready(pod):
                tp = target_port(pod, p)
                if tp is not None:
                    return (pod["status"]["podIP"], tp)
    return None
