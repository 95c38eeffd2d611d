"""The server's own controllers: garbage collector, namespace and CRD cleanup, CRD serving,
and the root-CA publisher (every namespace's ``kube-root-ca.crt`` ConfigMap with the
cluster CA, put back when deleted or changed, as kube-controller-manager's
root-ca-cert-publisher does).

They react to the store's events (a listener on :class:`Backend`) and do their work on the
event loop through the backend's internal writes, which skip admission and authorization
as kube-controller-manager's writes effectively do for these finalizers. Decisions per
dependent come from the pure ``gc`` and ``deletion`` modules.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from .backend import NS_GR, SA_GR, Backend
from .kinds.registry import Registry
from .rules import crds, gc
from .rules.crds import CRD_GR
from .rules.deletion import CRD_CLEANUP, FOREGROUND, NAMESPACE_FINALIZER, ORPHAN
from .storage.store import Event

logger = logging.getLogger(__name__)

Obj = dict[str, Any]
Key = tuple[str, str, str]
CM_GR = "/configmaps"
ROOT_CA_CONFIGMAP = "kube-root-ca.crt"
ROOT_CA_DESCRIPTION = (
    "Contains a CA bundle that can be used to verify the kube-apiserver when using internal "
    "endpoints such as the internal service IP or kubernetes.default.svc. No other usage is "
    "guaranteed across distributions of Kubernetes clusters.")


def _without_finalizer(name: str) -> Any:
    def change(obj: Obj) -> Obj:
        fins = [f for f in obj["metadata"].get("finalizers") or [] if f != name]
        if fins:
            obj["metadata"]["finalizers"] = fins
        else:
            obj["metadata"].pop("finalizers", None)
        return obj
    return change


def _without_spec_finalizer(obj: Obj) -> Obj:
    spec = obj.setdefault("spec", {})
    spec["finalizers"] = [f for f in spec.get("finalizers") or [] if f != NAMESPACE_FINALIZER]
    return obj


class Controllers:
    def __init__(self, backend: Backend, registry: Registry, *,
                 root_ca_pem: str | None = None) -> None:
        self.backend = backend
        self.registry = registry
        self.root_ca_pem = root_ca_pem
        # Namespaces whose kube-root-ca.crt is to be checked (all of them at start).
        self._ca_namespaces: set[str] = set()
        if root_ca_pem is not None:
            self._ca_namespaces = {n for (_, n), _ in backend.store.items(NS_GR)}
        self._gone_owners: set[str] = set()
        self._keys: set[Key] = set()
        self._new_namespaces: set[str] = set()
        self._wake = asyncio.Event()
        backend.add_listener(self._on_event)
        for _, stored in backend.store.items(CRD_GR):
            self._serve_crd(stored.obj, deleted=False)
        # Resume work interrupted by a restart: deletions in progress, and dependents whose
        # owners left the store while the server was down.
        self._dangling: set[Key] = set()
        for gr, stored in backend.store.all():
            m = stored.obj["metadata"]
            key = (gr, m.get("namespace", ""), m["name"])
            if m.get("deletionTimestamp"):
                self._keys.add(key)
            if self._owners_all_gone(stored.obj):
                self._dangling.add(key)
        if self._dangling:
            self._wake.set()
        if self._keys or self._ca_namespaces:
            self._wake.set()

    def _owners_all_gone(self, obj: Obj) -> bool:
        owners = gc.owner_uids(obj)
        return bool(owners) and not any(self.backend.uid_alive(u) for u in owners)

    def _serve_crd(self, crd: Obj, *, deleted: bool) -> None:
        spec = crd.get("spec") or {}
        names = spec.get("names") or {}
        if deleted:
            self.registry.remove_group_resource(spec.get("group", ""), names.get("plural", ""))
            logger.info("stopped serving %s", crd["metadata"]["name"])
        else:
            self.registry.replace_crd(spec["group"], names["plural"], crds.served_types(crd),
                                      crds.storage_version(crd))

    def _on_event(self, event: Event) -> None:
        obj = event.stored.obj
        m = obj["metadata"]
        ns, name = m.get("namespace", ""), m["name"]
        if event.gr == CRD_GR:
            self._serve_crd(obj, deleted=event.type == "DELETED")
        if self.root_ca_pem is not None and (
                (event.gr == NS_GR and event.type == "ADDED")
                or (event.gr == CM_GR and name == ROOT_CA_CONFIGMAP and (
                    event.type == "DELETED" or obj.get("data") != self._root_ca_data()))):
            self._ca_namespaces.add(name if event.gr == NS_GR else ns)
            self._wake.set()
        if event.type == "DELETED":
            uid = m.get("uid")
            if uid and self.backend.dependents_of(uid):
                self._gone_owners.add(uid)
            if ns:
                self._keys.add((NS_GR, "", ns))
            group, _, resource = event.gr.partition("/")
            if group and "." in group:
                self._keys.add((CRD_GR, "", f"{resource}.{group}"))
            for owner in gc.owner_uids(obj):
                key = self.backend._uids.get(owner)
                if key is not None:
                    self._keys.add(key)
        elif m.get("deletionTimestamp"):
            self._keys.add((event.gr, ns, name))
        elif event.type == "ADDED" and self._owners_all_gone(obj):
            self._dangling.add((event.gr, ns, name))  # created for an owner that is gone
        elif event.type == "ADDED" and event.gr == NS_GR:
            self._new_namespaces.add(name)
        else:
            return
        self._wake.set()

    async def run(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            try:
                self._process()
            except Exception:
                logger.exception("controller pass failed; retrying")
                await asyncio.sleep(0.5)
                self._wake.set()
            await asyncio.sleep(0)

    def _process(self) -> None:
        while self._new_namespaces:
            ns = self._new_namespaces.pop()
            if self.backend.store.get(NS_GR, "", ns) is not None:
                sa = self.registry.get("", "v1", "serviceaccounts")
                if sa is not None and self.backend.store.get(SA_GR, ns, "default") is None:
                    self.backend.create_internal(sa, ns, {"metadata": {"name": "default"}})
        while self._ca_namespaces:
            self._publish_root_ca(self._ca_namespaces.pop())
        while self._gone_owners:
            self._owner_gone(self._gone_owners.pop())
        while self._dangling:
            key = self._dangling.pop()
            stored = self.backend.store.get(*key)
            if stored is not None and self._owners_all_gone(stored.obj):
                logger.debug("garbage-collecting %s: its owners are gone", key)
                self.backend.delete_internal(*key, propagation="Background")
        rounds = 0
        while self._keys and rounds < 1000:
            rounds += 1
            self._reconcile(self._keys.pop())

    def _root_ca_data(self) -> Obj:
        return {"ca.crt": self.root_ca_pem}

    def _publish_root_ca(self, ns: str) -> None:
        stored = self.backend.store.get(NS_GR, "", ns)
        cm = self.registry.get("", "v1", "configmaps")
        if stored is None or stored.obj["metadata"].get("deletionTimestamp") or cm is None:
            return
        current = self.backend.store.get(CM_GR, ns, ROOT_CA_CONFIGMAP)
        if current is None:
            self.backend.create_internal(cm, ns, {
                "metadata": {"name": ROOT_CA_CONFIGMAP,
                             "annotations": {"kubernetes.io/description": ROOT_CA_DESCRIPTION}},
                "data": self._root_ca_data()})
        elif current.obj.get("data") != self._root_ca_data() \
                and not current.obj["metadata"].get("deletionTimestamp"):
            data = self._root_ca_data()
            self.backend.mutate_internal(CM_GR, ns, ROOT_CA_CONFIGMAP,
                                         lambda o: {**o, "data": dict(data)})

    def _owner_gone(self, uid: str) -> None:
        for key in self.backend.dependents_of(uid):
            stored = self.backend.store.get(*key)
            if stored is None:
                continue
            action = gc.on_owner_gone(stored.obj, owner_uid=uid, live_uids=set(
                u for u in gc.owner_uids(stored.obj) if self.backend.uid_alive(u)))
            if action == "delete":
                logger.debug("garbage-collecting %s", key)
                self.backend.delete_internal(*key, propagation="Background")
            elif action == "detach":
                self.backend.mutate_internal(*key, lambda o: gc.without_owner(o, uid))

    def _reconcile(self, key: Key) -> None:
        stored = self.backend.store.get(*key)
        if stored is None or not stored.obj["metadata"].get("deletionTimestamp"):
            return
        obj = stored.obj
        fins = obj["metadata"].get("finalizers") or []
        uid = obj["metadata"].get("uid", "")
        if ORPHAN in fins:
            for dep in self.backend.dependents_of(uid):
                self.backend.mutate_internal(*dep, lambda o: gc.without_owner(o, uid))
            self.backend.mutate_internal(*key, _without_finalizer(ORPHAN))
        if FOREGROUND in fins:
            blocking = False
            for dep in self.backend.dependents_of(uid):
                dstored = self.backend.store.get(*dep)
                if dstored is None:
                    continue
                if not dstored.obj["metadata"].get("deletionTimestamp"):
                    self.backend.delete_internal(*dep, propagation="Foreground")
                if self.backend.store.get(*dep) is not None and gc.blocks_foreground(
                        dstored.obj, uid):
                    blocking = True
            if not blocking:
                self.backend.mutate_internal(*key, _without_finalizer(FOREGROUND))
        if key[0] == NS_GR:
            ns = key[2]
            remaining = list(self.backend.store.all_in_namespace(ns))
            for gr, dstored in remaining:
                if not dstored.obj["metadata"].get("deletionTimestamp"):
                    self.backend.delete_internal(gr, ns, dstored.obj["metadata"]["name"])
            if not any(True for _ in self.backend.store.all_in_namespace(ns)):
                self.backend.mutate_internal(*key, _without_spec_finalizer)
        if key[0] == CRD_GR and CRD_CLEANUP in fins:
            spec = obj["spec"]
            gr = f"{spec['group']}/{spec['names']['plural']}"
            for (ons, oname), dstored in self.backend.store.items(gr):
                if not dstored.obj["metadata"].get("deletionTimestamp"):
                    self.backend.delete_internal(gr, ons, oname)
            if self.backend.store.count(gr) == 0:
                self.backend.mutate_internal(*key, _without_finalizer(CRD_CLEANUP))
