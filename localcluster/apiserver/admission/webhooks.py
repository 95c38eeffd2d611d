"""Calling the registered admission webhooks before a write, as kube-apiserver does.

The webhook protocol itself (rules, selectors, failurePolicy, HTTPS calls, patches) is
``review.admit``; this module builds the AdmissionReview request for one write from
the store's view of the world (the Mutating/ValidatingWebhookConfigurations, the labels
of the namespace) and turns Service references into addresses. A Service is resolved by
the resolver given to ``APIServer.set_service_resolver`` in a worker thread, so it may
block (even on a request to this server); without one, from the stored Endpoints.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable
from typing import Any

from ..auth.authn import UserInfo
from ..errors import APIError, not_found
from ..kinds.registry import ResourceType
from ..storage.store import Store
from . import review

Obj = dict[str, Any]
ServiceResolver = Callable[[str, str, int], tuple[str, int]]
ServiceKey = tuple[str, str, int]

NS_GR = "/namespaces"
MUTATING_GR = "admissionregistration.k8s.io/mutatingwebhookconfigurations"
VALIDATING_GR = "admissionregistration.k8s.io/validatingwebhookconfigurations"


class WebhookCaller:
    def __init__(self, store: Store) -> None:
        self.store = store
        self.resolver: ServiceResolver | None = None

    def resolve_from_store(self, namespace: str, name: str, port: int) -> tuple[str, int]:
        """A webhook's Service -> (address, port): the first ready address of its Endpoints
        (pods here are local processes on 127.x addresses), else 127.0.0.1:targetPort."""
        svc = self.store.get("/services", namespace, name)
        if svc is None:
            raise not_found(resource="services", group="", name=name)
        svc_port: Obj = {}
        for p in (svc.obj.get("spec") or {}).get("ports") or []:
            if int(p.get("port", 0)) == port:
                svc_port = p
        endpoints = self.store.get("/endpoints", namespace, name)
        for subset in (endpoints.obj.get("subsets") or []) if endpoints else []:
            addresses = subset.get("addresses") or []
            ports = subset.get("ports") or []
            if not addresses or not ports:
                continue
            chosen = [p for p in ports if p.get("name", "") == svc_port.get("name", "")]
            if chosen or len(ports) == 1:
                return str(addresses[0]["ip"]), int((chosen or ports)[0]["port"])
        target = svc_port.get("targetPort", port)
        return "127.0.0.1", int(target) if isinstance(target, int) else port

    async def _resolve_all(self, configs: list[Obj]) -> dict[ServiceKey, tuple[str, int]
                                                             | Exception]:
        """Resolve every Service-backed webhook with the external resolver, off the loop."""
        resolver = self.resolver
        wanted: set[ServiceKey] = set()
        for config in configs:
            for hook in config.get("webhooks") or []:
                svc = (hook.get("clientConfig") or {}).get("service")
                if isinstance(svc, dict) and svc.get("name"):
                    wanted.add((str(svc.get("namespace", "")), str(svc["name"]),
                                int(svc.get("port") or 443)))
        out: dict[ServiceKey, tuple[str, int] | Exception] = {}
        if resolver is None:
            return out
        loop = asyncio.get_running_loop()
        for key in wanted:
            try:
                out[key] = await loop.run_in_executor(None, resolver, *key)
            except Exception as err:
                out[key] = err
        return out

    def _namespace_labels(self, rt: ResourceType, ns: str | None, name: str,
                          obj: Obj | None, old: Obj | None) -> dict[str, str] | None:
        if ns:
            stored = self.store.get(NS_GR, "", ns)
            labels = dict((stored.obj["metadata"].get("labels") or {}) if stored else {})
            labels.setdefault("kubernetes.io/metadata.name", ns)
            return labels
        if rt.group_resource == NS_GR:
            source = obj if obj is not None else old
            labels = dict(((source or {}).get("metadata") or {}).get("labels") or {})
            labels.setdefault("kubernetes.io/metadata.name", name)
            return labels
        return None

    async def admit(self, rt: ResourceType, operation: str, *, ns: str | None, name: str,
                    obj: Obj | None, old: Obj | None, user: UserInfo, dry_run: bool,
                    subresource: str = "") -> Obj | None:
        """The object to store after the webhooks (mutated or not); raises APIError when
        one denies the write or a ``Fail`` webhook cannot be reached."""
        if rt.group == "admissionregistration.k8s.io":
            return obj  # webhooks never intercept their own configuration
        mutating = [s.obj for _, s in self.store.items(MUTATING_GR)]
        validating = [s.obj for _, s in self.store.items(VALIDATING_GR)]
        if not mutating and not validating:
            return obj
        gvk = {"group": rt.group, "version": rt.version, "kind": rt.kind}
        gvr = {"group": rt.group, "version": rt.version, "resource": rt.resource}
        request: Obj = {
            "uid": str(uuid.uuid4()), "kind": gvk, "resource": gvr, "requestKind": gvk,
            "requestResource": gvr, "name": name, "operation": operation,
            "userInfo": user.to_dict(), "oldObject": old, "dryRun": dry_run, "options": None,
        }
        if subresource:
            request["subResource"] = request["requestSubResource"] = subresource
        if ns:
            request["namespace"] = ns
        resolved = await self._resolve_all([*mutating, *validating])

        def resolve(namespace: str, svc: str, port: int) -> tuple[str, int]:
            answer = resolved.get((namespace, svc, port))
            if answer is None:
                return self.resolve_from_store(namespace, svc, port)
            if isinstance(answer, Exception):
                raise answer
            return answer

        try:
            return await review.admit(
                mutating=mutating, validating=validating, request=request, obj=obj,
                resolve_service=resolve,
                namespace_labels=self._namespace_labels(rt, ns, name, obj, old))
        except review.AdmissionDenied as err:
            raise APIError(err.code, err.reason or "InternalError", err.message, name=name,
                           group=rt.group, kind=rt.resource) from err
