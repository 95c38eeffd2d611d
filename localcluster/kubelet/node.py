"""The node: its Node object and heartbeat, a trivial scheduler, and the pod workers.

- The Node (capacity from this machine, condition Ready) is created at start and its
  Lease in ``kube-node-lease`` renewed every ``heartbeat`` seconds, with the Ready
  condition's heartbeat time.
- Scheduler: a pod without ``nodeName`` is bound here (the ``binding`` subresource),
  after its WaitForFirstConsumer claims got ``volume.kubernetes.io/selected-node``, as
  the real scheduler's volume binder does.
- Every pod bound here gets a :class:`~localcluster.kubelet.worker.PodWorker` unless it
  already finished (Succeeded/Failed).
- Logs are served to the API server's log-provider hook from the workers' log files.
- Node-pressure eviction (pressure.py decides, memstats.py measures): every
  :data:`~localcluster.kubelet.pressure.CHECK_EVERY` seconds the node's available memory
  is compared with the hard threshold (``eviction_hard_memory``, upstream's
  ``memory.available<100Mi``); under it the Node gets MemoryPressure=True, one pod per
  pass is evicted (the first of upstream's ranking), and new BestEffort pods are
  refused while the condition holds.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import logging
import os
import platform
import shutil
import sys
import threading
import time
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any, Protocol

from kubeclient import Client, KubeError, Obj, resources
from localcluster.kube import claims, times
from localcluster.kube.addresses import AddressPool, listening_addresses
from localcluster.kube.events import EventRecorder
from localcluster.kube.informer import Informer, Loop
from localcluster.kubelet import execs, logs, memstats, podvolumes, pressure, restarts
from localcluster.kubelet.cgroups import CgroupManager
from localcluster.kubelet.env import referenced_names
from localcluster.kubelet.images import ImageTable
from localcluster.kubelet.imagevolumes import ImageStore
from localcluster.kubelet.sandbox import project_root
from localcluster.kubelet.worker import PodWorker

logger = logging.getLogger(__name__)

NODE_NAME = "localcluster"
POD_CIDR = "127.1.0.0/16"
"""Default; ``rootdisk up`` picks one per data dir (kube/addresses.networks_for)."""


class OfflineResizes(Protocol):
    """What the node needs from the volume manager (storage/volumes.py): growing a
    filesystem whose expansion waited for its volume to be unused."""

    def exists(self, name: str) -> bool: ...

    def resize_pending(self, name: str) -> bool: ...

    def finish_resize(self, name: str) -> None: ...


def _memory_bytes() -> int:
    with open("/proc/meminfo", encoding="ascii") as fh:
        for line in fh:
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) * 1024
    return 0


def cgroup_prefix(data_dir: str) -> str:
    """``localcluster-<12 hex digits of the data dir's real path>``."""
    digest = hashlib.sha256(os.path.realpath(data_dir).encode()).hexdigest()[:12]
    return f"localcluster-{digest}"


