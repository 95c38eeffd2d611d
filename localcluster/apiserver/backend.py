"""The verbs on stored objects, independent of HTTP: what a request does to the store.

``handlers.py`` turns HTTP requests into calls here; ``controllers.py`` (garbage
collector, namespace and CRD cleanup) calls the internal helpers directly. The steps of a
write (decode, defaults, validation, admission, storage) are listed, in order, in
``write_path.py``; the verbs here run them. Everything runs on the server's event loop:
reading, deciding and writing an object happen without an ``await`` in between, so
optimistic concurrency needs no lock. The only awaits are admission webhooks
(``admission/webhooks.py``), after which the stored resourceVersion is checked again.
"""

from __future__ import annotations

import copy
import datetime
import json
import logging
import uuid
from collections.abc import Callable
from typing import Any

from . import audit, write_path
from .admission import podsecurity
from .admission.webhooks import Admission, WebhookCaller
from .errors import (
    STALE,
    APIError,
    Cause,
    already_exists,
    bad_request,
    conflict,
    forbidden,
    invalid,
    method_not_allowed,
    not_found,
    unsupported_media_type,
)
from .kinds import scale
from .kinds.builtin_types import REVIEW_RESOURCES
from .kinds.registry import Registry, ResourceType
from .patch import jsonpatch
from .rules import crds, defaults, deletion, gc, meta
from .rules.crds import CRD_GR
from .rules.names import generated_name
from .storage.store import Event, Store, Stored
from .storage.watchcache import WatchCache
from .write_path import WriteOptions

logger = logging.getLogger(__name__)

Obj = dict[str, Any]
NS_GR = "/namespaces"
SA_GR = "/serviceaccounts"

MERGE_PATCH = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"
STRATEGIC_PATCH = "application/strategic-merge-patch+json"
APPLY_PATCH = "application/apply-patch+yaml"

# The options of a write the server makes itself (admin, fieldValidation Ignore: it
# collects no warnings). Module-level since WriteOptions now lives in write_path.
_INTERNAL_WRITE = WriteOptions()


def _warn(options: WriteOptions, texts: list[str]) -> None:
    """Warnings for the request's answer; an internal write (the shared default options)
    has no answer to carry them, and must not collect them."""
    if options is not _INTERNAL_WRITE:
        options.warnings.extend(texts)


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


