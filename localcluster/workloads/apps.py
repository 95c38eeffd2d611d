"""The Deployment, ReplicaSet and DaemonSet controllers: apply the pure plans of
``deployments``, ``replicasets`` and ``shared`` through the API."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping
from typing import Any

import kubeclient
from kubeclient import Client, KubeError, resources
from localcluster.kube.events import EventRecorder
from localcluster.kube.informer import Informer, Loop
from localcluster.kube.times import now
from localcluster.workloads import deployments, replicasets, shared

logger = logging.getLogger(__name__)

PENDING_FOR = 30.0
"""Seconds a write of ours is remembered while the informers have not seen it yet."""


class AppsController:
    def __init__(self, kube: Client, *, deployments: Informer, replicasets: Informer,
                 daemonsets: Informer, pods: Informer, nodes: Informer) -> None:
        self.kube = kube
        self.deployments, self.replicasets, self.daemonsets = (deployments, replicasets,
                                                               daemonsets)
        self.pods, self.nodes = pods, nodes
        self.events = {resources.REPLICASETS.plural: EventRecorder(
                           kube, component="replicaset-controller"),
                       resources.DAEMONSETS.plural: EventRecorder(
                           kube, component="daemonset-controller")}
        self.loop = Loop("apps", self.reconcile,
                         informers=(deployments, replicasets, daemonsets, pods, nodes))
        # Writes not yet seen by an informer ((plural, ns, name) -> (time, object or None
        # when deleted)): without them a pass running before the watch catches up would
        # act twice (two pods for one missing replica, a second ReplicaSet scale-down).
        self._pending: dict[tuple[str, str, str], tuple[float, dict[str, Any] | None]] = {}
        self._lock = threading.Lock()

    def _seen(self, informer: Informer, plural: str, namespace: str) -> list[dict[str, Any]]:
        objs = {o["metadata"]["name"]: o for o in informer.list(namespace)}
        cutoff = time.monotonic() - PENDING_FOR
        with self._lock:
            for (kind, ns, name), (at, obj) in list(self._pending.items()):
                if at < cutoff:
                    del self._pending[(kind, ns, name)]
                    continue
                if kind != plural or ns != namespace:
                    continue
                have = objs.get(name)
                if obj is None and have is not None:
                    objs[name] = {**have, "metadata": {**have["metadata"],
                                                      "deletionTimestamp": "pending"}}
                elif obj is not None and (have is None or _rv(have) < _rv(obj)):
                    objs[name] = obj
        return list(objs.values())

    def _remember(self, plural: str, ns: str, name: str, obj: dict[str, Any] | None) -> None:
        with self._lock:
            self._pending[(plural, ns, name)] = (time.monotonic(), obj)

    def start(self) -> None:
        self.loop.start()

    def stop(self) -> None:
        self.loop.stop()

    def reconcile(self) -> None:
        nodes = sorted(n["metadata"]["name"] for n in self.nodes.list())
        for d in self.deployments.list():
            self._guard(d, resources.DEPLOYMENTS, self._deployment)
        for rs in self.replicasets.list():
            self._guard(rs, resources.REPLICASETS, lambda rs: self._pods_plan(
                rs, resources.REPLICASETS, replicasets.replicaset_plan(
                    replicaset=rs, pods=self._seen(self.pods, "pods", _ns(rs)))))
        for ds in self.daemonsets.list():
            self._guard(ds, resources.DAEMONSETS, lambda ds: self._pods_plan(
                ds, resources.DAEMONSETS, shared.daemonset_plan(
                    daemonset=ds, pods=self._seen(self.pods, "pods", _ns(ds)), nodes=nodes,
                    now=now())))

    def _guard(self, owner: dict[str, Any], res: kubeclient.Resource, act: Any) -> None:
        if owner["metadata"].get("deletionTimestamp"):
            return
        try:
            act(owner)
        except KubeError as err:
            logger.warning("%s %s/%s: %s", res.plural, _ns(owner), owner["metadata"]["name"],
                           err)

    def _deployment(self, d: dict[str, Any]) -> None:
        ns, name = _ns(d), d["metadata"]["name"]
        try:
            plan = deployments.deployment_plan(
                deployment=d, replicasets=self._seen(self.replicasets, "replicasets", ns),
                now=now())
        except ValueError as err:
            logger.warning("deployments %s/%s: %s", ns, name, err)
            return
        if plan.create is not None:
            try:
                created = self.kube.create(resources.REPLICASETS, dict(plan.create), ns)
            except KubeError as err:
                if err.status != 409:
                    raise
            else:
                self._remember("replicasets", ns, created["metadata"]["name"], created)
                logger.info("deployments %s/%s: created replica set %s", ns, name,
                            created["metadata"]["name"])
        for rs_name in set(plan.scale) | set(plan.annotate):
            patch: dict[str, Any] = {}
            if rs_name in plan.scale:
                patch["spec"] = {"replicas": plan.scale[rs_name]}
            if rs_name in plan.annotate:
                patch["metadata"] = {"annotations": dict(plan.annotate[rs_name])}
            updated = self.kube.patch(resources.REPLICASETS, rs_name, patch, ns)
            self._remember("replicasets", ns, rs_name, updated)
            if rs_name in plan.scale:
                logger.info("deployments %s/%s: scaled replica set %s to %d", ns, name,
                            rs_name, plan.scale[rs_name])
        for rs_name in plan.delete:
            self.kube.delete(resources.REPLICASETS, rs_name, ns)
            self._remember("replicasets", ns, rs_name, None)
            logger.info("deployments %s/%s: deleted old replica set %s", ns, name, rs_name)
        # Pods a Deployment owns directly were made by rootdisk's earlier controller (before
        # ReplicaSets, in a data directory kept across an upgrade): its ReplicaSet replaces
        # them.
        for pod in self._seen(self.pods, "pods", ns):
            if shared.owned_by(pod, d) and not shared.deleting(pod):
                self.kube.delete(resources.PODS, pod["metadata"]["name"], ns)
                self._remember("pods", ns, pod["metadata"]["name"], None)
                logger.info("deployments %s/%s: deleted pod %s of the pre-ReplicaSet layout",
                            ns, name, pod["metadata"]["name"])
        annotations = d["metadata"].get("annotations") or {}
        if plan.revision and annotations.get(deployments.REVISION) != plan.revision:
            self.kube.patch(resources.DEPLOYMENTS, name, {"metadata": {"annotations": {
                deployments.REVISION: plan.revision}}}, ns)
        if _differs(d.get("status") or {}, plan.status):
            self.kube.patch(resources.DEPLOYMENTS, name, {"status": dict(plan.status)}, ns,
                            subresource="status")

    def _pods_plan(self, owner: Mapping[str, Any], res: kubeclient.Resource,
                   plan: shared.Plan) -> None:
        ns, name = _ns(owner), owner["metadata"]["name"]
        for pod in plan.create:
            try:
                created = self.kube.create(resources.PODS, dict(pod), ns)
            except KubeError as err:
                if err.status != 403:
                    raise
                # as upstream's controllers: refused (PodSecurity), so said on the owner
                recorder = self.events.get(res.plural)
                if recorder is not None:
                    recorder.emit(owner, "Warning", "FailedCreate",
                                  f"Error creating: {err.message}", api_version="apps/v1",
                                  kind="ReplicaSet" if res is resources.REPLICASETS
                                  else "DaemonSet")
                logger.warning("%s %s/%s: %s", res.plural, ns, name, err.message)
                break
            self._remember("pods", ns, created["metadata"]["name"], created)
            logger.info("%s %s/%s: created pod %s", res.plural, ns, name,
                        created["metadata"]["name"])
        for pod_name in plan.delete:
            self.kube.delete(resources.PODS, pod_name, ns)
            self._remember("pods", ns, pod_name, None)
            logger.info("%s %s/%s: deleted pod %s", res.plural, ns, name, pod_name)
        if _differs(owner.get("status") or {}, plan.status):
            self.kube.patch(res, name, {"status": dict(plan.status)}, ns, subresource="status")


def _ns(obj: Mapping[str, Any]) -> str:
    return str(obj["metadata"].get("namespace") or "")


def _rv(obj: Mapping[str, Any]) -> int:
    raw = str((obj.get("metadata") or {}).get("resourceVersion") or "0")
    return int(raw) if raw.isdigit() else 0


def _differs(current: Mapping[str, Any], desired: Mapping[str, Any]) -> bool:
    for k, v in desired.items():
        if k == "conditions":
            have = {(c.get("type"), c.get("status"), c.get("reason"), c.get("message"))
                    for c in current.get("conditions") or []}
            want = {(c.get("type"), c.get("status"), c.get("reason"), c.get("message"))
                    for c in v}
            if have != want:
                return True
        elif current.get(k) != v:
            return True
    return False