class Node:
    def __init__(
        self, kube: Client, *, data_dir: str, api_host: str, api_port: int, ca_pem: str,
        token_for: Callable[..., str], pods: Informer, claims: Informer,
        volumes: Informer, storage_classes: Informer, configmaps: Informer, secrets: Informer,
        images: ImageTable, backoff: restarts.BackoffSettings | None = None,
        name: str = NODE_NAME, heartbeat: float = 10.0, shutdown_grace: float = 5.0,
        pod_cidr: str = POD_CIDR,
        volume_manager: OfflineResizes | None = None,
        eviction_hard_memory: str | None = pressure.DEFAULT_HARD,
        eviction_pressure_transition_period: float = pressure.DEFAULT_TRANSITION_PERIOD,
        pod_pids_limit: int = -1,
    ) -> None:
        self.kube = kube
        self.name = name
        self.pods_dir = os.path.join(os.path.realpath(data_dir), "kubelet", "pods")
        os.makedirs(self.pods_dir, exist_ok=True)
        self.image_store = ImageStore(data_dir)
        self.api_host, self.api_port, self.ca_pem = api_host, api_port, ca_pem
        self.token_for = token_for
        self.pods, self.claims, self.pvs = pods, claims, volumes
        self.storage_classes = storage_classes
        self.configmaps, self.secrets = configmaps, secrets
        self.images = images
        self.backoff = backoff or restarts.BackoffSettings()
        self.heartbeat = heartbeat
        self.shutdown_grace = shutdown_grace
        self.volume_manager = volume_manager
        self.events = EventRecorder(kube, component="kubelet", host=name)
        self._scheduler_events = EventRecorder(kube, component="default-scheduler")
        self.host_ip = "127.0.0.1"
        self.pod_cidr = pod_cidr
        self.pod_ips = AddressPool(pod_cidr, busy=listening_addresses)
        # One parent cgroup per cluster (by its data dir): each cluster's start-up removes
        # the empty cgroups under its parent, which must never be another cluster's, made a
        # moment before that cluster's container joins it.
        self.cgroups = CgroupManager(prefix=cgroup_prefix(data_dir))
        self.pod_pids_limit = pod_pids_limit
        """``podPidsLimit``: each pod's ``pids.max`` (-1: none)."""
        self.cpu_millis = (os.cpu_count() or 1) * 1000
        self.memory_bytes = _memory_bytes()
        self.memory_threshold = pressure.parse_threshold(eviction_hard_memory,
                                                         capacity=self.memory_bytes)
        """The ``memory.available`` hard threshold (None: no node-pressure eviction)."""
        self.memory_pressure = pressure.PressureState(eviction_pressure_transition_period)
        self._pressure_since = times.now()
        """lastTransitionTime of the MemoryPressure condition."""
        self._under_pressure = False
        self.project_root = project_root()
        self.python = os.path.join(os.path.dirname(sys.executable), "python")
        if not os.path.exists(self.python):
            self.python = sys.executable
        # an image's usual PATH (Docker's default) with sbin: the launcher's libvirt
        # driver runs libvirtd, which Debian installs in /usr/sbin
        self.default_path = (f"{os.path.dirname(self.python)}:/usr/local/sbin:/usr/local/bin:"
                             "/usr/sbin:/usr/bin:/sbin:/bin")
        self._workers: dict[str, PodWorker] = {}
        self._completed: set[str] = set()
        """Pods whose containers all finished here (the informer may lag behind)."""
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self.loop = Loop("kubelet", self.reconcile, resync=2.0,
                         informers=(pods, claims, volumes))
        self._heartbeat = threading.Thread(target=self._beat, daemon=True, name="heartbeat")
        self._pressure_thread = threading.Thread(target=self._watch_memory, daemon=True,
                                                 name="eviction")

    # -- lifecycle -------------------------------------------------------------------

    def start(self) -> None:
        self.cgroups.cleanup()
        self._register()
        self._heartbeat.start()
        self._pressure_thread.start()
        self.loop.start()

    def stop(self) -> None:
        """Stop every container (the pods stay in the API, rerun at the next start)."""
        self._stop.set()
        self.loop.stop()
        with self._lock:
            workers = list(self._workers.values())
        for w in workers:
            w.stop()
        for w in workers:
            w.finished.wait(self.shutdown_grace + 10)
        self.cgroups.cleanup(remove_parent=True)
        try:  # as a node whose kubelet stopped: pods here are not served until it returns
            st = self._node_status()
            for cond in st["conditions"]:
                if cond["type"] == "Ready":
                    cond.update(status="Unknown", reason="NodeStatusUnknown",
                                message="localcluster kubelet stopped posting node status")
            self.kube.patch(resources.NODES, self.name, {"status": st}, subresource="status")
        except Exception as err:
            logger.debug("could not mark the node stopped: %s", err)

    def finish_resizes(self, worker: PodWorker) -> None:
        """Before a pod's containers start: grow the filesystems of its volumes whose
        expansion waited for them to be unused (offline expansion, as on "next mount")."""
        if self.volume_manager is None:
            return
        for claim_name in podvolumes.claim_names(worker.pod):
            claim = self.claims.get(claim_name, worker.namespace) or {}
            pv = (claim.get("spec") or {}).get("volumeName")
            if not pv or not self.volume_manager.exists(pv):
                continue
            if self.volume_manager.resize_pending(pv) and not self.in_use(pv, but=worker):
                self.volume_manager.finish_resize(pv)

    def in_use(self, volume_name: str, *, but: PodWorker | None = None) -> bool:
        """Whether a running pod uses the PV ``volume_name`` (for offline expansion)."""
        with self._lock:
            workers = [w for w in self._workers.values() if w is not but]
        for w in workers:
            if w._volumes is None:
                continue  # its containers have not started
            for claim_name in podvolumes.claim_names(w.pod):
                claim = self.claims.get(claim_name, w.namespace) or {}
                if (claim.get("spec") or {}).get("volumeName") == volume_name:
                    return True
        return False

    # -- the Node object -------------------------------------------------------------

    def _node_object(self) -> Obj:
        cap = {"cpu": str(self.cpu_millis // 1000), "memory": f"{self.memory_bytes // 1024}Ki",
               "pods": "110", "ephemeral-storage": "100Gi"}
        return {
            "apiVersion": "v1", "kind": "Node",
            "metadata": {"name": self.name, "labels": {
                "kubernetes.io/hostname": self.name, "kubernetes.io/os": "linux",
                "kubernetes.io/arch": {"x86_64": "amd64", "aarch64": "arm64"}.get(
                    platform.machine(), platform.machine()),
                "node-role.kubernetes.io/control-plane": ""}},
            "spec": {"podCIDR": self.pod_cidr, "podCIDRs": [self.pod_cidr]},
            "status": self._node_status(cap),
        }

    def _node_status(self, cap: Mapping[str, str] | None = None) -> Obj:
        now = times.now()
        cond = [{"type": pressure.MEMORY_PRESSURE,
                 **pressure.condition_fields(self._under_pressure),
                 "lastHeartbeatTime": now, "lastTransitionTime": self._pressure_since}]
        cond += [
            {"type": t, "status": "False", "reason": f"KubeletHas{r}", "message": m,
             "lastHeartbeatTime": now, "lastTransitionTime": now}
            for t, r, m in (("DiskPressure", "NoDiskPressure", "kubelet has no disk pressure"),
                            ("PIDPressure", "SufficientPID", "kubelet has sufficient PID"))
        ]
        cond.append({"type": "Ready", "status": "True", "reason": "KubeletReady",
                     "message": "localcluster kubelet is posting ready status",
                     "lastHeartbeatTime": now, "lastTransitionTime": now})
        st: Obj = {"conditions": cond,
                   "addresses": [{"type": "InternalIP", "address": self.host_ip},
                                 {"type": "Hostname", "address": self.name}],
                   "nodeInfo": {"architecture": platform.machine(), "operatingSystem": "linux",
                                "kernelVersion": platform.release(),
                                "kubeletVersion": "v1.32.0-localcluster",
                                "containerRuntimeVersion": "localcluster://bubblewrap",
                                "osImage": platform.platform(), "machineID": "", "systemUUID": "",
                                "bootID": "", "kubeProxyVersion": ""}}
        if cap is not None:
            st["capacity"] = dict(cap)
            st["allocatable"] = dict(cap)
        return st

    def _register(self) -> None:
        node = self._node_object()
        if self.kube.get_or_none(resources.NODES, self.name) is None:
            self.kube.create(resources.NODES, node)
        self.kube.patch(resources.NODES, self.name, {"status": node["status"]},
                        subresource="status")
        lease = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                 "metadata": {"name": self.name, "namespace": "kube-node-lease"},
                 "spec": {"holderIdentity": self.name, "leaseDurationSeconds": 40,
                          "renewTime": times.micro_now()}}
        if self.kube.get_or_none(resources.LEASES, self.name, "kube-node-lease") is None:
            self.kube.create(resources.LEASES, lease)

    def _beat(self) -> None:
        while not self._stop.wait(self.heartbeat):
            try:
                self.kube.patch(resources.LEASES, self.name,
                                {"spec": {"renewTime": times.micro_now()}}, "kube-node-lease")
            except Exception as err:
                logger.debug("heartbeat failed: %s", err)
            self._push_node_status()

    # -- node-pressure eviction -------------------------------------------------------

    def _watch_memory(self) -> None:
        while not self._stop.wait(pressure.CHECK_EVERY):
            try:
                self.check_memory()
            except Exception:
                logger.exception("memory pressure check failed")

    def check_memory(self) -> None:
        """One pass of the eviction manager for ``memory.available``: the condition, and
        one eviction while under the threshold."""
        threshold = self.memory_threshold
        available = memstats.available()
        met = available is not None and pressure.under(threshold, available)
        now = time.monotonic()
        active = self.memory_pressure.observe(met=met, now=now)
        if active != self._under_pressure:
            self._under_pressure = active
            self._pressure_since = times.now()
            logger.warning("node %s: MemoryPressure=%s (available %s, threshold %s)",
                           self.name, active, available,
                           threshold.text if threshold is not None else None)
            self._push_node_status()
        if not met or threshold is None or available is None:
            return
        with self._lock:
            workers = list(self._workers.values())
        if any(w.eviction_pending for w in workers):
            return  # upstream waits for the last evicted pod to be cleaned up
        uses = {w.uid: pressure.pod_use(w.uid, w.pod, w.memory_use()) for w in workers
                if not w.finished.is_set() and not w.stopping.is_set()}
        ranked = pressure.rank([u for u in uses.values() if u.containers])
        if not ranked:
            logger.warning("node %s: under memory pressure (available %d bytes) with no pod"
                           " to evict", self.name, available)
            return
        victim = ranked[0]
        worker = next(w for w in workers if w.uid == victim.key)
        worker.evict_for_pressure(pressure.eviction_message(threshold, available, victim))

    def _push_node_status(self) -> None:
        try:
            self.kube.patch(resources.NODES, self.name, {"status": self._node_status()},
                            subresource="status")
        except Exception as err:
            logger.debug("node status update failed: %s", err)

    def _admit(self, pod: Obj) -> bool:
        """Upstream's eviction admission: under MemoryPressure a new BestEffort pod fails
        at once (Failed, reason Evicted, "Pod was rejected: ..."), never runs here."""
        refusal = pressure.admit(pod, pressure=self._under_pressure)
        if refusal is None:
            return True
        reason, message = refusal
        meta = pod["metadata"]
        logger.warning("pod %s/%s rejected: %s", meta["namespace"], meta["name"], message)
        self.events.emit(pod, "Warning", reason, message, kind="Pod")
        try:
            self.kube.patch(resources.PODS, meta["name"], {"status": {
                "phase": "Failed", "reason": reason, "message": "Pod was rejected: " + message,
                "qosClass": "BestEffort"}}, meta["namespace"], subresource="status")
        except KubeError as err:
            logger.debug("rejecting %s/%s: %s", meta["namespace"], meta["name"], err)
            return False
        self._completed.add(meta["uid"])
        return False

    # -- scheduling and pods ---------------------------------------------------------

    def reconcile(self) -> None:
        pods = self.pods.list()
        self._collect_pod_dirs({p["metadata"]["uid"] for p in pods})
        for pod in pods:
            meta, spec = pod["metadata"], pod.get("spec") or {}
            phase = (pod.get("status") or {}).get("phase")
            if not spec.get("nodeName"):
                if not meta.get("deletionTimestamp"):
                    self._schedule(pod)
                continue
            if spec["nodeName"] != self.name:
                continue
            if phase in (None, "Pending") and not meta.get("deletionTimestamp"):
                self._select_node(pod)
            with self._lock:
                running = self._workers.get(meta["uid"])
                if running is not None:
                    running.wake()  # its pod or a claim changed: a deletion, a bound volume
                    continue
                if meta["uid"] in self._completed or self._stop.is_set():
                    continue
                if phase in ("Succeeded", "Failed"):
                    continue
                if not meta.get("deletionTimestamp") and not self._admit(pod):
                    continue
                if meta.get("deletionTimestamp") and not (pod.get("status") or {}).get(
                        "containerStatuses"):
                    # never ran here: nothing to stop
                    self.kube.delete(resources.PODS, meta["name"], meta["namespace"],
                                     grace_period=0, uid=meta["uid"])
                    continue
                worker = PodWorker(self, pod)
                self._workers[meta["uid"]] = worker
            worker.start()

    def _select_node(self, pod: Obj) -> bool:
        """Set selected-node on the pod's unbound WaitForFirstConsumer claims; False while
        a claim or its class is not known yet (the pod cannot be placed)."""
        ns = pod["metadata"]["namespace"]
        classes = {sc["metadata"]["name"]: sc for sc in self.storage_classes.list()}
        for claim_name in podvolumes.claim_names(pod):
            claim = self.claims.get(claim_name, ns)
            if claim is None:
                return False
            if (claim.get("spec") or {}).get("volumeName"):
                continue
            sc = classes.get(claims.claim_class_name(claim, classes) or "")
            if sc is None:
                return False
            ann = claim["metadata"].get("annotations") or {}
            if sc.get("volumeBindingMode") == "WaitForFirstConsumer" and \
                    ann.get(claims.SELECTED_NODE) != self.name:
                self.kube.patch(resources.PVCS, claim_name,
                                {"metadata": {"annotations": {
                                    claims.SELECTED_NODE: self.name}}}, ns)
        return True

    def _collect_pod_dirs(self, uids: set[str]) -> None:
        """Remove the directories (logs, volumes' files) of pods that no longer exist."""
        with self._lock:
            keep = uids | set(self._workers)
            self._completed &= uids
        for uid in os.listdir(self.pods_dir):
            if uid not in keep:
                shutil.rmtree(os.path.join(self.pods_dir, uid), ignore_errors=True)

    def _fits(self, pod: Obj) -> bool:
        """nodeSelector against this node's labels (affinity and taints are not checked)."""
        selector = (pod.get("spec") or {}).get("nodeSelector") or {}
        labels = self._node_object()["metadata"]["labels"]
        return all(labels.get(k) == v for k, v in selector.items())

    def _unschedulable(self, pod: Obj) -> None:
        conditions = (pod.get("status") or {}).get("conditions") or []
        if any(c.get("type") == "PodScheduled" and c.get("reason") == "Unschedulable"
               for c in conditions):
            return
        meta = pod["metadata"]
        self.kube.patch(resources.PODS, meta["name"], {"status": {"phase": "Pending",
                        "conditions": [{"type": "PodScheduled", "status": "False",
                                        "reason": "Unschedulable", "lastProbeTime": None,
                                        "lastTransitionTime": times.now(),
                                        "message": "0/1 nodes are available: 1 node(s) didn't "
                                                   "match Pod's node affinity/selector."}]}},
                        meta["namespace"], subresource="status")

    def _schedule(self, pod: Obj) -> None:
        meta = pod["metadata"]
        ns = meta["namespace"]
        if not self._fits(pod):
            self._unschedulable(pod)
            return
        if not self._select_node(pod):
            return
        binding = {"apiVersion": "v1", "kind": "Binding",
                   "metadata": {"name": meta["name"], "namespace": ns},
                   "target": {"apiVersion": "v1", "kind": "Node", "name": self.name}}
        try:
            self.kube.request("POST", resources.PODS.path(ns, meta["name"], "binding"),
                              body=binding)
            logger.info("scheduled pod %s/%s on %s", ns, meta["name"], self.name)
            self._scheduler_events.emit(pod, "Normal", "Scheduled",
                                        f"Successfully assigned {ns}/{meta['name']} to "
                                        f"{self.name}", kind="Pod")
        except KubeError as err:
            logger.debug("binding %s/%s: %s", ns, meta["name"], err)

    def worker_done(self, worker: PodWorker, *, completed: bool = False) -> None:
        with self._lock:
            self._workers.pop(worker.uid, None)
            if completed:
                self._completed.add(worker.uid)
        self.loop.wake()

    def worker(self, namespace: str, name: str) -> PodWorker | None:
        with self._lock:
            for w in self._workers.values():
                if (w.namespace, w.name) == (namespace, name):
                    return w
        return None

    # -- what workers need -----------------------------------------------------------

    def config_data(self, pod: Mapping[str, Any]) -> tuple[dict[str, dict[str, str]],
                                                            dict[str, dict[str, str]]]:
        ns = pod["metadata"]["namespace"]
        cm_names, secret_names = referenced_names(pod)
        cms = {}
        for n in cm_names:
            cm = self.configmaps.get(n, ns)
            if cm is not None:
                data = dict(cm.get("data") or {})
                for k, v in (cm.get("binaryData") or {}).items():
                    data[k] = base64.b64decode(v).decode("utf-8", errors="replace")
                cms[n] = data
        secrets = {}
        for n in secret_names:
            s = self.secrets.get(n, ns)
            if s is not None:
                data = {k: base64.b64decode(v).decode("utf-8", errors="replace")
                        for k, v in (s.get("data") or {}).items()}
                data.update(s.get("stringData") or {})
                secrets[n] = data
        return cms, secrets

    def pod_context(self, worker: PodWorker) -> podvolumes.PodContext:
        pod = worker.pod
        ns = worker.namespace
        cms, secrets = self.config_data(pod)
        sa = (pod.get("spec") or {}).get("serviceAccountName") or "default"
        # only the claims the pod names, and their volumes: copying every claim of the
        # namespace and every volume, at each step of each pod, was a tenth of the
        # node's CPU with twenty imports at once
        claims: dict[str, Obj] = {}
        volumes: dict[str, Obj] = {}
        for vol in (pod.get("spec") or {}).get("volumes") or []:
            name = str((vol.get("persistentVolumeClaim") or {}).get("claimName") or "")
            claim = self.claims.get(name, ns) if name else None
            if claim is None:
                continue
            claims[name] = claim
            pv_name = str((claim.get("spec") or {}).get("volumeName") or "")
            pv = self.pvs.get(pv_name) if pv_name else None
            if pv is not None:
                volumes[pv_name] = pv
        return podvolumes.PodContext(
            pod_dir=worker.pod_dir, pod_ip=worker.pod_ip, host_ip=self.host_ip,
            configmaps=cms, secrets=secrets,
            claims=claims, volumes=volumes,
            token=lambda audience=None, expiration_seconds=podvolumes.DEFAULT_TOKEN_SECONDS:
            self.token_for(ns, sa, pod_name=worker.name, pod_uid=worker.uid,
                           audiences=(audience,) if audience else (),
                           expiration_seconds=expiration_seconds),
            ca_pem=self.ca_pem,
            node_cpu_millis=self.cpu_millis, node_memory=self.memory_bytes,
            images=self.image_store)

    # -- exec and attach ---------------------------------------------------------------

    async def exec_provider(self, *, namespace: str, pod: str, container: str,
                            command: list[str], stdin: bool, tty: bool,
                            attach: bool = False) -> execs.ExecSession | execs.AttachSession:
        """For the API server's ``pods/<name>/exec`` and ``attach`` (remotecommand.py)."""
        worker = self.worker(namespace, pod)
        slot = next((s for s in (worker.init_slots + worker.slots if worker else [])
                     if s.spec["name"] == container), None)
        proc = slot.process if slot is not None else None
        main_pid = proc.main_pid() if proc is not None and proc.poll() is None else None
        if proc is None or main_pid is None:
            raise LookupError(f'container "{container}" in pod "{pod}" is not running')
        if attach:
            session = execs.AttachSession(asyncio.get_running_loop())
            session.detach = proc.listen(session.feed)
            return session
        conf = proc.spec.confinement
        fd = execs.filter_fd(conf)
        try:
            argv = execs.exec_argv(target_pid=main_pid, confinement=conf, command=command,
                                   tty=tty, python=self.python, seccomp_fd=fd)
            env = dict(proc.spec.env)
            if tty:
                env.setdefault("TERM", "xterm")
            return await execs.ExecSession.start(
                argv, env=env, stdin=stdin, tty=tty, pass_fds=(fd,) if fd is not None else (),
                pts_dir=f"/proc/{main_pid}/root/dev/pts", preexec=proc.cgroup_join())
        finally:
            if fd is not None:
                with contextlib.suppress(OSError):
                    os.close(fd)

    # -- logs ------------------------------------------------------------------------

    def log_provider(
        self, *, namespace: str, pod: str, container: str, follow: bool = False,
        tail_lines: int | None = None, previous: bool = False, timestamps: bool = False,
        since_seconds: int | None = None, limit_bytes: int | None = None,
    ) -> AsyncIterator[bytes]:
        """For the API server's ``pods/<name>/log``."""
        worker = self.worker(namespace, pod)
        path = self._log_path(namespace, pod, container, previous, worker)
        return logs.stream(path, worker, container, follow=follow, timestamps=timestamps,
                           tail_lines=tail_lines, since_seconds=since_seconds,
                           limit_bytes=limit_bytes)

    def _log_path(self, namespace: str, pod: str, container: str, previous: bool,
                  worker: PodWorker | None) -> str:
        if worker is not None:
            for slot in worker.init_slots + worker.slots:
                if slot.spec["name"] == container:
                    paths = slot.log_paths
                    index = -2 if previous else -1
                    if len(paths) < (2 if previous else 1):
                        raise LookupError("previous terminated container not found" if previous
                                          else "container has not started")
                    return paths[index]
            raise LookupError(f"no container {container}")
        obj = self.pods.get(pod, namespace)
        if obj is None:
            raise LookupError(f"pod {pod} not found")
        logs = os.path.join(self.pods_dir, obj["metadata"]["uid"], "logs", container)
        runs = sorted((int(f.split(".")[0]) for f in os.listdir(logs) if f.endswith(".log")),
                      reverse=True) if os.path.isdir(logs) else []
        index = 1 if previous else 0
        if len(runs) <= index:
            raise LookupError("no logs on this node")
        return os.path.join(logs, f"{runs[index]}.log")
