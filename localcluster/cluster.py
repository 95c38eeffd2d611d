"""The whole single-node cluster in one process: API server, storage, node, controllers.

``Cluster(data_dir, options).start()`` takes the data dir's lock (a second ``rootdisk up`` on the
same dir is refused), re-attaches the volumes (undoing what a killed run left), starts
the API server (kubeconfig at ``<data dir>/kubeconfig``), installs the StorageClasses
and the volume snapshot API, starts the provisioner/binder, the snapshot controller, the
kubelet, the Service and workload controllers, then applies ``manifests/`` through the
API as a user would. ``stop()`` undoes it in reverse; volume data and API objects stay for
the next start.

Where it differs from a real cluster (on purpose, documented where it is done):

- Pods share the host's network namespace; each gets its own 127.x.y.z address (also in
  ``POD_IP``; the /16 is chosen per data dir, see kube/addresses.py), and servers in
  pods must bind it rather than 0.0.0.0 to run side by side.
- Services get a 127.x.y.z clusterIP and Endpoints, but there is no proxy: "resolving" a
  Service (what the API server does for admission webhooks) yields a ready endpoint's
  pod IP and target port (services/controller.py).
- Deployments roll out through ReplicaSets as kube-controller-manager does (RollingUpdate
  and Recreate, revisions, history, the scale subresource: ``kubectl rollout`` and
  ``kubectl scale`` work); DaemonSets keep no ControllerRevisions; StatefulSets, Jobs
  and CronJobs are stored but have no controller.
- Only the images of the table the caller passes (``Options.images``; ``rootdisk up``
  passes rootdisk's programs) run, as programs of the host (kubelet/images.py); others
  ErrImagePull.
- exec/grpc probes are not run (httpGet and tcpSocket are); no port-forward/exec/attach.
- A Filesystem volume grows offline when the kernel refuses online resize (containers
  lack CAP_SYS_RESOURCE): the claim shows FileSystemResizePending until its pod is gone.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import shutil
import signal
import stat
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

import kubeclient
from kubeclient import Client, resources
from localcluster.apiserver.threaded import ServerThread
from localcluster.kube.addresses import networks_for
from localcluster.kube.informer import Informer
from localcluster.kubelet import images, pressure, restarts
from localcluster.kubelet.node import Node
from localcluster.services.controller import ServiceController
from localcluster.storage import snapshot_api
from localcluster.storage.controller import StorageController, install_classes
from localcluster.storage.snapshot_controller import SnapshotController, install_snapshot_api
from localcluster.storage.snapshots import SnapshotStore
from localcluster.storage.volumes import DEFAULT_REFLINK_POOL_SIZE, VolumeManager
from localcluster.workloads.apply import apply_manifests
from localcluster.workloads.apps import AppsController

logger = logging.getLogger(__name__)

REQUIRED_TOOLS = ("losetup", "mount", "umount", "mkfs.ext4", "e2fsck", "resize2fs",
                  "mkfs.xfs", "fsfreeze", "blockdev", "bwrap")
LOCK_FILE = "rootdisk-up.lock"
PID_FILE = "rootdisk-up.pid"


class ClusterError(Exception):
    """The cluster cannot start or stop as asked (the message says why)."""


def default_data_dir() -> str:
    state = os.environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"),
                                                              ".local", "state")
    return os.path.join(state, "rootdisk")


def default_manifests_dir() -> str:
    return str(Path(__file__).resolve().parent.parent / "manifests")


@dataclass(kw_only=True)
class Options:
    images: Mapping[str, Sequence[str]]
    """The image table: image name (``owner/program``) → the argv it stands for; the
    node runs no other image (rootdisk/images.py is rootdisk's)."""
    port: int = 0
    manifests: str | None = None
    """Directory with crds/, rbac/, deploy/; None: the checkout's manifests/."""
    extra_images: dict[str, list[str]] = field(default_factory=dict)
    backoff: restarts.BackoffSettings = field(default_factory=restarts.BackoffSettings)
    reflink_pool_size: int = DEFAULT_REFLINK_POOL_SIZE
    heartbeat: float = 10.0
    shutdown_grace: float = 5.0
    eviction_hard_memory: str | None = pressure.DEFAULT_HARD
    pod_pids_limit: int = -1
    """The kubelet's ``podPidsLimit``: the most processes (threads included) each pod
    may have; -1 (upstream's default): no limit."""
    """The kubelet's ``memory.available`` hard eviction threshold (``100Mi``, ``5%``);
    None or "0": no node-pressure eviction."""


DATA_DIR_MODE = 0o700


def secure_data_dir(path: str) -> None:
    """Create the data directory 0700, or tighten a looser one with a warning: it holds
    the store (Secrets), the CA key, tokens and the pods' volumes."""
    os.makedirs(path, mode=DATA_DIR_MODE, exist_ok=True)
    mode = stat.S_IMODE(os.stat(path).st_mode)
    if mode != DATA_DIR_MODE:
        logger.warning("data directory %s was mode %04o: tightened to %04o (it holds "
                       "Secrets)", path, mode, DATA_DIR_MODE)
        os.chmod(path, DATA_DIR_MODE)


class Cluster:
    def __init__(self, data_dir: str, options: Options) -> None:
        self.data_dir = os.path.realpath(data_dir)
        self.options = options
        self._lock_fh: IO[str] | None = None
        self.api: ServerThread | None = None
        self.kube: Client | None = None
        self.volumes: VolumeManager | None = None
        self.node: Node | None = None
        self._informers: list[Informer] = []
        self._controllers: list[StorageController | SnapshotController | ServiceController
                                | AppsController] = []

    @property
    def kubeconfig(self) -> str:
        return os.path.join(self.data_dir, "kubeconfig")

    # -- the lock --------------------------------------------------------------------

    def _take_lock(self) -> None:
        secure_data_dir(self.data_dir)
        fh = open(os.path.join(self.data_dir, LOCK_FILE), "a+")  # noqa: SIM115
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            fh.close()
            pid = read_pid(self.data_dir)
            raise ClusterError(
                f"a cluster is already running on {self.data_dir}"
                + (f" (pid {pid})" if pid else "") + "; stop it with `rootdisk down`") from None
        self._lock_fh = fh
        with open(os.path.join(self.data_dir, PID_FILE), "w", encoding="ascii") as pf:
            pf.write(f"{os.getpid()}\n")

    def _release_lock(self) -> None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(os.path.join(self.data_dir, PID_FILE))
        if self._lock_fh is not None:
            fcntl.flock(self._lock_fh, fcntl.LOCK_UN)
            self._lock_fh.close()
            self._lock_fh = None

    # -- start/stop ------------------------------------------------------------------

    def start(self) -> None:
        self._take_lock()
        try:
            self._start()
        except BaseException:
            self.stop()
            raise

    def _preflight(self) -> None:
        if os.geteuid() != 0:
            raise ClusterError("localcluster needs root: volumes are loop devices and mounts"
                               " (run rootdisk up as root)")
        missing = [tool for tool in REQUIRED_TOOLS if shutil.which(tool) is None]
        if missing:
            raise ClusterError(f"missing programs: {', '.join(missing)} (make setup installs "
                               "them: util-linux, e2fsprogs, xfsprogs, bubblewrap)")

    def _start(self) -> None:
        self._preflight()
        opts = self.options
        self.volumes = VolumeManager(self.data_dir, reflink_pool_size=opts.reflink_pool_size,
                                     in_use=self._volume_in_use)
        self.volumes.start()
        self.api = ServerThread(self.data_dir, port=opts.port)
        server = self.api.start()
        self.kube = kube = Client.connect(self.kubeconfig, pool_size=64)
        install_classes(kube)
        install_snapshot_api(kube)

        def informer(res: kubeclient.Resource) -> Informer:
            inf = Informer(kube, res)
            self._informers.append(inf)
            return inf

        pods, pvcs = informer(resources.PODS), informer(resources.PVCS)
        pvs = informer(resources.PVS)
        scs = informer(resources.STORAGECLASSES)
        vss, vscs, vsclasses = (informer(snapshot_api.SNAPSHOTS), informer(snapshot_api.CONTENTS),
                                informer(snapshot_api.SNAPSHOT_CLASSES))
        cms, secrets = informer(resources.CONFIGMAPS), informer(resources.SECRETS)
        services, eps = informer(resources.SERVICES), informer(resources.ENDPOINTS)
        deps, rss, dss, nodes = (informer(resources.DEPLOYMENTS), informer(resources.REPLICASETS),
                                 informer(resources.DAEMONSETS), informer(resources.NODES))
        for inf in self._informers:
            inf.start()
        extras = images.load_extra_images(os.environ.get(images.ENV_EXTRA_IMAGES))
        extras.update({k: tuple(v) for k, v in opts.extra_images.items()})
        pod_cidr, service_cidr = networks_for(self.data_dir)
        url_host, _, url_port = server.url.removeprefix("https://").rpartition(":")
        self.node = Node(
            kube, data_dir=self.data_dir, api_host=url_host, api_port=int(url_port),
            ca_pem=server.ca_path.read_text(), token_for=server.token_for_service_account,
            pods=pods, claims=pvcs, volumes=pvs, storage_classes=scs, configmaps=cms,
            secrets=secrets, images=images.ImageTable.merged(opts.images, extras),
            backoff=opts.backoff, heartbeat=opts.heartbeat,
            shutdown_grace=opts.shutdown_grace, volume_manager=self.volumes,
            eviction_hard_memory=opts.eviction_hard_memory,
            pod_pids_limit=opts.pod_pids_limit,
            pod_cidr=pod_cidr)
        store = SnapshotStore(self.volumes)
        storage = StorageController(kube, self.volumes, node=self.node.name, claims=pvcs,
                                    pvs=pvs, storage_classes=scs, pods=pods, snapshots=vss,
                                    contents=vscs, store=store)
        snapshots = SnapshotController(kube, store, snapshots=vss, contents=vscs,
                                       snapshot_classes=vsclasses, claims=pvcs, pvs=pvs,
                                       storage_classes=scs)
        svc = ServiceController(kube, services=services, endpoints_=eps, pods=pods,
                                service_cidr=service_cidr)
        apps = AppsController(kube, deployments=deps, replicasets=rss, daemonsets=dss,
                              pods=pods, nodes=nodes)
        self._controllers = [storage, snapshots, svc, apps]
        server.set_log_provider(self.node.log_provider)
        server.set_exec_provider(self.node.exec_provider)
        server.set_service_resolver(svc.resolve)
        self.node.start()
        for c in self._controllers:
            c.start()
        for inf in self._informers:
            inf.synced.wait(30)
        manifests = opts.manifests or default_manifests_dir()
        if os.path.isdir(manifests):
            applied = apply_manifests(kube, manifests)
            logger.info("applied %d objects from %s", len(applied), manifests)

    def _volume_in_use(self, name: str) -> bool:
        return self.node is not None and self.node.in_use(name)

    def stop(self) -> None:
        if self.node is not None:
            self.node.stop()
            self.node = None
        for c in self._controllers:
            c.stop()
        self._controllers = []
        for inf in self._informers:
            inf.stop()
        self._informers = []
        if self.api is not None:
            self.api.server.set_log_provider(None)
            self.api.server.set_exec_provider(None)
            self.api.stop()
            self.api = None
        if self.kube is not None:
            self.kube.close()
            self.kube = None
        if self.volumes is not None:
            self.volumes.stop()
            self.volumes = None
        self._release_lock()

    def run_until_signalled(self) -> None:
        """Block until SIGINT/SIGTERM (main thread only)."""
        stop = threading.Event()
        previous = {s: signal.signal(s, lambda *_: stop.set())
                    for s in (signal.SIGINT, signal.SIGTERM)}
        try:
            while not stop.wait(1.0):
                pass
        finally:
            for s, h in previous.items():
                signal.signal(s, h)


def read_pid(data_dir: str) -> int | None:
    try:
        with open(os.path.join(data_dir, PID_FILE), encoding="ascii") as fh:
            return int(fh.read().strip())
    except (FileNotFoundError, ValueError):
        return None


def is_running(data_dir: str) -> bool:
    """Whether some process holds the data dir's lock."""
    path = os.path.join(os.path.realpath(data_dir), LOCK_FILE)
    if not os.path.exists(path):
        return False
    with open(path, "a+") as fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        fcntl.flock(fh, fcntl.LOCK_UN)
        return False


def signal_stop(data_dir: str, *, timeout: float = 60.0) -> bool:
    """SIGTERM the cluster running on ``data_dir`` and wait for it to let go of the lock.
    Returns False when nothing was running."""
    data_dir = os.path.realpath(data_dir)
    if not is_running(data_dir):
        return False
    pid = read_pid(data_dir)
    if pid is None:
        raise ClusterError(f"a cluster holds {data_dir} but its pid file is missing")
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while is_running(data_dir):
        if time.monotonic() > deadline:
            raise ClusterError(f"the cluster (pid {pid}) did not stop within {timeout:.0f}s")
        time.sleep(0.2)
    return True
