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
from dataclasses import replace
from typing import Any

from ..auth.authn import UserInfo
from ..errors import APIError, Cause, not_found
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

    def namespace_labels(self, rt: ResourceType, ns: str | None, name: str,
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

    async def start(self, rt: ResourceType, operation: str, *, ns: str | None, name: str,
                    old: Obj | None, user: UserInfo, dry_run: bool, subresource: str = "",
                    warnings: list[str] | None = None) -> Admission:
        """One write's admission: :meth:`Admission.mutate` before the object is
        validated, :meth:`Admission.validate` after, as kube-apiserver orders them."""
        if rt.group == "admissionregistration.k8s.io":
            return Admission(self, rt, None, ns=ns, name=name, old=old)  # never intercepted
        mutating = [s.obj for _, s in self.store.items(MUTATING_GR)]
        validating = [s.obj for _, s in self.store.items(VALIDATING_GR)]
        if not mutating and not validating:
            return Admission(self, rt, None, ns=ns, name=name, old=old)
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

        call = review.Call(mutating, validating, request, resolve, warnings=warnings)
        return Admission(self, rt, call, ns=ns, name=name, old=old)

    async def admit(self, rt: ResourceType, operation: str, *, ns: str | None, name: str,
                    obj: Obj | None, old: Obj | None, user: UserInfo, dry_run: bool,
                    subresource: str = "", warnings: list[str] | None = None) -> Obj | None:
        """Both phases with nothing between them (a DELETE); the object to store."""
        admission = await self.start(rt, operation, ns=ns, name=name, old=old, user=user,
                                     dry_run=dry_run, subresource=subresource,
                                     warnings=warnings)
        obj = await admission.mutate(obj)
        await admission.validate(obj)
        return obj


class Admission:
    """The webhooks of one write, in two phases; a denial raises :class:`APIError` with
    the webhook's Status (``denial_error``)."""

    def __init__(self, caller: WebhookCaller, rt: ResourceType, call: review.Call | None, *,
                 ns: str | None, name: str, old: Obj | None) -> None:
        self.caller, self.rt, self.call = caller, rt, call
        self.ns, self.name, self.old = ns, name, old

    def _call(self, obj: Obj | None) -> review.Call:
        assert self.call is not None
        labels = self.caller.namespace_labels(self.rt, self.ns, self.name, obj, self.old)
        return replace(self.call, namespace_labels=labels)

    async def mutate(self, obj: Obj | None, *,
                     redefault: review.Redefault | None = None) -> Obj | None:
        if self.call is None:
            return obj
        try:
            return await review.mutate(self._call(obj), obj, redefault=redefault)
        except review.AdmissionDenied as err:
            raise denial_error(err, self.rt, self.name) from err

    async def validate(self, obj: Obj | None) -> None:
        if self.call is None:
            return
        try:
            await review.validate(self._call(obj), obj)
        except review.AdmissionDenied as err:
            raise denial_error(err, self.rt, self.name) from err


def denial_error(err: review.AdmissionDenied, rt: ResourceType, name: str) -> APIError:
    """The Status a client gets: a webhook's denial with the details it sent (causes,
    name, kind…, nothing of this server's), this server's own refusals naming the
    object."""
    if err.details is None:
        return APIError(err.code, err.reason or "InternalError", err.message, name=name,
                        group=rt.group, kind=rt.resource)
    details = err.details
    retry = details.get("retryAfterSeconds")
    return APIError(
        err.code, err.reason, err.message, name=str(details.get("name") or ""),
        group=str(details.get("group") or ""), kind=str(details.get("kind") or ""),
        causes=[Cause(c.get("reason", ""), c.get("message", ""), c.get("field", ""))
                for c in details.get("causes") or []],
        retry_after=retry if isinstance(retry, int) and not isinstance(retry, bool) else 0,
        status=err.status)
