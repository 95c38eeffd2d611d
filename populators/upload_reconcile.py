"""The upload populator's I/O on top of the populator base's reconcile: before the
upload server pod is created, its TLS Secret and Service (both owned by PVC'); after
each reconcile, the pod's readiness on the target (``storage.pod.ready``).

The upload CA (Secret ``cdi-uploadserver-ca`` in the operator's namespace) signs every
upload server's certificate and the upload proxy's client certificate (Secret
``cdi-uploadproxy-client``, common name ``cdi-uploadproxy``); both are made here the
first time they are needed. The CA key never leaves that namespace.
"""

from __future__ import annotations

import base64
import datetime as dt
import logging
import threading
from typing import Any

from pki import certs
from populators import flow, names
from populators.claims import Obj, annots, meta
from populators.importer_pod import Settings
from populators.kube import Kube
from populators.reconcile import Reconciler
from populators.upload_populator import (
    CLIENT_NAME,
    POD_READY,
    pod_ready,
    render_secret,
    render_service,
    secret_due,
    server_name,
    with_deadline,
)

logger = logging.getLogger(__name__)

CA_SECRET = "cdi-uploadserver-ca"  # noqa: S105 - a name, not a secret
CLIENT_SECRET = "cdi-uploadproxy-client"  # noqa: S105


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


class UploadReconciler(Reconciler):
    def __init__(self, kube: Kube, populator: flow.Populator, settings: Settings, *,
                 namespace: str) -> None:
        super().__init__(kube, populator, settings)
        self.namespace = namespace
        self._ca: certs.KeyPair | None = None
        self._ca_lock = threading.Lock()

    def ca(self) -> certs.KeyPair:
        """The upload CA, made (with the proxy's client certificate) when missing."""
        with self._ca_lock:
            if self._ca is None:
                self._ca = self._load_or_make_ca()
            return self._ca

    def _load_or_make_ca(self) -> certs.KeyPair:
        found = self.kube.secret(self.namespace, CA_SECRET)
        if found is None:
            now = dt.datetime.now(dt.UTC)
            ca = certs.make_ca(name="cdi-uploadserver-ca", now=now)
            self.kube.create_secret({
                "apiVersion": "v1", "kind": "Secret", "type": "Opaque",
                "metadata": {"name": CA_SECRET, "namespace": self.namespace},
                "data": {"ca.crt": _b64(ca.cert_pem), "ca.key": _b64(ca.key_pem)}})
            found = self.kube.secret(self.namespace, CA_SECRET)
            if found is None:
                raise RuntimeError(f"Secret {self.namespace}/{CA_SECRET} vanished")
        data = {k: base64.b64decode(v) for k, v in (found.get("data") or {}).items()}
        ca = certs.KeyPair(data["ca.crt"], data["ca.key"])
        if self.kube.secret(self.namespace, CLIENT_SECRET) is None:
            client = certs.issue(ca=ca, common_name=CLIENT_NAME, now=dt.datetime.now(dt.UTC))
            self.kube.create_secret({
                "apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls",
                "metadata": {"name": CLIENT_SECRET, "namespace": self.namespace},
                "data": {"tls.crt": _b64(client.cert_pem), "tls.key": _b64(client.key_pem),
                         "ca.crt": _b64(ca.cert_pem)}})
            logger.info("made the upload proxy's client certificate")
        return ca

    def _apply(self, target: Obj, action: flow.Action) -> None:
        if isinstance(action, flow.CreatePod):
            now = dt.datetime.now(dt.UTC)
            self._server_objects(action.manifest, now=now)
            action = flow.CreatePod(with_deadline(action.manifest, now=now,
                                                  lifetime=self._cert_lifetime()))
        super()._apply(target, action)

    def _server_objects(self, pod: Any, *, now: dt.datetime) -> None:
        """The server's Secret (a fresh certificate for each new pod, as its deadline
        comes half a lifetime before the certificate ends) and Service."""
        ns = str(pod["metadata"]["namespace"])
        prime_ref = pod["metadata"]["ownerReferences"][0]
        prime = self.kube.claim(ns, str(prime_ref["name"]))
        if prime is None:
            return
        name = server_name(str(meta(prime).get("name")))
        have = self.kube.secret(ns, name)
        if have is not None and secret_due(have, prime=prime, now=now,
                                           lifetime=self._cert_lifetime()):
            logger.info("%s/%s: renewing the upload server's certificate", ns, name)
            self.kube.delete_secret(ns, name, str(meta(have).get("uid")))
            have = None
        if have is None:
            ca = self.ca()
            serving = certs.issue(ca=ca, common_name=name,
                                  dns_names=certs.service_names(name, ns), now=now,
                                  validity=self._cert_lifetime())
            self.kube.create_secret(render_secret(prime=prime, cert_pem=serving.cert_pem,
                                                  key_pem=serving.key_pem, ca_pem=ca.cert_pem))
        if self.kube.create_service(render_service(prime=prime)):
            logger.info("%s/%s: created upload service", ns, name)

    def _cert_lifetime(self) -> dt.timedelta:
        return dt.timedelta(seconds=self.settings.upload_cert_lifetime)

    def _progress(self, target: Obj, url: str) -> None:
        """No progress metric: the server speaks only HTTPS to the proxy (upstream reports
        none for uploads either); the client shows its own."""

    def reconcile(self, namespace: str, name: str) -> bool:
        again = super().reconcile(namespace, name)
        target = self.kube.claim(namespace, name)
        if target is None or not self.is_target(target):
            return again
        ann = annots(target)
        ready = "false"
        prime = names.prime_name(str(meta(target).get("uid")))
        if ann.get(names.POD_PHASE) not in (names.SUCCEEDED, names.FAILED) and \
                (target.get("status") or {}).get("phase") != "Bound":
            ready = "true" if pod_ready(self.kube.pod(namespace, server_name(prime))) \
                else "false"
        if ann.get(POD_READY) != ready:
            self.kube.annotate_claim(namespace, name, {POD_READY: ready})
        return again
