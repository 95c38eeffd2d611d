"""One thread per pod: prepare its volumes, run its containers, report its status.

The worker is the kubelet's pod state machine: init containers one after the other,
then every container; a container that exits is restarted or not per restartPolicy,
after the crash-loop back-off; the pod's status (restartPolicy-aware phase, container
states, termination messages) is pushed through the status subresource whenever it
changes. Deletion is graceful: SIGTERM, the grace period, SIGKILL, then the pod object
is deleted for good (``gracePeriodSeconds=0``).
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

import sizes
from kubeclient import Client, KubeError, resources
from localcluster.kube import times
from localcluster.kube.addresses import AddressPool
from localcluster.kube.events import EventRecorder
from localcluster.kube.informer import Informer
from localcluster.kubelet import (
    eviction,
    execs,
    images,
    ownership,
    podvolumes,
    probes,
    restarts,
    security,
    status,
)
from localcluster.kubelet.cgroups import CgroupManager, Limits, PodCgroup
from localcluster.kubelet.env import ConfigError, container_env
from localcluster.kubelet.sandbox import Container, Mount, SandboxError, SandboxSpec

logger = logging.getLogger(__name__)

TICK = 0.1
"""Most seconds between looks at the containers while something is under way (a start,
a back-off timer, volumes not ready, a status not stored yet). A container's exit and a
change of the pod or its claims wake the worker at once (:meth:`PodWorker.wake`), so a
finished container is reported without waiting for the next tick."""
IDLE_TICK = 1.0
"""Most seconds between looks at a steady pod (every container running or done, its
status stored): it is looked at when a probe is due, else once a second (service
account tokens are rotated on a look)."""


class NodeServices(Protocol):
    """What a pod worker needs from its node (kubelet/node.py's :class:`Node` is one).

    Declared here, next to its one user, so the worker does not import the node that
    creates it: the node imports the worker, never the other way round.
    """

    kube: Client
    pods: Informer
    pods_dir: str
    pod_ips: AddressPool
    events: EventRecorder
    images: images.ImageTable
    backoff: restarts.BackoffSettings
    cgroups: CgroupManager
    pod_pids_limit: int
    shutdown_grace: float
    python: str
    default_path: str
    project_root: str
    api_host: str
    api_port: int
    host_ip: str
    cpu_millis: int
    memory_bytes: int

    def config_data(self, pod: Mapping[str, Any]) -> tuple[dict[str, dict[str, str]],
                                                            dict[str, dict[str, str]]]: ...

    def pod_context(self, worker: PodWorker) -> podvolumes.PodContext: ...

    def finish_resizes(self, worker: PodWorker) -> None: ...

    def worker_done(self, worker: PodWorker, *, completed: bool = False) -> None: ...


@dataclass
class Slot:
    """Everything about one container of the pod across its restarts."""

    spec: Mapping[str, Any]
    record: status.ContainerRecord
    init: bool = False
    process: Container | None = None
    instance: int = -1
    """Number of the current/last run; its log is ``logs/<name>/<instance>.log``."""
    backoff: float | None = None
    restart_at: float = 0.0
    image_failures: int = 0
    log_paths: list[str] = field(default_factory=list)
    readiness: probes.ProbeTracker | None = None
    liveness: probes.ProbeTracker | None = None


def next_look(slots: list[Slot], *, now: float, steady: bool) -> float:
    """Seconds until a worker looks at its pod again unwoken (pure): :data:`TICK` while
    something is under way; for a steady pod, until its first probe is due, at most
    :data:`IDLE_TICK`."""
    if not steady:
        return TICK
    due = [t.next_at for s in slots if not s.record.done
           for t in (s.readiness, s.liveness) if t is not None]
    return max(0.0, min([IDLE_TICK, *(d - now for d in due)]))


class PodWorker(threading.Thread):
    def __init__(self, node: NodeServices, pod: Mapping[str, Any]) -> None:
        meta = pod["metadata"]
        super().__init__(daemon=True, name=f"pod:{meta['namespace']}/{meta['name']}")
        self.node = node
        self.namespace: str = meta["namespace"]
        self.name: str = meta["name"]
        self.uid: str = meta["uid"]
        self.pod_dir = os.path.join(node.pods_dir, self.uid)
        self.pod: Mapping[str, Any] = pod
        self.pod_ip = ""
        self.start_time = times.now()
        self.stopping = threading.Event()
        """Set by the node at shutdown: stop containers, leave the pod object alone."""
        self.finished = threading.Event()
        self._wake = threading.Event()
        self._last_status: dict[str, Any] | None = None
        self._completed = False
        self._message = ""
        self._reason = ""
        spec = pod.get("spec") or {}
        self.policy: str = spec.get("restartPolicy") or restarts.ALWAYS
        old = {c.get("name"): c for c in (pod.get("status") or {}).get("containerStatuses") or []}
        self.init_slots = [self._slot(c, init=True) for c in spec.get("initContainers") or []]
        self.slots = [self._slot(c, old=old.get(c.get("name"))) for c in spec["containers"]]
        self._volumes: dict[str, podvolumes.HostVolume] | None = None
        self._pod_cgroup: PodCgroup | None = None
        """The pod's pids.max (podPidsLimit), made when the worker starts."""
        self._env: dict[str, dict[str, str]] = {}
        self._tokens: list[podvolumes.ProjectedToken] = []
        self._mint: Callable[..., str] = str
        self._storage_limits = eviction.all_limits(pod)
        self._empty_dirs = {str(v.get("name")) for v in spec.get("volumes") or []
                            if isinstance(v.get("emptyDir"), Mapping)}
        self._next_usage_check = 0.0
        self._evicted = False
        self._pressure_eviction: str | None = None
        """Set (by the node's pressure check, from its thread) to evict the pod with
        this message at its next step."""

    @staticmethod
    def _slot(c: Mapping[str, Any], *, init: bool = False,
              old: Mapping[str, Any] | None = None) -> Slot:
        rec = status.ContainerRecord(
            name=c["name"], image=c.get("image", ""),
            state=status.Waiting(status.CONTAINER_CREATING),
            restart_count=int((old or {}).get("restartCount") or 0))
        return Slot(spec=c, record=rec, init=init)

    # -- main loop -------------------------------------------------------------------

    def run(self) -> None:
        try:
            self.pod_ip = self.node.pod_ips.allocate(self.uid)
            os.makedirs(self.pod_dir, exist_ok=True)
            self._pod_cgroup = self.node.cgroups.pod(self.uid, self.node.pod_pids_limit)
            while not self.stopping.is_set():
                current = self.node.pods.get(self.name, self.namespace)
                if current is None or current["metadata"]["uid"] != self.uid:
                    self._kill_all(grace=0)
                    break
                self.pod = current
                if current["metadata"].get("deletionTimestamp"):
                    self._terminate(current)
                    break
                self._step()
                stored = self._push_status()
                if stored and self._finished_for_good():
                    logger.info("pod %s/%s: %s", self.namespace, self.name,
                                self._last_status["phase"] if self._last_status else "done")
                    self._completed = True
                    break
                self._wake.wait(self._next_look(stored=stored))
                self._wake.clear()
            else:
                self._kill_all(grace=self.node.shutdown_grace)
        except Exception:
            logger.exception("pod %s/%s: worker failed", self.namespace, self.name)
            self._kill_all(grace=0)
        finally:
            self.node.pod_ips.release(self.uid)
            for slot in self.init_slots + self.slots:
                if slot.process is not None:
                    slot.process.cleanup()
            if self._pod_cgroup is not None:
                self._pod_cgroup.remove()
            self.finished.set()
            self.node.worker_done(self, completed=self._completed)

    def _next_look(self, *, stored: bool) -> float:
        steady = stored and self._volumes is not None and all(
            s.record.done or (s.process is not None and s.process.poll() is None)
            for s in self.init_slots + self.slots)
        return next_look(self.init_slots + self.slots, now=time.monotonic(), steady=steady)

    def wake(self) -> None:
        """Look at the pod and its containers now rather than at the next tick."""
        self._wake.set()

    def stop(self) -> None:
        """Node shutdown: stop the containers, leave the pod object alone."""
        self.stopping.set()
        self._wake.set()

    def _finished_for_good(self) -> bool:
        """Every container is done and the final status (stored: the caller checked) is
        Succeeded or Failed: nothing left to do (logs stay on disk; deleting the pod then
        needs no grace period)."""
        if not all(s.record.done for s in self.init_slots + self.slots):
            return False
        return self._last_status is not None and self._last_status.get("phase") in (
            status.SUCCEEDED, status.FAILED)

    def _step(self) -> None:
        if self._evicted:
            return
        if self._pressure_eviction is not None:
            self._evict(self._pressure_eviction)
            return
        if self._volumes is None and not self._prepare():
            return
        if self._storage_limits and time.monotonic() >= self._next_usage_check:
            self._next_usage_check = time.monotonic() + eviction.CHECK_EVERY
            message = self._over_storage_limit()
            if message is not None:
                self._evict(message)
                return
        if self._tokens:
            podvolumes.rotate_tokens(self._tokens, self._mint, now=time.time())
        pending_init = [s for s in self.init_slots if not s.record.done]
        if pending_init:
            slot = pending_init[0]
            self._drive(slot)
            return
        for slot in self.slots:
            self._drive(slot)

    def _prepare(self) -> bool:
        """Volumes first: until they are ready every container waits ContainerCreating."""
        try:
            self.node.finish_resizes(self)
            ctx = self.node.pod_context(self)
            self._volumes = podvolumes.prepare(self.pod, ctx)
            self._tokens, self._mint = ctx.tokens, ctx.token
            self._message = self._reason = ""
            return True
        except podvolumes.VolumeNotReady as err:
            self._set_waiting_all(status.CONTAINER_CREATING, "")
            self._message = str(err)
            self._reason = ""
        except ConfigError as err:
            self._set_waiting_all(status.CREATE_CONTAINER_CONFIG_ERROR, str(err))
        except OSError as err:
            logger.warning("pod %s/%s: volumes: %s", self.namespace, self.name, err)
            self._set_waiting_all(status.CREATE_CONTAINER_CONFIG_ERROR, f"volumes: {err}")
        return False

    def _over_storage_limit(self) -> str | None:
        """The eviction message of the first local storage limit the pod is over, in
        upstream's order (an emptyDir's, the pod's, a container's), if any."""
        assert self._volumes is not None
        limits = self._storage_limits
        for limit in limits.empty_dirs:
            volume = self._volumes.get(limit.name)
            if volume is None:
                continue
            message = eviction.over(limit, eviction.usage(volume.host,
                                                          stop_above=limit.bytes))
            if message is not None:
                return message
        if not (limits.pod or limits.containers):
            return None
        used = {s.spec.get("name"): self._container_storage(s)
                for s in self.init_slots + self.slots}
        if limits.pod is not None:
            total = sum(used.values())
            for name, vol in self._volumes.items():
                if name in self._empty_dirs and total <= limits.pod.bytes:
                    total += eviction.usage(vol.host, stop_above=limits.pod.bytes - total)
            message = eviction.over(limits.pod, total)
            if message is not None:
                return message
        for limit in limits.containers:
            message = eviction.over(limit, used.get(limit.name, 0))
            if message is not None:
                return message
        return None

    @staticmethod
    def _container_storage(slot: Slot) -> int:
        """What one container holds of the node's local storage: its running sandbox's
        writable layer and its current log (the rotated part too)."""
        used = slot.process.writable_usage() if slot.process is not None else 0
        if slot.log_paths:
            for path in (slot.log_paths[-1], slot.log_paths[-1] + ".1"):
                with contextlib.suppress(OSError):
                    used += os.stat(path).st_blocks * 512
        return used

    def _evict(self, message: str) -> None:
        """As the kubelet's eviction manager: kill every container at once, no restart;
        the pod ends Failed, reason Evicted."""
        logger.warning("pod %s/%s: evicted: %s", self.namespace, self.name, message)
        self._evicted = True
        self._reason, self._message = eviction.REASON, message
        self.event("Warning", eviction.REASON, message)
        self._kill_all(grace=0)
        for slot in self.init_slots + self.slots:
            if not slot.record.done:
                slot.record = replace(slot.record, done=True)

    def evict_for_pressure(self, message: str) -> None:
        """Node-pressure eviction (called from the node's thread): the worker kills every
        container at its next step, at once."""
        self._pressure_eviction = message
        self._wake.set()

    @property
    def eviction_pending(self) -> bool:
        """Asked to be evicted for node pressure, or evicted and still stopping."""
        return self._pressure_eviction is not None and not self.finished.is_set()

    def memory_use(self) -> dict[str, int]:
        """Bytes of the node's memory each running container holds (its writable layer
        and its processes'), by container name."""
        out = {}
        for slot in self.init_slots + self.slots:
            proc = slot.process
            if proc is not None and not slot.record.done:
                out[str(slot.spec.get("name"))] = proc.memory_usage()
        return out

    def _set_waiting_all(self, reason: str, message: str) -> None:
        for slot in self.init_slots + self.slots:
            if isinstance(slot.record.state, status.Waiting):
                slot.record = replace(slot.record, state=status.Waiting(reason, message))

    def event(self, etype: str, reason: str, message: str) -> None:
        self.node.events.emit(self.pod, etype, reason, message, kind="Pod")

    # -- one container -----------------------------------------------------------------

    def _drive(self, slot: Slot) -> None:
        rec = slot.record
        if rec.done:
            return
        if slot.process is not None:
            code = slot.process.poll()
            if code is None:
                self._probe(slot)
                return
            self._finished(slot)
            return
        if time.monotonic() < slot.restart_at:
            return
        self._start(slot)

    def _start(self, slot: Slot) -> None:
        c = slot.spec
        try:
            entry = self.node.images.entry_point(c.get("image", ""))
        except images.ImageNotFound as err:
            slot.image_failures += 1
            reason = status.ERR_IMAGE_PULL if slot.image_failures % 2 else \
                status.IMAGE_PULL_BACK_OFF
            slot.record = replace(slot.record, state=status.Waiting(reason, str(err)))
            if slot.image_failures == 1:
                self.event("Warning", "Failed", f"Failed to pull image: {err}")
            slot.backoff = restarts.next_backoff(previous=slot.backoff, ran_for=0,
                                                 settings=self.node.backoff)
            slot.restart_at = time.monotonic() + slot.backoff
            return
        try:
            confinement = security.resolve(pod=self.pod, container=c)
            env = self._container_env(c, home=confinement.home)
            mounts = self._mounts(c) + self._devices(confinement)
        except (ConfigError, security.SecurityError, OSError) as err:
            slot.record = replace(slot.record, state=status.Waiting(
                status.CREATE_CONTAINER_CONFIG_ERROR, str(err)))
            slot.restart_at = time.monotonic() + 1.0
            return
        argv = images.container_argv(entry_point=entry, command=c.get("command"),
                                     args=c.get("args"), env=env)
        if argv and argv[0] == "python":
            argv[0] = self.node.python
        slot.instance += 1
        name = c["name"]
        log_path = os.path.join(self.pod_dir, "logs", name, f"{slot.instance}.log")
        term_file = os.path.join(self.pod_dir, "termination", f"{name}-{slot.instance}")
        os.makedirs(os.path.dirname(term_file), exist_ok=True)
        open(term_file, "wb").close()
        os.chmod(term_file, 0o666)  # noqa: S103 - as the kubelet: any container uid writes it
        spec = SandboxSpec(
            argv=argv, env=env, log_path=log_path, mounts=mounts,
            cwd=c.get("workingDir") or None, termination_host_file=term_file,
            termination_path=c.get("terminationMessagePath") or "/dev/termination-log",
            limits=self._limits(c), hostname=self.name[:63], confinement=confinement,
        )
        slot.process = Container(spec, cgroups=self.node.cgroups, pod_cgroup=self._pod_cgroup,
                                 name=f"{self.uid}-{name}-{slot.instance}", on_exit=self.wake)
        try:
            slot.process.start()
        except (SandboxError, OSError) as err:
            slot.process = None
            slot.record = replace(slot.record, state=status.Waiting("RunContainerError",
                                                                    str(err)))
            slot.restart_at = time.monotonic() + 1.0
            return
        slot.log_paths.append(log_path)
        started = time.monotonic()
        slot.readiness = probes.ProbeTracker(c["readinessProbe"], started) \
            if c.get("readinessProbe") else None
        slot.liveness = probes.ProbeTracker(c["livenessProbe"], started) \
            if c.get("livenessProbe") else None
        self.event("Normal", "Started", f"Started container {name}")
        restarted = slot.instance > 0 or slot.record.last_state is not None
        slot.record = replace(
            slot.record, state=status.Running(times.now()), ready=slot.readiness is None,
            restart_count=slot.record.restart_count + (1 if restarted else 0),
            container_id=f"localcluster://{self.uid}/{name}/{slot.instance}")
        logger.info("pod %s/%s: started container %s (%s)", self.namespace, self.name, name,
                    " ".join(argv[:4]))

    def _probe(self, slot: Slot) -> None:
        now = time.monotonic()
        tracker = slot.readiness
        if tracker is not None and tracker.due(now):
            ok = probes.run_probe(slot.spec["readinessProbe"], pod_ip=self.pod_ip,
                                  container=slot.spec, timeout=tracker.timeout,
                                  exec_runner=self._exec_runner(slot))
            ready = tracker.record(ok, time.monotonic())
            if ready != slot.record.ready:
                slot.record = replace(slot.record, ready=ready)
                if not ready:
                    self.event("Warning", "Unhealthy", "Readiness probe failed")
        tracker = slot.liveness
        if tracker is not None and tracker.due(now):
            ok = probes.run_probe(slot.spec["livenessProbe"], pod_ip=self.pod_ip,
                                  container=slot.spec, timeout=tracker.timeout,
                                  exec_runner=self._exec_runner(slot))
            tracker.record(ok, time.monotonic())
            threshold = int(tracker.spec.get("failureThreshold") or 3)
            if not ok and tracker.failures >= threshold and slot.process is not None:
                name = slot.spec["name"]
                self.event("Warning", "Unhealthy", "Liveness probe failed")
                self.event("Normal", "Killing",
                           f"Container {name} failed liveness probe, will be restarted")
                grace = float((self.pod.get("spec") or {}).get(
                    "terminationGracePeriodSeconds", 30))
                slot.process.stop(grace)
                self._finished(slot)

    def _exec_runner(self, slot: Slot) -> probes.ExecRunner | None:
        proc = slot.process
        if proc is None:
            return None
        python = self.node.python
        return lambda command, timeout: execs.run_in_container(proc, command, python=python,
                                                               timeout=timeout)

    def _finished(self, slot: Slot) -> None:
        proc = slot.process
        assert proc is not None
        code = proc.exit_code()
        started = slot.record.state.started_at if isinstance(
            slot.record.state, status.Running) else times.now()
        policy = slot.spec.get("terminationMessagePolicy") or "File"
        message = proc.termination_message(
            fallback_to_logs=policy == "FallbackToLogsOnError" and code != 0)
        terminated = status.Terminated(
            exit_code=code, started_at=started, finished_at=times.now(),
            reason=status.terminated_reason(code, oom_killed=proc.oom_killed()),
            message=message)
        ran_for = time.time() - proc.started_at
        proc.cleanup()
        slot.process = None
        policy_restart = restarts.ON_FAILURE if slot.init and self.policy == restarts.ALWAYS \
            else self.policy
        logger.info("pod %s/%s: container %s exited %d", self.namespace, self.name,
                    slot.spec["name"], code)
        if restarts.should_restart(policy=policy_restart, exit_code=code):
            slot.backoff = restarts.next_backoff(previous=slot.backoff, ran_for=ran_for,
                                                 settings=self.node.backoff)
            slot.restart_at = time.monotonic() + slot.backoff
            self.event("Warning", "BackOff", f"Back-off restarting failed container "
                       f"{slot.spec['name']} in pod {self.name}_{self.namespace}({self.uid})")
            slot.record = replace(slot.record, last_state=terminated, state=status.Waiting(
                status.CRASH_LOOP_BACK_OFF,
                f"back-off {slot.backoff:g}s restarting failed container={slot.spec['name']}"
                f" pod={self.name}_{self.namespace}({self.uid})"))
        else:
            slot.record = replace(slot.record, state=terminated, done=True)
            if slot.init and code != 0:
                for other in self.slots:  # the pod failed: its containers never run
                    other.record = replace(other.record, done=True,
                                           state=status.Waiting("PodInitializing"))

    # -- container inputs --------------------------------------------------------------

    def _container_env(self, c: Mapping[str, Any], *, home: str) -> dict[str, str]:
        configmaps, secrets = self.node.config_data(self.pod)
        extra = {
            "PATH": self.node.default_path,
            "HOME": home,
            "HOSTNAME": self.name[:63],
            "PYTHONPATH": self.node.project_root,
            "KUBERNETES_SERVICE_HOST": self.node.api_host,
            "KUBERNETES_SERVICE_PORT": str(self.node.api_port),
            "KUBERNETES_SERVICE_PORT_HTTPS": str(self.node.api_port),
            "KUBERNETES_PORT": f"tcp://{self.node.api_host}:{self.node.api_port}",
            # localcluster extension: pods share the host network, so servers in pods
            # bind their own address; this tells the project's programs which one.
            "POD_IP": self.pod_ip,
        }
        return container_env(pod=self.pod, container=c, pod_ip=self.pod_ip,
                             host_ip=self.node.host_ip, configmaps=configmaps, secrets=secrets,
                             node_cpu_millis=self.node.cpu_millis,
                             node_memory=self.node.memory_bytes, extra=extra)

    def _mounts(self, c: Mapping[str, Any]) -> list[Mount]:
        assert self._volumes is not None
        mounts = []
        for vm in c.get("volumeMounts") or []:
            hv = self._volumes.get(vm.get("name", ""))
            if hv is None:
                raise ConfigError(f"volumeMount {vm.get('name')!r}: no such volume")
            host = hv.host
            if vm.get("subPath"):
                host = podvolumes.sub_path(host, vm["subPath"])
            mounts.append(Mount(host, vm["mountPath"],
                                read_only=hv.read_only or bool(vm.get("readOnly")),
                                device=hv.device))
        for vd in c.get("volumeDevices") or []:
            hv = self._volumes.get(vd.get("name", ""))
            if hv is None:
                raise ConfigError(f"volumeDevice {vd.get('name')!r}: no such volume")
            mounts.append(Mount(hv.host, vd["devicePath"], device=True))
        sa = self._volumes.get(podvolumes.SA_VOLUME)
        if sa is not None:
            mounts.append(Mount(sa.host, podvolumes.SA_PATH, read_only=True))
        return mounts

    def _devices(self, conf: security.Confinement) -> list[Mount]:
        """Host devices the container asked for beyond the defaults (/dev/kvm), each
        as a node of the pod's own with the mode udev gives it on a host (0666)."""
        if conf.privileged:
            return []
        mounts = []
        for dev in conf.devices:
            if dev in security.DEFAULT_DEVICES:
                continue
            if not os.path.exists(dev):
                raise ConfigError(f"{dev} was requested ({security.KVM_RESOURCE}) but "
                                  f"this node has no {dev}")
            node = ownership.device_node(
                os.path.join(self.pod_dir, "devices", os.path.basename(dev)), dev, gid=None)
            os.chmod(node, 0o666)  # noqa: S103 - udev's mode for /dev/kvm
            mounts.append(Mount(node, dev, device=True))
        return mounts

    @staticmethod
    def _limits(c: Mapping[str, Any]) -> Limits:
        lim = (c.get("resources") or {}).get("limits") or {}
        memory = sizes.parse_bytes(lim["memory"]) if "memory" in lim else None
        cpu = sizes.to_millis(lim["cpu"]) if "cpu" in lim else None
        return Limits(memory=memory, cpu_millis=cpu)

    # -- status ------------------------------------------------------------------------

    def status(self) -> dict[str, Any]:
        st = status.pod_status(
            policy=self.policy, records=[s.record for s in self.slots], pod_ip=self.pod_ip,
            host_ip=self.node.host_ip, start_time=self.start_time, now=times.now(),
            message=self._message, reason=self._reason)
        if self.init_slots:
            st["initContainerStatuses"] = [status.container_status(s.record)
                                           for s in self.init_slots]
            if any(not s.record.done for s in self.init_slots):
                st["phase"] = status.PENDING
            elif any(isinstance(s.record.state, status.Terminated) and s.record.state.exit_code
                     for s in self.init_slots):
                st["phase"] = status.FAILED
        if self._evicted:
            st["phase"] = status.FAILED
        return st

    @staticmethod
    def _comparable(st: Mapping[str, Any]) -> dict[str, Any]:
        out = dict(st)
        out["conditions"] = [{k: v for k, v in c.items() if k != "lastTransitionTime"}
                             for c in st.get("conditions") or []]
        return out

    def _push_status(self) -> bool:
        """Store the pod's status if it changed; True when the stored one is current."""
        st = self.status()
        if self._last_status is not None and self._comparable(st) == self._comparable(
                self._last_status):
            return True
        patch = dict(st)
        for key in ("message", "reason", "podIP", "podIPs"):
            patch.setdefault(key, None)  # merge patch: absent keeps, null removes
        try:
            self.node.kube.patch(resources.PODS, self.name, {"status": patch}, self.namespace,
                                 subresource="status")
            self._last_status = st
            return True
        except KubeError as err:
            logger.debug("pod %s/%s: status update failed: %s", self.namespace, self.name, err)
            return False

    # -- stopping ----------------------------------------------------------------------

    def _kill_all(self, *, grace: float) -> None:
        running = [s for s in self.init_slots + self.slots if s.process is not None]
        for s in running:
            assert s.process is not None
            s.process.signal(15)
        deadline = time.monotonic() + grace
        for s in running:
            assert s.process is not None
            if s.process.wait(max(0.0, deadline - time.monotonic())) is None:
                s.process.kill()
            s.process.wait()
            self._finished_for_stop(s)

    def _finished_for_stop(self, slot: Slot) -> None:
        proc = slot.process
        assert proc is not None
        code = proc.exit_code()
        started = slot.record.state.started_at if isinstance(
            slot.record.state, status.Running) else times.now()
        slot.record = replace(slot.record, done=True, state=status.Terminated(
            exit_code=code, started_at=started, finished_at=times.now(),
            reason=status.terminated_reason(code)))
        proc.cleanup()
        slot.process = None

    def _terminate(self, pod: Mapping[str, Any]) -> None:
        meta = pod["metadata"]
        grace = float(meta.get("deletionGracePeriodSeconds") or 0)
        logger.info("pod %s/%s: deleting with grace %.0fs", self.namespace, self.name, grace)
        for slot in self.init_slots + self.slots:
            if slot.process is not None:
                self.event("Normal", "Killing", f"Stopping container {slot.spec['name']}")
        self._kill_all(grace=grace)
        self._push_status()
        try:
            self.node.kube.delete(resources.PODS, self.name, self.namespace, grace_period=0,
                                  uid=self.uid)
        except KubeError as err:
            logger.warning("pod %s/%s: final delete failed: %s", self.namespace, self.name, err)
        shutil.rmtree(self.pod_dir, ignore_errors=True)
