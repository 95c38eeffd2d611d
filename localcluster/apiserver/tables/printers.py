"""Column sets of the built-in kinds, as ``kubectl get`` shows them.

One small function per kind turns an object into its row, following what kube-apiserver's
printers show (Pod's READY "1/1" and STATUS reasons, PVC access modes as RWO/ROX/RWX,
"<none>" for empty values, ages like "5m"). Columns with priority 1 appear with
``-o wide`` only.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from .columns import AGE, NAME_COLUMN, Column, human_age, parse_time

__all__ = ["AGE", "NAME_COLUMN", "PRINTERS", "Column", "human_age", "parse_time"]

Obj = Mapping[str, Any]


def _age(value: Any, now: datetime) -> str:
    when = parse_time(value) if isinstance(value, str) else None
    return "<unknown>" if when is None else human_age(when, now)


def _meta(obj: Obj) -> Mapping[str, Any]:
    return obj.get("metadata") or {}


def _name(obj: Obj) -> str:
    return str(_meta(obj).get("name", ""))


def _created(obj: Obj, now: datetime) -> str:
    return _age(_meta(obj).get("creationTimestamp"), now)


def _get(obj: Any, *path: str) -> Any:
    for key in path:
        if not isinstance(obj, Mapping):
            return None
        obj = obj.get(key)
    return obj


def _or_none(value: Any) -> str:
    return "<none>" if value in (None, "", [], {}) else str(value)


_MODES = {"ReadWriteOnce": "RWO", "ReadOnlyMany": "ROX", "ReadWriteMany": "RWX",
          "ReadWriteOncePod": "RWOP"}


def _modes(modes: Any) -> str:
    return ",".join(_MODES.get(m, m) for m in modes or [])


# ------------------------------------------------------------------------------ Pod


def _exit_reason(terminated: Mapping[str, Any]) -> str:
    if terminated.get("signal"):
        return f"Signal:{terminated['signal']}"
    return f"ExitCode:{terminated.get('exitCode', 0)}"


def _finished_at(status: Mapping[str, Any]) -> datetime | None:
    value = _get(status, "lastState", "terminated", "finishedAt")
    return parse_time(value) if isinstance(value, str) else None


@dataclass
class _PodSummary:
    reason: str
    ready: int = 0
    total: int = 0
    restarts: int = 0
    last_restart: datetime | None = None

    def restarted(self, status: Mapping[str, Any]) -> None:
        self.restarts += int(status.get("restartCount") or 0)
        finished = _finished_at(status)
        if finished and (self.last_restart is None or finished > self.last_restart):
            self.last_restart = finished


def _summarize_pod(pod: Obj) -> _PodSummary:
    """READY, STATUS and RESTARTS as kubectl shows them."""
    status = pod.get("status") or {}
    summary = _PodSummary(reason=str(status.get("reason") or status.get("phase") or ""))
    if any(c.get("type") == "PodScheduled" and c.get("reason") == "SchedulingGated"
           for c in status.get("conditions") or []):
        summary.reason = "SchedulingGated"
    init_specs = _get(pod, "spec", "initContainers") or []
    # Sidecars (init containers with restartPolicy Always) count as containers.
    sidecars = {c.get("name") for c in init_specs if c.get("restartPolicy") == "Always"}
    summary.total = len(_get(pod, "spec", "containers") or []) + len(sidecars)
    sidecar_restarts = _PodSummary(reason="")
    initializing = False
    for i, cs in enumerate(status.get("initContainerStatuses") or []):
        summary.restarted(cs)
        if cs.get("name") in sidecars:
            sidecar_restarts.restarted(cs)
        state = cs.get("state") or {}
        terminated, waiting = state.get("terminated"), state.get("waiting")
        if terminated and terminated.get("exitCode") == 0:
            continue
        if cs.get("name") in sidecars and cs.get("started"):
            summary.ready += 1 if cs.get("ready") else 0
            continue
        if terminated:
            summary.reason = "Init:" + (terminated.get("reason") or _exit_reason(terminated))
        elif waiting and waiting.get("reason") and waiting["reason"] != "PodInitializing":
            summary.reason = f"Init:{waiting['reason']}"
        else:
            summary.reason = f"Init:{i}/{len(init_specs)}"
        initializing = True
        break
    initialized = any(c.get("type") == "Initialized" and c.get("status") == "True"
                      for c in status.get("conditions") or [])
    if not initializing or initialized:
        # Past initialization only sidecar and app container restarts count.
        summary.restarts, summary.last_restart = (sidecar_restarts.restarts,
                                                  sidecar_restarts.last_restart)
        has_running = False
        for cs in reversed(status.get("containerStatuses") or []):
            summary.restarted(cs)
            state = cs.get("state") or {}
            waiting, terminated = state.get("waiting"), state.get("terminated")
            if waiting and waiting.get("reason"):
                summary.reason = waiting["reason"]
            elif terminated:
                summary.reason = terminated.get("reason") or _exit_reason(terminated)
            elif cs.get("ready") and state.get("running") is not None:
                has_running = True
                summary.ready += 1
        if summary.reason == "Completed" and has_running:
            ready = any(c.get("type") == "Ready" and c.get("status") == "True"
                        for c in status.get("conditions") or [])
            summary.reason = "Running" if ready else "NotReady"
    if _meta(pod).get("deletionTimestamp"):
        if status.get("reason") == "NodeLost":
            summary.reason = "Unknown"
        elif status.get("phase") not in ("Succeeded", "Failed"):
            summary.reason = "Terminating"
    return summary


def _pod(pod: Obj, now: datetime) -> list[Any]:
    summary = _summarize_pod(pod)
    restarts = str(summary.restarts)
    if summary.restarts and summary.last_restart is not None:
        restarts += f" ({human_age(summary.last_restart, now)} ago)"
    gates = _get(pod, "spec", "readinessGates") or []
    gate_text = "<none>"
    if gates:
        conditions = {c.get("type"): c.get("status")
                      for c in _get(pod, "status", "conditions") or []}
        met = sum(1 for g in gates if conditions.get(g.get("conditionType")) == "True")
        gate_text = f"{met}/{len(gates)}"
    pod_ips = _get(pod, "status", "podIPs") or []
    pod_ip = pod_ips[0].get("ip") if pod_ips else _get(pod, "status", "podIP")
    return [_name(pod), f"{summary.ready}/{summary.total}", summary.reason, restarts,
            _created(pod, now), _or_none(pod_ip), _or_none(_get(pod, "spec", "nodeName")),
            _or_none(_get(pod, "status", "nominatedNodeName")), gate_text]


_POD_COLUMNS = (NAME_COLUMN, Column("Ready", description="The aggregate readiness state of "
                                    "this pod for accepting traffic."),
                Column("Status", description="The aggregate status of the containers in this "
                       "pod."),
                Column("Restarts", description="The number of times the containers in this "
                       "pod have been restarted and when the last container in this pod has "
                       "restarted."),
                AGE, Column("IP", priority=1, description="IP address allocated to the pod."),
                Column("Node", priority=1, description="Name of the node the pod is on."),
                Column("Nominated Node", priority=1, description="Name of the nominated "
                       "node."),
                Column("Readiness Gates", priority=1, description="Readiness gates."))

# ------------------------------------------------------------------------- storage


def _pvc(pvc: Obj, now: datetime) -> list[Any]:
    phase = _get(pvc, "status", "phase") or ""
    if _meta(pvc).get("deletionTimestamp"):
        phase = "Terminating"
    volume = _get(pvc, "spec", "volumeName") or ""
    capacity = modes = ""
    if volume:
        capacity = str(_get(pvc, "status", "capacity", "storage") or "")
        modes = _modes(_get(pvc, "status", "accessModes"))
    storage_class = (_get(pvc, "spec", "storageClassName")
                     or (_meta(pvc).get("annotations") or {}).get(
                         "volume.beta.kubernetes.io/storage-class") or "")
    return [_name(pvc), phase, volume, capacity, modes, storage_class,
            _get(pvc, "spec", "volumeAttributesClassName") or "<unset>", _created(pvc, now),
            _get(pvc, "spec", "volumeMode") or "<unset>"]


_PVC_COLUMNS = (NAME_COLUMN, Column("Status"), Column("Volume"), Column("Capacity"),
                Column("Access Modes"), Column("StorageClass"),
                Column("VolumeAttributesClass"), AGE, Column("VolumeMode", priority=1))


def _pv(pv: Obj, now: datetime) -> list[Any]:
    claim = _get(pv, "spec", "claimRef")
    claim_text = f"{claim.get('namespace', '')}/{claim.get('name', '')}" if claim else ""
    phase = _get(pv, "status", "phase") or ""
    if _meta(pv).get("deletionTimestamp"):
        phase = "Terminating"
    return [_name(pv), str(_get(pv, "spec", "capacity", "storage") or ""),
            _modes(_get(pv, "spec", "accessModes")),
            _get(pv, "spec", "persistentVolumeReclaimPolicy") or "", phase, claim_text,
            _get(pv, "spec", "storageClassName") or "",
            _get(pv, "spec", "volumeAttributesClassName") or "<unset>",
            _get(pv, "status", "reason") or "", _created(pv, now),
            _get(pv, "spec", "volumeMode") or "<unset>"]


_PV_COLUMNS = (NAME_COLUMN, Column("Capacity"), Column("Access Modes"),
               Column("Reclaim Policy"), Column("Status"), Column("Claim"),
               Column("StorageClass"), Column("VolumeAttributesClass"), Column("Reason"), AGE,
               Column("VolumeMode", priority=1))


def _storage_class(sc: Obj, now: datetime) -> list[Any]:
    name = _name(sc)
    annotations = _meta(sc).get("annotations") or {}
    if "true" in (annotations.get("storageclass.kubernetes.io/is-default-class"),
                  annotations.get("storageclass.beta.kubernetes.io/is-default-class")):
        name += " (default)"
    return [name, sc.get("provisioner", ""), sc.get("reclaimPolicy") or "Delete",
            sc.get("volumeBindingMode") or "Immediate",
            "true" if sc.get("allowVolumeExpansion") else "false", _created(sc, now)]


_SC_COLUMNS = (NAME_COLUMN, Column("Provisioner"), Column("ReclaimPolicy"),
               Column("VolumeBindingMode"), Column("AllowVolumeExpansion"), AGE)


def _csi_driver(d: Obj, now: datetime) -> list[Any]:
    spec = d.get("spec") or {}
    return [_name(d), bool(spec.get("attachRequired", True)),
            bool(spec.get("podInfoOnMount", False)), bool(spec.get("storageCapacity", False)),
            _or_none(",".join(t.get("audience", "") for t in spec.get("tokenRequests") or [])),
            bool(spec.get("requiresRepublish", False)),
            ",".join(spec.get("volumeLifecycleModes") or ["Persistent"]), _created(d, now)]


_CSI_COLUMNS = (NAME_COLUMN, Column("AttachRequired", "boolean"),
                Column("PodInfoOnMount", "boolean"), Column("StorageCapacity", "boolean"),
                Column("TokenRequests"), Column("RequiresRepublish", "boolean"),
                Column("Modes"), AGE)

# ------------------------------------------------------------------ cluster objects


def _namespace(ns: Obj, now: datetime) -> list[Any]:
    return [_name(ns), _get(ns, "status", "phase") or "Active", _created(ns, now)]


def _node(node: Obj, now: datetime) -> list[Any]:
    ready = next((c.get("status") for c in _get(node, "status", "conditions") or []
                  if c.get("type") == "Ready"), None)
    status = {"True": "Ready", "False": "NotReady"}.get(str(ready), "Unknown")
    if _get(node, "spec", "unschedulable"):
        status += ",SchedulingDisabled"
    prefix = "node-role.kubernetes.io/"
    labels = _meta(node).get("labels") or {}
    roles = {k[len(prefix):] for k in labels if k.startswith(prefix) and k[len(prefix):]}
    if labels.get("kubernetes.io/role"):
        roles.add(labels["kubernetes.io/role"])
    addresses = _get(node, "status", "addresses") or []

    def address(kind: str) -> str:
        return _or_none(next((a.get("address") for a in addresses if a.get("type") == kind),
                             None))

    info = _get(node, "status", "nodeInfo") or {}
    return [_name(node), status, ",".join(sorted(roles)) or "<none>", _created(node, now),
            info.get("kubeletVersion", ""), address("InternalIP"), address("ExternalIP"),
            _or_none(info.get("osImage")), _or_none(info.get("kernelVersion")),
            _or_none(info.get("containerRuntimeVersion"))]


_NODE_COLUMNS = (NAME_COLUMN, Column("Status"), Column("Roles"), AGE, Column("Version"),
                 Column("Internal-IP", priority=1), Column("External-IP", priority=1),
                 Column("OS-Image", priority=1), Column("Kernel-Version", priority=1),
                 Column("Container-Runtime", priority=1))


def _event(ev: Obj, now: datetime) -> list[Any]:
    involved = ev.get("involvedObject") or ev.get("regarding") or {}
    last = ev.get("lastTimestamp") or ev.get("eventTime") or _get(ev, "series",
                                                                  "lastObservedTime")
    first = ev.get("firstTimestamp") or ev.get("eventTime")
    source = ev.get("source") or {}
    source_text = source.get("component") or ev.get("reportingComponent") or \
        ev.get("reportingController") or ""
    if source.get("host"):
        source_text += f", {source['host']}"
    count = ev.get("count") or _get(ev, "series", "count") or 1
    return [_age(last, now), ev.get("type", ""), ev.get("reason", ""),
            f"{str(involved.get('kind', '')).lower()}/{involved.get('name', '')}",
            involved.get("fieldPath", ""), source_text,
            (ev.get("message") or ev.get("note") or "").strip(), _age(first, now),
            int(count), _name(ev)]


_EVENT_COLUMNS = (Column("Last Seen"), Column("Type"), Column("Reason"), Column("Object"),
                  Column("Subobject", priority=1), Column("Source", priority=1),
                  Column("Message"), Column("First Seen", priority=1),
                  Column("Count", priority=1), Column("Name", priority=1, format="name"))

# ------------------------------------------------------------------------ workloads


def _containers_images(obj: Obj) -> tuple[str, str]:
    containers = _get(obj, "spec", "template", "spec", "containers") or []
    return (",".join(c.get("name", "") for c in containers),
            ",".join(c.get("image", "") for c in containers))


def _selector(obj: Obj) -> str:
    selector = _get(obj, "spec", "selector") or {}
    parts = [f"{k}={v}" for k, v in sorted((selector.get("matchLabels") or {}).items())]
    for expr in selector.get("matchExpressions") or []:
        op, key = expr.get("operator"), expr.get("key")
        values = ",".join(expr.get("values") or [])
        parts.append({"In": f"{key} in ({values})", "NotIn": f"{key} notin ({values})",
                      "Exists": f"{key}", "DoesNotExist": f"!{key}"}.get(op, ""))
    return ",".join(parts) or "<none>"


def _int(value: Any) -> int:
    return int(value or 0)


def _deployment(d: Obj, now: datetime) -> list[Any]:
    status = d.get("status") or {}
    desired = _get(d, "spec", "replicas")
    desired = 1 if desired is None else desired
    containers, images = _containers_images(d)
    return [_name(d), f"{_int(status.get('readyReplicas'))}/{desired}",
            _int(status.get("updatedReplicas")), _int(status.get("availableReplicas")),
            _created(d, now), containers, images, _selector(d)]


_DEPLOYMENT_COLUMNS = (NAME_COLUMN, Column("Ready"), Column("Up-to-date"),
                       Column("Available"), AGE,
                       Column("Containers", priority=1), Column("Images", priority=1),
                       Column("Selector", priority=1))


def _daemonset(d: Obj, now: datetime) -> list[Any]:
    status = d.get("status") or {}
    selector = _get(d, "spec", "template", "spec", "nodeSelector") or {}
    containers, images = _containers_images(d)
    return [_name(d), _int(status.get("desiredNumberScheduled")),
            _int(status.get("currentNumberScheduled")), _int(status.get("numberReady")),
            _int(status.get("updatedNumberScheduled")), _int(status.get("numberAvailable")),
            ",".join(f"{k}={v}" for k, v in sorted(selector.items())) or "<none>",
            _created(d, now), containers, images, _selector(d)]


_DAEMONSET_COLUMNS = (NAME_COLUMN, Column("Desired", "integer"), Column("Current", "integer"),
                      Column("Ready", "integer"), Column("Up-to-date", "integer"),
                      Column("Available", "integer"), Column("Node Selector"), AGE,
                      Column("Containers", priority=1), Column("Images", priority=1),
                      Column("Selector", priority=1))


def _service(svc: Obj, now: datetime) -> list[Any]:
    spec = svc.get("spec") or {}
    kind = spec.get("type") or "ClusterIP"
    external = list(spec.get("externalIPs") or [])
    if kind == "LoadBalancer":
        ingress = [i.get("ip") or i.get("hostname") for i in
                   _get(svc, "status", "loadBalancer", "ingress") or []]
        external = [i for i in ingress if i] + external
        external_text = ",".join(external) or "<pending>"
    elif kind == "ExternalName":
        external_text = str(spec.get("externalName", ""))
    else:
        external_text = ",".join(external) or "<none>"
    ports = []
    for p in spec.get("ports") or []:
        node_port = f":{p['nodePort']}" if p.get("nodePort") else ""
        ports.append(f"{p.get('port')}{node_port}/{p.get('protocol') or 'TCP'}")
    cluster_ips = spec.get("clusterIPs") or ([spec["clusterIP"]] if spec.get("clusterIP")
                                             else [])
    selector = ",".join(f"{k}={v}" for k, v in sorted((spec.get("selector") or {}).items()))
    return [_name(svc), kind, cluster_ips[0] if cluster_ips else "<none>", external_text,
            ",".join(ports) or "<none>", _created(svc, now), selector or "<none>"]


_SERVICE_COLUMNS = (NAME_COLUMN, Column("Type"), Column("Cluster-IP"), Column("External-IP"),
                    Column("Port(s)"), AGE, Column("Selector", priority=1))


def _endpoints(ep: Obj, now: datetime) -> list[Any]:
    addresses = []
    for subset in ep.get("subsets") or []:
        for address in subset.get("addresses") or []:
            for port in subset.get("ports") or [{}]:
                suffix = f":{port['port']}" if port.get("port") else ""
                addresses.append(f"{address.get('ip')}{suffix}")
    shown = ",".join(addresses[:3]) + (f" + {len(addresses) - 3} more..."
                                       if len(addresses) > 3 else "")
    return [_name(ep), shown or "<none>", _created(ep, now)]


# --------------------------------------------------------------------- the rest


def _configmap(cm: Obj, now: datetime) -> list[Any]:
    return [_name(cm), len(cm.get("data") or {}) + len(cm.get("binaryData") or {}),
            _created(cm, now)]


def _secret(s: Obj, now: datetime) -> list[Any]:
    return [_name(s), s.get("type") or "Opaque",
            len(s.get("data") or {}) + len(s.get("stringData") or {}), _created(s, now)]


def _service_account(sa: Obj, now: datetime) -> list[Any]:
    return [_name(sa), len(sa.get("secrets") or []), _created(sa, now)]


def _lease(lease: Obj, now: datetime) -> list[Any]:
    return [_name(lease), _or_none(_get(lease, "spec", "holderIdentity")), _created(lease, now)]


def _role(role: Obj, now: datetime) -> list[Any]:
    return [_name(role), _meta(role).get("creationTimestamp")]


def _role_binding(rb: Obj, now: datetime) -> list[Any]:
    ref = rb.get("roleRef") or {}
    subjects = rb.get("subjects") or []

    def names(kind: str) -> str:
        return ", ".join(
            (f"{s.get('namespace')}/{s.get('name')}" if kind == "ServiceAccount"
             else str(s.get("name"))) for s in subjects if s.get("kind") == kind)

    return [_name(rb), f"{ref.get('kind')}/{ref.get('name')}", _created(rb, now),
            names("User"), names("Group"), names("ServiceAccount")]


def _webhooks(cfg: Obj, now: datetime) -> list[Any]:
    return [_name(cfg), len(cfg.get("webhooks") or []), _created(cfg, now)]


def _apiservice(api: Obj, now: datetime) -> list[Any]:
    svc = _get(api, "spec", "service")
    service = f"{svc.get('namespace')}/{svc.get('name')}" if isinstance(svc, dict) else "Local"
    available = "Unknown"
    for cond in _get(api, "status", "conditions") or []:
        if isinstance(cond, dict) and cond.get("type") == "Available":
            available = str(cond.get("status"))
            if available != "True" and cond.get("reason"):
                available += f" ({cond.get('reason')})"
    return [_name(api), service, available, _created(api, now)]


def _counted(label: str) -> tuple[Column, ...]:
    return (NAME_COLUMN, Column(label, "integer"), AGE)


_ROLE_COLUMNS = (NAME_COLUMN, Column("Created At", "date", "CreationTimestamp is a timestamp "
                                     "representing the server time when this object was "
                                     "created."))
_BINDING_COLUMNS = (NAME_COLUMN, Column("Role"), AGE, Column("Users", priority=1),
                    Column("Groups", priority=1), Column("ServiceAccounts", priority=1))

Printer = Callable[[Obj, datetime], list[Any]]

PRINTERS: dict[str, tuple[tuple[Column, ...], Printer]] = {
    "Pod": (_POD_COLUMNS, _pod),
    "PersistentVolumeClaim": (_PVC_COLUMNS, _pvc),
    "PersistentVolume": (_PV_COLUMNS, _pv),
    "StorageClass": (_SC_COLUMNS, _storage_class),
    "CSIDriver": (_CSI_COLUMNS, _csi_driver),
    "Namespace": ((NAME_COLUMN, Column("Status"), AGE), _namespace),
    "Node": (_NODE_COLUMNS, _node),
    "Event": (_EVENT_COLUMNS, _event),
    "Deployment": (_DEPLOYMENT_COLUMNS, _deployment),
    "DaemonSet": (_DAEMONSET_COLUMNS, _daemonset),
    "Service": (_SERVICE_COLUMNS, _service),
    "Endpoints": ((NAME_COLUMN, Column("Endpoints"), AGE), _endpoints),
    "ConfigMap": ((NAME_COLUMN, Column("Data"), AGE), _configmap),
    "Secret": ((NAME_COLUMN, Column("Type"), Column("Data"), AGE), _secret),
    "ServiceAccount": ((NAME_COLUMN, Column("Secrets"), AGE), _service_account),
    "Lease": ((NAME_COLUMN, Column("Holder"), AGE), _lease),
    "Role": (_ROLE_COLUMNS, _role),
    "ClusterRole": (_ROLE_COLUMNS, _role),
    "RoleBinding": (_BINDING_COLUMNS, _role_binding),
    "ClusterRoleBinding": (_BINDING_COLUMNS, _role_binding),
    "ValidatingWebhookConfiguration": (_counted("Webhooks"), _webhooks),
    "MutatingWebhookConfiguration": (_counted("Webhooks"), _webhooks),
    "APIService": ((NAME_COLUMN, Column("Service"), Column("Available"), AGE), _apiservice),
}
