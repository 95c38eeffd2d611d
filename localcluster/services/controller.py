"""ClusterIPs and Endpoints for Services, and service resolution for the API server.

A Service of type ClusterIP (the default) without an address gets one from the
cluster's service range (127.2.0.0/16 by default; see kube/addresses.py). Endpoints
follow the selected pods (endpoints.py). There is no proxy: a connection to the
clusterIP reaches nothing. "Resolving" a Service — what the API server
does to call an admission webhook ``service`` — gives the first ready endpoint's pod IP
and target port, falling back to 127.0.0.1 and the service port.
"""

from __future__ import annotations

import logging

import kubeclient
from kubeclient import Client, KubeError, resources
from localcluster.kube.addresses import AddressPool
from localcluster.kube.informer import Informer, Loop
from localcluster.services import endpoints

logger = logging.getLogger(__name__)

SERVICE_CIDR = "127.2.0.0/16"


class ServiceController:
    def __init__(self, kube: Client, *, services: Informer, endpoints_: Informer,
                 pods: Informer, service_cidr: str = SERVICE_CIDR) -> None:
        self.kube = kube
        self.services = services
        self.endpoints = endpoints_
        self.pods = pods
        self.ips = AddressPool(service_cidr)
        self.loop = Loop("services", self.reconcile, informers=(services, endpoints_, pods))

    def start(self) -> None:
        self.loop.start()

    def stop(self) -> None:
        self.loop.stop()

    def reconcile(self) -> None:
        services = self.services.list()
        for svc in services:
            meta, spec = svc["metadata"], svc.get("spec") or {}
            key = f"{meta['namespace']}/{meta['name']}"
            ip = spec.get("clusterIP")
            if ip and ip != "None":
                self.ips.reserve(ip, key)
        for svc in services:
            try:
                self._sync(svc)
            except KubeError as err:
                log = logger.debug if kubeclient.is_stale(err) else logger.warning
                log("service %s/%s: %s", svc["metadata"]["namespace"], svc["metadata"]["name"],
                    err)

    def _sync(self, svc: kubeclient.Obj) -> None:
        meta, spec = svc["metadata"], svc.get("spec") or {}
        ns, name = meta["namespace"], meta["name"]
        kind = spec.get("type") or "ClusterIP"
        if kind in ("ClusterIP", "NodePort", "LoadBalancer") and not spec.get("clusterIP"):
            ip = self.ips.allocate(f"{ns}/{name}")
            self.kube.patch(resources.SERVICES, name,
                            {"spec": {"clusterIP": ip, "clusterIPs": [ip]}}, ns)
            logger.info("service %s/%s: clusterIP %s", ns, name, ip)
        if not spec.get("selector"):
            return  # endpoints of selector-less services are managed by their owner
        desired = endpoints.endpoints_for(svc, self.pods.list(ns))
        current = self.endpoints.get(name, ns)
        if current is None:
            self.kube.create(resources.ENDPOINTS, desired, ns)
        elif (current.get("subsets") or []) != desired["subsets"]:
            current["subsets"] = desired["subsets"]
            self.kube.replace(resources.ENDPOINTS, current, ns)

    def resolve(self, namespace: str, name: str, port: int) -> tuple[str, int]:
        """For the API server's admission webhooks (``ServiceResolver``)."""
        svc = self.services.get(name, namespace)
        if svc is None:
            svc = self.kube.get_or_none(resources.SERVICES, name, namespace)
        if svc is not None:
            found = endpoints.resolve(svc, self.pods.list(namespace), port)
            if found is not None:
                return found
            for p in (svc.get("spec") or {}).get("ports") or []:
                if int(p.get("port", 0)) == port and isinstance(p.get("targetPort"), int):
                    return ("127.0.0.1", int(p["targetPort"]))
        return ("127.0.0.1", port)
