"""The Deployment and DaemonSet controllers: apply workloads.py's plans through the API."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from localcluster.controllers import client, workloads
from localcluster.controllers.client import Kube, KubeError
from localcluster.controllers.informer import Informer, Loop
from localcluster.storage.events import now

logger = logging.getLogger(__name__)


class AppsController:
    def __init__(self, kube: Kube, *, deployments: Informer, daemonsets: Informer,
                 pods: Informer, nodes: Informer) -> None:
        self.kube = kube
        self.deployments, self.daemonsets = deployments, daemonsets
        self.pods, self.nodes = pods, nodes
        self.loop = Loop("apps", self.reconcile, informers=(deployments, daemonsets, pods, nodes))
        # Writes not yet seen by the pod informer (name -> (time, pod or None=deleted)):
        # without them a pass running before the watch catches up would act twice.
        self._pending: dict[tuple[str, str], tuple[float, dict[str, Any] | None]] = {}
        self._lock = threading.Lock()

    def _pods(self, namespace: str) -> list[dict[str, Any]]:
        pods = {p["metadata"]["name"]: p for p in self.pods.list(namespace)}
        cutoff = time.monotonic() - 30
        with self._lock:
            for (ns, name), (at, obj) in list(self._pending.items()):
                if at < cutoff:
                    del self._pending[(ns, name)]
                    continue
                if ns != namespace:
                    continue
                if obj is None and name in pods:
                    pods[name]["metadata"]["deletionTimestamp"] = "pending"
                elif obj is not None and name not in pods:
                    pods[name] = obj
        return list(pods.values())

    def start(self) -> None:
        self.loop.start()

    def stop(self) -> None:
        self.loop.stop()

    def reconcile(self) -> None:
        nodes = sorted(n["metadata"]["name"] for n in self.nodes.list())
        for d in self.deployments.list():
            self._apply(d, client.DEPLOYMENTS, lambda d=d: workloads.deployment_plan(
                deployment=d, pods=self._pods(d["metadata"]["namespace"]), now=now()))
        for ds in self.daemonsets.list():
            self._apply(ds, client.DAEMONSETS, lambda ds=ds: workloads.daemonset_plan(
                daemonset=ds, pods=self._pods(ds["metadata"]["namespace"]), nodes=nodes,
                now=now()))

    def _apply(self, owner: Mapping[str, Any], res: client.Resource,
               plan_fn: Callable[[], workloads.Plan]) -> None:
        meta = owner["metadata"]
        if meta.get("deletionTimestamp"):
            return
        ns, name = meta["namespace"], meta["name"]
        plan = plan_fn()
        try:
            for pod in plan.create:
                created = self.kube.create(client.PODS, dict(pod), ns)
                with self._lock:
                    self._pending[(ns, created["metadata"]["name"])] = (time.monotonic(),
                                                                        created)
                logger.info("%s %s/%s: created pod %s", res.plural, ns, name,
                            created["metadata"]["name"])
            for pod_name in plan.delete:
                self.kube.delete(client.PODS, pod_name, ns)
                with self._lock:
                    self._pending[(ns, pod_name)] = (time.monotonic(), None)
                logger.info("%s %s/%s: deleted pod %s", res.plural, ns, name, pod_name)
            current = owner.get("status") or {}
            if _differs(current, plan.status):
                self.kube.patch(res, name, {"status": dict(plan.status)}, ns,
                                subresource="status")
        except KubeError as err:
            logger.warning("%s %s/%s: %s", res.plural, ns, name, err)


def _differs(current: Mapping[str, Any], desired: Mapping[str, Any]) -> bool:
    for k, v in desired.items():
        if k == "conditions":
            have = {(c.get("type"), c.get("status"), c.get("reason")) for c in
                    current.get("conditions") or []}
            want = {(c.get("type"), c.get("status"), c.get("reason")) for c in v}
            if have != want:
                return True
        elif current.get(k) != v:
            return True
    return False