class Backend:
    def __init__(self, *, store: Store, registry: Registry, watchcache: WatchCache) -> None:
        self.store = store
        self.registry = registry
        self.watchcache = watchcache
        self.clock: Callable[[], datetime.datetime] = _now
        self.webhooks = WebhookCaller(store)
        self.audit: audit.AuditLog | None = None
        """Where admission's audit annotations go (the server's audit.log)."""
        # ownerReference index: owner uid -> keys of its dependents; uid -> key.
        self._dependents: dict[str, set[tuple[str, str, str]]] = {}
        self._uids: dict[str, tuple[str, str, str]] = {}
        self._listeners: list[Callable[[Event], None]] = []
        for gr, stored in store.all():
            self._index(gr, None, stored.obj)

    # -- bookkeeping ------------------------------------------------------------------------

    def add_listener(self, listener: Callable[[Event], None]) -> None:
        self._listeners.append(listener)

    def _index(self, gr: str, old: Obj | None, new: Obj | None) -> None:
        for obj, add in ((old, False), (new, True)):
            if obj is None:
                continue
            m = obj["metadata"]
            key = (gr, m.get("namespace", ""), m["name"])
            uid = m.get("uid")
            if uid:
                if add:
                    self._uids[uid] = key
                else:
                    self._uids.pop(uid, None)
            for owner in gc.owner_uids(obj):
                deps = self._dependents.setdefault(owner, set())
                if add:
                    deps.add(key)
                else:
                    deps.discard(key)
                    if not deps:
                        del self._dependents[owner]

    def uid_alive(self, uid: str) -> bool:
        return uid in self._uids

    def dependents_of(self, uid: str) -> list[tuple[str, str, str]]:
        return sorted(self._dependents.get(uid, ()))

    def _emit(self, event: Event) -> None:
        self.watchcache.append(event)
        for listener in self._listeners:
            try:
                listener(event)
            except Exception:  # a listener must never fail a write
                logger.exception("watch listener failed on %s", event.type)

    def _commit(self, gr: str, ns: str, name: str, new: Obj, previous: Obj | None) -> Stored:
        """Store ``new`` (or remove it when its deletion is complete) and fan the event out."""
        if previous is not None and meta.ready_to_remove(new):
            event = self.store.remove(gr, ns, name, new)
            self._index(gr, previous, None)
        else:
            event = self.store.put(gr, ns, name, new, previous=previous)
            self._index(gr, previous, new)
        self._emit(event)
        return event.stored

    # -- views ------------------------------------------------------------------------------

    @staticmethod
    def _key(rt: ResourceType, ns: str | None, name: str) -> tuple[str, str, str]:
        return rt.group_resource, (ns or "") if rt.namespaced else "", name

    def view(self, rt: ResourceType, stored: Stored) -> Obj:
        """The stored object as the client's version of ``rt`` shows it (a fresh copy)."""
        obj = stored.copy()
        if rt.from_storage is not None:
            obj = rt.from_storage(obj)
        obj["apiVersion"] = rt.api_version
        obj["kind"] = rt.kind
        return obj

    def view_raw(self, rt: ResourceType, stored: Stored) -> str:
        """Like :meth:`view` as JSON text; no copy when the stored shape already fits."""
        if rt.from_storage is None and stored.obj.get("apiVersion") == rt.api_version \
                and stored.obj.get("kind") == rt.kind:
            return stored.raw
        return json.dumps(self.view(rt, stored), separators=(",", ":"))

    def _to_storage(self, rt: ResourceType, obj: Obj) -> Obj:
        return rt.to_storage(obj) if rt.to_storage is not None else obj

    # -- reads ------------------------------------------------------------------------------

    def get_stored(self, rt: ResourceType, ns: str | None, name: str) -> Stored:
        stored = self.store.get(*self._key(rt, ns, name))
        if stored is None:
            raise not_found(resource=rt.resource, group=rt.group, name=name)
        return stored

    def list_stored(self, rt: ResourceType, ns: str | None) -> list[tuple[tuple[str, str], Stored]]:
        return self.store.items(rt.group_resource, ns if rt.namespaced else None)

    def namespace_check(self, ns: str, *, creating: bool) -> None:
        stored = self.store.get(NS_GR, "", ns)
        if stored is None:
            raise not_found(resource="namespaces", group="", name=ns)
        if creating and stored.obj["metadata"].get("deletionTimestamp"):
            raise forbidden(f"unable to create new content in namespace {ns} because it is "
                            "being terminated", resource="namespaces", name=ns)

    # -- body checks ------------------------------------------------------------------------

    @staticmethod
    def check_body(rt: ResourceType, body: Any, *, ns: str | None, name: str | None) -> Obj:
        if not isinstance(body, dict):
            raise bad_request(f"the body of the request must be a JSON object describing a "
                              f"{rt.kind}, got {type(body).__name__}")
        kind = body.get("kind")
        if kind is not None and kind != rt.kind:
            raise bad_request(f"the kind in the data ({kind}) does not match the expected "
                              f"kind ({rt.kind}) for {rt.resource}")
        api_version = body.get("apiVersion")
        if api_version is not None and api_version != rt.api_version:
            raise bad_request(f"the API version in the data ({api_version}) does not match the "
                              f"expected API version ({rt.api_version})")
        metadata = body.get("metadata")
        if metadata is None:  # null is an empty ObjectMeta, as Go decodes it
            metadata = {}
        if not isinstance(metadata, dict):
            raise bad_request("metadata must be an object")
        if rt.namespaced and ns is not None:
            body_ns = metadata.get("namespace")
            if body_ns and body_ns != ns:
                raise bad_request("the namespace of the provided object does not match the "
                                  "namespace sent on the request")
        if name is not None and metadata.get("name") and metadata["name"] != name:
            raise bad_request(f"the name of the object ({metadata['name']}) does not match "
                              f"the name on the URL ({name})")
        out: Obj = dict(body)
        if "metadata" in out:
            out["metadata"] = metadata
        out["apiVersion"] = rt.api_version
        out["kind"] = rt.kind
        return out

    async def _admission(self, rt: ResourceType, operation: str, *, ns: str | None,
                         name: str, old: Obj | None, options: WriteOptions,
                         subresource: str = "") -> Admission:
        return await self.webhooks.start(rt, operation, ns=ns, name=name, old=old,
                                         user=options.user, dry_run=options.dry_run,
                                         subresource=subresource, warnings=options.warnings)

    def _pod_security(self, rt: ResourceType, operation: str, *, ns: str | None, name: str,
                      obj: Obj | None, old: Obj | None, options: WriteOptions,
                      subresource: str) -> None:
        """The PodSecurity admission plugin (admission/podsecurity.py): namespaces'
        labels, pods, pod templates. A built-in validating plugin, as upstream's: after
        the mutating webhooks and validation, before the validating webhooks."""
        if obj is None:
            return
        gr = rt.group_resource
        if gr == "/namespaces":
            if subresource:
                return
            labels = (obj.get("metadata") or {}).get("labels")
            old_labels = ((old or {}).get("metadata") or {}).get("labels")
            causes = podsecurity.namespace_causes(labels, old_labels,
                                                  creating=operation == "CREATE")
            if causes:
                raise invalid(kind="Namespace", group="", name=name, causes=causes)
            if operation == "UPDATE":
                pods = [stored.obj for _, stored in self.store.items("/pods", name)]
                _warn(options, podsecurity.namespace_warnings(name, labels, old_labels, pods))
            return
        if (gr != "/pods" and gr not in podsecurity.POD_TEMPLATE_RESOURCES) or not ns:
            return
        stored_ns = self.store.get("/namespaces", "", ns)
        labels = (stored_ns.obj.get("metadata") or {}).get("labels") if stored_ns else None
        if gr == "/pods":
            decision = podsecurity.admit_pod(labels, obj,
                                             old=old if operation == "UPDATE" else None,
                                             subresource=subresource)
        else:
            decision = podsecurity.admit_workload(labels, gr, obj, subresource)
        refusal = None if decision.refusal is None else \
            f'{rt.resource} "{name}" is forbidden: {decision.refusal}'
        if decision.audit_annotations and self.audit is not None:
            ref = {"resource": rt.resource, "namespace": ns, "name": name,
                   "apiVersion": rt.version}
            if rt.group:
                ref["apiGroup"] = rt.group
            if subresource:
                ref["subresource"] = subresource
            self.audit.write(audit.event(verb=operation.lower(), user=options.user,
                                         object_ref=ref, annotations=decision.audit_annotations,
                                         refused=refusal))
        if refusal is not None:
            raise forbidden(refusal, resource=rt.resource, group=rt.group, name=name)
        _warn(options, decision.warnings)

    # -- create -----------------------------------------------------------------------------

    async def create(self, rt: ResourceType, ns: str | None, body: Any,
                     options: WriteOptions = _INTERNAL_WRITE, *,
                     authorize: Callable[[], None] | None = None) -> Obj:
        """Steps as ``write_path`` lists them. ``authorize``: a check run once the object
        is valid, before the validating webhooks (a create through PUT is authorized as
        ``create`` there, as upstream does)."""
        if "create" not in rt.verbs:
            raise method_not_allowed(f"create is not supported on {rt.resource}")
        body = self.check_body(rt, body, ns=ns, name=None)
        write_path.decode(rt, body, options)
        if rt.namespaced:
            if not ns:
                raise bad_request("the namespace of the object must be given in the URL")
            self.namespace_check(ns, creating=True)
        metadata = body.setdefault("metadata", {})
        name = metadata.get("name")
        if not name and isinstance(metadata.get("generateName"), str):
            causes = meta.validate_metadata(body, name_rule=rt.name_rule, creating=True)
            if causes:
                raise write_path.invalid_object(rt, body, causes)
            for _ in range(8):
                name = generated_name(metadata["generateName"])
                if self.store.get(*self._key(rt, ns, name)) is None:
                    break
        obj = meta.prepare_create(body, namespace=ns if rt.namespaced else None,
                                  name=name or "", uid=str(uuid.uuid4()), now=self.clock(),
                                  generation=meta.tracks_generation(rt.kind, custom=rt.custom))
        if not name:
            obj["metadata"].pop("name", None)
        keep_status = not rt.has_status or rt.kind == "Node"
        if not keep_status:
            obj.pop("status", None)
        defaults.on_create(rt.kind, obj, keep_status=keep_status)
        if rt.kind == "PersistentVolumeClaim":
            self._default_storage_class(obj)
        obj = write_path.schema_defaults(rt, obj, options)
        key = self._key(rt, ns, obj["metadata"].get("name") or "")
        admission = await self._admission(rt, "CREATE", ns=ns, name=key[2], old=None,
                                          options=options)
        before = obj
        mutated = await admission.mutate(obj, redefault=lambda patched: write_path.redefault(
            rt, before, patched, old=None))
        obj = mutated if mutated is not None else obj
        write_path.validate(rt, obj, old=None)
        if authorize is not None:
            authorize()
        if rt.group_resource == CRD_GR:
            obj["status"] = crds.crd_status(obj, now=meta.format_time(self.clock()))
        self._pod_security(rt, "CREATE", ns=ns, name=key[2], obj=obj, old=None,
                           options=options, subresource="")
        await admission.validate(obj)
        existing = self.store.get(*key)
        if existing is not None:
            raise self._exists(rt, key[2], existing)
        if options.dry_run:
            return obj
        stored = self._commit(*key, self._to_storage(rt, obj), None)
        return self.view(rt, stored)

    @staticmethod
    def _exists(rt: ResourceType, name: str, existing: Stored) -> APIError:
        """409 AlreadyExists, prefixed as upstream's store does while the object there
        is being deleted."""
        err = already_exists(resource=rt.resource, group=rt.group, name=name)
        if existing.obj.get("metadata", {}).get("deletionTimestamp"):
            err.message = f"object is being deleted: {err.message}"
        return err

    async def create_on_update(self, rt: ResourceType, ns: str | None, name: str, body: Any,
                               options: WriteOptions = _INTERNAL_WRITE, *,
                               authorize: Callable[[], None] | None = None) -> Obj:
        """A PUT of an object that does not exist, for a kind whose upstream registry
        allows create on update (``rt.create_on_update``): created as by a POST. As
        upstream's store does, a ``metadata.uid`` in the body is a precondition no absent
        object meets (409), and a ``resourceVersion`` is ignored."""
        body = self.check_body(rt, body, ns=ns, name=name)
        metadata = dict(body.get("metadata") or {})
        uid = metadata.get("uid")
        if uid:
            raise conflict(resource=rt.resource, group=rt.group, name=name,
                           why=f"Precondition failed: UID in precondition: {uid}, UID in "
                               "object meta: ")
        metadata.pop("resourceVersion", None)
        metadata["name"] = metadata.get("name") or name
        return await self.create(rt, ns, {**body, "metadata": metadata}, options,
                                 authorize=authorize)

    # -- update / patch ---------------------------------------------------------------------

    def _prepare_update(self, rt: ResourceType, current: Stored, body: Obj, *,
                        subresource: str, options: WriteOptions) -> Obj:
        old = self.view(rt, current)
        new = write_path.carry_over(rt, old, body, subresource=subresource)
        if subresource == "finalize":
            new = copy.deepcopy(old)
            new.setdefault("spec", {})["finalizers"] = list(
                (body.get("spec") or {}).get("finalizers") or [])
        defaults.normalize(rt.kind, new)
        return write_path.schema_defaults(rt, new, options)

    @staticmethod
    def _same(a: Obj, b: Obj) -> bool:
        a_meta = {k: v for k, v in a.get("metadata", {}).items() if k != "resourceVersion"}
        b_meta = {k: v for k, v in b.get("metadata", {}).items() if k != "resourceVersion"}
        return a_meta == b_meta and {k: v for k, v in a.items() if k != "metadata"} == {
            k: v for k, v in b.items() if k != "metadata"}

    async def _write_update(self, rt: ResourceType, key: tuple[str, str, str],
                            current: Stored, new: Obj, *, subresource: str,
                            options: WriteOptions) -> Obj | None:
        """Mutating admission, validation, validating admission, then commit; None when
        the object changed during admission."""
        old = self.view(rt, current)
        admission = await self._admission(rt, "UPDATE", ns=key[1] or None, name=key[2],
                                          old=old, options=options, subresource=subresource)
        before = new
        mutated = await admission.mutate(new, redefault=lambda patched: write_path.redefault(
            rt, before, patched, old=old, subresource=subresource))
        new = mutated if mutated is not None else new
        write_path.validate(rt, new, old=old)
        if rt.group_resource == CRD_GR:
            new["status"] = crds.crd_status(new, now=meta.format_time(self.clock()))
        self._pod_security(rt, "UPDATE", ns=key[1] or None, name=key[2], obj=new, old=old,
                           options=options, subresource=subresource)
        await admission.validate(new)
        latest = self.store.get(*key)
        if latest is None:
            raise not_found(resource=rt.resource, group=rt.group, name=key[2])
        if latest.rv != current.rv:
            return None
        if self._same(old, new) or options.dry_run:
            return new if options.dry_run else old
        stored = self._commit(*key, self._to_storage(rt, new), current.obj)
        return self.view(rt, stored)

    async def update(self, rt: ResourceType, ns: str | None, name: str, body: Any, *,
                     subresource: str = "", options: WriteOptions = _INTERNAL_WRITE) -> Obj:
        if "update" not in rt.verbs:
            raise method_not_allowed(f"update is not supported on {rt.resource}")
        body = self.check_body(rt, body, ns=ns, name=name)
        write_path.decode(rt, body, options)
        key = self._key(rt, ns, name)
        current = self.get_stored(rt, ns, name)
        wanted_rv = (body.get("metadata") or {}).get("resourceVersion")
        if wanted_rv and str(wanted_rv) != str(current.rv):
            raise conflict(resource=rt.resource, group=rt.group, name=name, why=STALE)
        if not wanted_rv and rt.custom:  # custom resources allow no unconditional update
            raise write_path.invalid_object(rt, body, [Cause(
                "FieldValueInvalid", "Invalid value: 0x0: must be specified for an update",
                "metadata.resourceVersion")])
        new = self._prepare_update(rt, current, body, subresource=subresource, options=options)
        result = await self._write_update(rt, key, current, new, subresource=subresource,
                                          options=options)
        if result is None:
            raise conflict(resource=rt.resource, group=rt.group, name=name, why=STALE)
        return result

    def _apply_patch(self, rt: ResourceType, current: Obj, content_type: str,
                     patch: Any) -> Obj:
        if content_type == MERGE_PATCH:
            if not isinstance(patch, dict):
                raise bad_request("a merge patch must be a JSON object")
            result: Obj = jsonpatch.merge_patch(current, patch)
        elif content_type == JSON_PATCH:
            if not isinstance(patch, list):
                raise bad_request("a JSON patch must be a JSON array of operations")
            try:
                result = jsonpatch.json_patch(current, patch)
            except jsonpatch.PatchError as err:
                code = int(getattr(err, "status_code", 422) or 422)
                reason = {409: "Conflict", 400: "BadRequest"}.get(code, "Invalid")
                raise APIError(code, reason, f"the JSON patch could not be applied: {err}",
                               name=current["metadata"].get("name", ""), group=rt.group,
                               kind=rt.resource) from err
        elif content_type == STRATEGIC_PATCH:
            if rt.custom:
                raise APIError(415, "UnsupportedMediaType",
                               f"strategic merge patch is not supported for {rt.kind}: use "
                               "application/merge-patch+json or application/json-patch+json")
            if not isinstance(patch, dict):
                raise bad_request("a strategic merge patch must be a JSON object")
            try:
                result = jsonpatch.strategic_merge_patch(current, patch, kind=rt.kind)
            except jsonpatch.PatchError as err:
                raise bad_request(f"the strategic merge patch could not be applied: {err}") \
                    from err
        else:
            raise unsupported_media_type(content_type)
        if not isinstance(result, dict):
            raise bad_request("the patch did not produce an object")
        return result

    async def patch(self, rt: ResourceType, ns: str | None, name: str, content_type: str,
                    patch: Any, *, subresource: str = "",
                    options: WriteOptions = _INTERNAL_WRITE) -> Obj:
        if "patch" not in rt.verbs:
            raise method_not_allowed(f"patch is not supported on {rt.resource}")
        key = self._key(rt, ns, name)
        for _ in range(16):
            current = self.get_stored(rt, ns, name)
            view = self.view(rt, current)
            patched = self._apply_patch(rt, view, content_type, patch)
            wanted_rv = (patched.get("metadata") or {}).get("resourceVersion")
            if wanted_rv and str(wanted_rv) != str(current.rv):
                raise conflict(resource=rt.resource, group=rt.group, name=name, why=STALE)
            body = self.check_body(rt, patched, ns=ns, name=name)
            del options.warnings[:]  # a retried patch reports its last attempt
            write_path.decode(rt, body, options)
            new = self._prepare_update(rt, current, body, subresource=subresource,
                                       options=options)
            result = await self._write_update(rt, key, current, new, subresource=subresource,
                                              options=options)
            if result is not None:
                return result
        raise conflict(resource=rt.resource, group=rt.group, name=name,
                       why="too many concurrent writes, try again")

    async def scale(self, rt: ResourceType, ns: str | None, name: str, *,
                    content_type: str | None = None, body: Any = None,
                    options: WriteOptions = _INTERNAL_WRITE) -> Obj:
        """The ``scale`` subresource: the Scale view (``body`` None), a new Scale (PUT,
        ``content_type`` None) or a patch of the Scale view; writes go to the object
        itself, so they bump its generation and pass its admission like a spec edit."""
        paths = rt.scale_paths
        if paths is None:
            raise not_found(resource=f"{rt.resource}/scale", group=rt.group, name=name)
        key = self._key(rt, ns, name)
        for _ in range(16):
            current = self.get_stored(rt, ns, name)
            view = self.view(rt, current)
            old_scale = scale.scale_of(view, paths, group=rt.group)
            if body is None:
                return old_scale
            wanted = body
            if content_type is not None:  # a Scale has no merge keys: strategic = merge
                wanted = self._apply_patch(
                    rt, old_scale, MERGE_PATCH if content_type == STRATEGIC_PATCH
                    else content_type, body)
            wanted_rv = (wanted.get("metadata") or {}).get("resourceVersion") \
                if isinstance(wanted, dict) else None
            if wanted_rv and str(wanted_rv) != str(current.rv):
                raise conflict(resource=rt.resource, group=rt.group, name=name, why=STALE)
            try:
                replicas = scale.replicas_of(wanted)
            except scale.ScaleError as err:
                raise invalid(kind="Scale", group="autoscaling", name=name,
                              causes=err.causes) from None
            new = self._prepare_update(rt, current, scale.with_replicas(view, paths, replicas),
                                       subresource="", options=options)
            result = await self._write_update(rt, key, current, new, subresource="",
                                              options=options)
            if result is not None:
                return scale.scale_of(result, paths, group=rt.group)
        raise conflict(resource=rt.resource, group=rt.group, name=name,
                       why="too many concurrent writes, try again")

    # -- delete -----------------------------------------------------------------------------

    async def delete(self, rt: ResourceType, ns: str | None, name: str, *,
                     delete_options: Obj | None = None,
                     options: WriteOptions = _INTERNAL_WRITE) -> tuple[Obj, bool]:
        """Delete one object; returns (its last state, whether it left the store)."""
        if "delete" not in rt.verbs:
            raise method_not_allowed(f"delete is not supported on {rt.resource}")
        opts = delete_options or {}
        key = self._key(rt, ns, name)
        current = self.get_stored(rt, ns, name)
        why = deletion.precondition_error(current.obj, opts.get("preconditions"))
        if why:
            raise conflict(resource=rt.resource, group=rt.group, name=name, why=why)
        propagation = opts.get("propagationPolicy")
        if propagation is None and opts.get("orphanDependents") is not None:
            propagation = "Orphan" if opts["orphanDependents"] else "Background"
        if propagation is not None and propagation not in deletion.PROPAGATIONS:
            raise bad_request(f'propagationPolicy: Unsupported value: "{propagation}": '
                              'supported values: "Background", "Foreground", "Orphan"')
        grace = opts.get("gracePeriodSeconds")
        if grace is not None and not isinstance(grace, int):
            raise bad_request("gracePeriodSeconds must be an integer")
        old = self.view(rt, current)
        await self.webhooks.admit(rt, "DELETE", ns=ns, name=name, obj=None, old=old,
                                  user=options.user, dry_run=options.dry_run,
                                  warnings=options.warnings)
        current = self.get_stored(rt, ns, name)
        plan = deletion.plan_delete(current.obj, propagation=propagation, grace_seconds=grace,
                                    now=self.clock())
        if options.dry_run:
            return self.view(rt, current), plan.remove
        if plan.remove:
            event = self.store.remove(*key, plan.obj)
            self._index(key[0], current.obj, None)
            self._emit(event)
            return self.view(rt, event.stored), True
        if plan.obj == current.obj:
            return old, False
        stored = self._commit(*key, plan.obj, current.obj)
        return self.view(rt, stored), self.store.get(*key) is None

    # -- internal writes (controllers) -------------------------------------------------------

    def delete_internal(self, gr: str, ns: str, name: str, *,
                        propagation: str | None = None) -> None:
        current = self.store.get(gr, ns, name)
        if current is None:
            return
        plan = deletion.plan_delete(current.obj, propagation=propagation, grace_seconds=None,
                                    now=self.clock())
        if plan.remove:
            event = self.store.remove(gr, ns, name, plan.obj)
            self._index(gr, current.obj, None)
            self._emit(event)
        elif plan.obj != current.obj:
            self._commit(gr, ns, name, plan.obj, current.obj)

    def mutate_internal(self, gr: str, ns: str, name: str,
                        change: Callable[[Obj], Obj]) -> None:
        current = self.store.get(gr, ns, name)
        if current is None:
            return
        new = change(current.copy())
        if not self._same(current.obj, new):
            self._commit(gr, ns, name, new, current.obj)

    def _default_storage_class(self, claim: Obj) -> None:
        """A claim that names no class (the key absent; "" means none on purpose) gets
        the default one, as with kube-apiserver's DefaultStorageClass admission."""
        spec = claim.setdefault("spec", {})
        if "storageClassName" in spec:
            return
        classes = [s.obj for _, s in self.store.items("storage.k8s.io/storageclasses")]
        name = defaults.default_storage_class(classes)
        if name is not None:
            spec["storageClassName"] = name

    def create_internal(self, rt: ResourceType, ns: str | None, obj: Obj) -> None:
        """Create without admission or authorization (bootstrap objects)."""
        key = self._key(rt, ns, obj["metadata"]["name"])
        if self.store.get(*key) is not None:
            return
        new = meta.prepare_create(obj, namespace=ns if rt.namespaced else None, name=key[2],
                                  uid=str(uuid.uuid4()), now=self.clock(),
                                  generation=meta.tracks_generation(rt.kind, custom=rt.custom))
        new["apiVersion"], new["kind"] = rt.api_version, rt.kind
        defaults.on_create(rt.kind, new, keep_status=not rt.has_status)
        self._commit(*key, new, None)

    # -- reviews ----------------------------------------------------------------------------

    def is_review(self, rt: ResourceType) -> bool:
        return rt.group_resource in REVIEW_RESOURCES

