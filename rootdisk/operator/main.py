"""The operator's life: arguments, webhook certificate, leadership, then kopf.

Order matters: the HTTP side starts first (health, metrics, webhooks on every replica),
then the replica waits for the Lease, and only the holder runs kopf. Losing the Lease
(renewals failing for longer than its duration) stops kopf and exits non-zero, so the
pod restarts as a candidate; a clean stop releases the Lease for the next holder.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import signal
import socket
import ssl
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Sequence
from typing import Any

import kopf

from apiservice import cabundle
from cdi import kube as cdi_kube
from cdi.config import feature_gates
from kubeclient import Client, KubeError, connection_params, load_configuration
from kubeclient.resources import CDICONFIGS
from pki.certs import write_pair
from rootdisk.operator import kube, registry
from rootdisk.operator.server import LEADER, Server
from vocab.cdi import CONFIG_NAME

logger = logging.getLogger(__name__)

LOGIN_PRIORITY = 1000


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m rootdisk.operator",
                                description="rootdisk's controllers (kopf), by set.")
    p.add_argument("--controllers", required=True,
                   help=f"comma-separated controller sets: {', '.join(sorted(registry.SETS))}")
    p.add_argument("--namespace", default=os.environ.get("POD_NAMESPACE", "rootdisk"),
                   help="the operator's namespace (Lease, webhook Secret)")
    p.add_argument("--identity", default=os.environ.get("POD_NAME")
                   or f"{socket.gethostname()}-{uuid.uuid4().hex[:8]}")
    p.add_argument("--kubeconfig", default=None, help="default: in-cluster, else KUBECONFIG")
    p.add_argument("--bind", default="0.0.0.0", help="address of the HTTP endpoints")
    p.add_argument("--health-port", type=int, default=8080)
    p.add_argument("--webhook-port", type=int, default=8443, help="0: no webhooks")
    p.add_argument("--webhook-service", default="rootdisk-cdi-webhook")
    p.add_argument("--webhook-secret", default="rootdisk-cdi-webhook-tls")
    p.add_argument("--webhook-config", default="rootdisk-cdi")
    p.add_argument("--lease-duration", type=int, default=15)
    p.add_argument("--retry-period", type=float, default=2.0)
    return p.parse_args(argv)


@kopf.on.login()
def login(**_: Any) -> kopf.ConnectionInfo:
    """Through the same configuration as the operator's own client: in a pod the service
    account via KUBERNETES_SERVICE_HOST/PORT (kopf's own service-account login assumes
    the name kubernetes.default.svc resolves, and it does not without cluster DNS), else
    the kubeconfig named now (``--kubeconfig`` or $KUBECONFIG; kopf's client login reads
    $KUBECONFIG when the library is imported, before ``--kubeconfig`` is applied).
    Preferred over any login a handler module brings (kopf uses the highest priority
    first)."""
    return kopf.ConnectionInfo(**connection_params(load_configuration()),
                               priority=LOGIN_PRIORITY)


_kopf_stop: threading.Event | None = None
"""The stop flag of the kopf run in progress (:func:`_lead`)."""


@kopf.on.cleanup()
def end_stop_flag_wait(**_: Any) -> None:
    """kopf waits for a ``threading.Event`` stop flag in a thread of its event loop's
    default executor, and ``asyncio.run`` joins that executor's threads before it
    returns. When kopf stops on its own (SIGTERM, SIGINT) the flag is never set, and the
    process would hang there until the kubelet's grace period runs out and kills it,
    without releasing its Lease. Setting the flag at cleanup ends that wait."""
    if _kopf_stop is not None:
        _kopf_stop.set()


@kopf.on.startup()
def configure(settings: kopf.OperatorSettings, **_: Any) -> None:
    settings.posting.enabled = False           # controllers post their own Events
    settings.execution.max_workers = 16
    # kopf waits this long after each event for newer ones of the same object before a
    # handler runs (0.1 s by default). The handlers here are level-triggered (each reads
    # the object's current state), so the wait buys nothing but latency, and a DataVolume
    # crosses five or six such hops (DataVolume, claim, PVC', pod, rebind) on its way.
    settings.batching.batch_window = 0.01
    settings.watching.server_timeout = 120
    settings.watching.client_timeout = 150
    settings.networking.request_timeout = 60


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        sets = registry.resolve([s.strip() for s in args.controllers.split(",") if s.strip()])
    except registry.UnknownControllerSet as err:
        print(err, file=sys.stderr)
        return 2
    if args.kubeconfig:
        os.environ["KUBECONFIG"] = args.kubeconfig
    client = Client(load_configuration(args.kubeconfig))
    loaded = registry.load_handlers(sets)
    logger.info("controller sets %s: handlers %s", args.controllers, ", ".join(loaded))
    stop = threading.Event()
    with tempfile.TemporaryDirectory(prefix="rootdisk-operator-") as tmp:
        tls = None
        hooks = registry.webhooks(sets) if args.webhook_port else {}
        if hooks:
            tls, ca = _webhook_tls(client, args, tmp)
            threading.Thread(target=_keep_ca_bundle, args=(client, args, ca, stop),
                             name="ca-bundle", daemon=True).start()
        server = Server(host=args.bind, health_port=args.health_port,
                        webhook_port=args.webhook_port or None, webhooks=hooks,
                        exists=lambda kind, name, ns: cdi_kube.exists(client, kind, name, ns),
                        tls=tls,
                        metadata=lambda kind, name, ns: cdi_kube.metadata(client, kind, name, ns),
                        feature_gates=lambda: feature_gates(
                            client.get_or_none(CDICONFIGS, CONFIG_NAME)))
        server.start()
        previous = {s: signal.signal(s, lambda *_: stop.set())
                    for s in (signal.SIGTERM, signal.SIGINT)}
        lease_name = sets[0].lease or f"rootdisk-{args.controllers.replace(',', '-')}"
        elector = kube.Elector(client, namespace=args.namespace, name=lease_name,
                               identity=args.identity, duration=args.lease_duration)
        try:
            if not elector.acquire(stop, retry=args.retry_period):
                return 0
            for s, handler in previous.items():
                signal.signal(s, handler)
            return _lead(elector, args, stop)
        finally:
            LEADER.set(0)
            server.stop()
            client.close()


def _lead(elector: kube.Elector, args: argparse.Namespace, stop: threading.Event) -> int:
    global _kopf_stop
    LEADER.set(1)
    kopf_stop = _kopf_stop = threading.Event()
    lost = threading.Event()

    def renew() -> None:
        last = time.monotonic()
        while not kopf_stop.wait(args.lease_duration / 3):
            try:
                if elector.try_acquire():
                    last = time.monotonic()
                    continue
                logger.error("leader election: lease taken by another replica")
            except KubeError as err:
                logger.warning("leader election: renewal failed: %s", err)
                if time.monotonic() - last < args.lease_duration * 2 / 3:
                    continue
            lost.set()
            kopf_stop.set()

    threading.Thread(target=renew, name="lease-renewal", daemon=True).start()
    if stop.is_set():
        kopf_stop.set()
    # identity given: kopf would otherwise ask getpwuid() for a user name, and a pod's
    # non-root uid has no passwd entry
    kopf.run(clusterwide=True, standalone=True, stop_flag=kopf_stop, identity=args.identity)
    kopf_stop.set()
    if lost.is_set():
        logger.error("leadership lost; exiting so that a candidate takes over")
        return 1
    elector.release()
    return 0


def _keep_ca_bundle(client: Client, args: argparse.Namespace, ca: bytes,
                    stop: threading.Event) -> None:
    """Re-apply the caBundle when the configuration is replaced (a re-run of
    ``kubectl apply -f manifests/`` or ``rootdisk up`` resets it to empty)."""
    while not stop.wait(cabundle.CHECK_SECONDS):
        try:
            kube.patch_ca_bundle(client, name=args.webhook_config, ca=ca)
        except KubeError as err:
            logger.warning("caBundle check failed: %s", err)


def _webhook_tls(client: Client, args: argparse.Namespace,
                 tmp: str) -> tuple[ssl.SSLContext, bytes]:
    cert = kube.webhook_certificate(client, namespace=args.namespace, secret=args.webhook_secret,
                                    service=args.webhook_service)
    cert_path, key_path = write_pair(tmp, cert.cert, cert.key)
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(cert_path, key_path)
    with contextlib.suppress(KubeError):
        kube.patch_ca_bundle(client, name=args.webhook_config, ca=cert.ca)
    return context, cert.ca
