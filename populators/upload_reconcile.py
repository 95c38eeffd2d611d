"""The upload populator's I/O on top of the populator base's reconcile: before the
upload server pod is created, its TLS Secret and Service (both owned by PVC'); after
each reconcile, the pod's readiness on the target (``storage.pod.ready``).

The upload CA (Secret ``cdi-uploadserver-ca`` in the operator's namespace) signs every
upload server's certificate and the upload proxy's client certificate (Secret
``cdi-uploadproxy-client``, common name ``cdi-uploadproxy``, with the CA bundle the proxy
checks servers against). Before each new server pod both are looked at: the CA rotates
as :mod:`pki.rotation` describes (upstream's 48 h, ``UPLOAD_CA_CERT_LIFETIME``), the
client certificate is issued again at half its life or when the CA changed. Servers get
the whole bundle as the CA of their clients, so a client certificate from the next CA is
let in by servers made before the rotation. The CA key never leaves that namespace.
"""

from __future__ import annotations

import datetime as dt
import logging
import threading
from typing import Any

from kubeclient import Client
from kubeclient.resources import PODS, PVCS, SECRETS, SERVICES
from pki import certs, rotation
from populators import flow, names
from populators.claims import Obj, annots, meta
from populators.importer_pod import Settings
from populators.kube import replaced
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
from vocab import cdi as api

logger = logging.getLogger(__name__)

CA_SECRET = "cdi-uploadserver-ca"  # noqa: S105 - a name, not a secret
CLIENT_SECRET = "cdi-uploadproxy-client"  # noqa: S105


class UploadReconciler(Reconciler):
    def __init__(self, kube: Client, populator: flow.Populator, settings: Settings, *,
                 namespace: str) -> None:
        super().__init__(kube, populator, settings)
        self.namespace = namespace
        self._ca_lock = threading.Lock()

    def authority(self, now: dt.datetime) -> rotation.Authority:
        """The upload CA (rotated when due), and the proxy's client certificate, issued
        again when due or when the CA or its bundle changed; looked at before each new
        server pod, so both are fresh for that pod's whole life."""
        with self._ca_lock:
            ca = rotation.kept(self._read_ca, self._write_ca, name=CA_SECRET, now=now,
                               lifetime=dt.timedelta(seconds=self.settings.upload_ca_lifetime))
            self._keep_client(ca, now)
            return ca

    def _read_ca(self) -> tuple[dict[str, bytes], str] | None:
        found = self.kube.get_or_none(SECRETS, CA_SECRET, self.namespace)
        return None if found is None else rotation.secret_data(found)

    def _write_ca(self, data: dict[str, bytes], version: str | None) -> bool:
        obj = rotation.secret_object(CA_SECRET, self.namespace, data)
        if version is None:
            return self.kube.create_if_absent(SECRETS, obj) is not None
        obj["metadata"]["resourceVersion"] = version
        logger.info("rotated the upload CA")
        return replaced(self.kube, SECRETS, obj)

    def _keep_client(self, ca: rotation.Authority, now: dt.datetime) -> None:
        lifetime = self._cert_lifetime()
        for _ in range(rotation.ATTEMPTS):
            found = self.kube.get_or_none(SECRETS, CLIENT_SECRET, self.namespace)
            if found is not None:
                have, _ = rotation.secret_data(found)
                if have.get("ca.crt") == ca.bundle_pem() and not rotation.leaf_due(
                        have.get("tls.crt") or b"", issuer=ca.current, now=now,
                        lifetime=lifetime):
                    return
            client = certs.issue(ca=ca.current, common_name=CLIENT_NAME, now=now,
                                 validity=lifetime)
            obj: dict[str, Any] = {
                "apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls",
                "metadata": {"name": CLIENT_SECRET, "namespace": self.namespace},
                "data": rotation.encoded({"tls.crt": client.cert_pem,
                                          "tls.key": client.key_pem,
                                          "ca.crt": ca.bundle_pem()})}
            if found is None:
                done = self.kube.create_if_absent(SECRETS, obj) is not None
            else:
                obj["metadata"]["resourceVersion"] = meta(found).get("resourceVersion")
                done = replaced(self.kube, SECRETS, obj)
            if done:
                logger.info("issued the upload proxy's client certificate")
                return
        raise RuntimeError(f"the {CLIENT_SECRET} Secret kept changing")

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
        prime = self.kube.get_or_none(PVCS, str(prime_ref["name"]), ns)
        if prime is None:
            return
        name = server_name(str(meta(prime).get("name")))
        have = self.kube.get_or_none(SECRETS, name, ns)
        if have is not None and secret_due(have, prime=prime, now=now,
                                           lifetime=self._cert_lifetime()):
            logger.info("%s/%s: renewing the upload server's certificate", ns, name)
            self.kube.delete(SECRETS, name, ns, uid=str(meta(have).get("uid")))
            have = None
        ca = self.authority(now)
        if have is None:
            serving = certs.issue(ca=ca.current, common_name=name,
                                  dns_names=certs.service_names(name, ns), now=now,
                                  validity=self._cert_lifetime())
            self.kube.create_if_absent(SECRETS, render_secret(
                prime=prime, cert_pem=serving.cert_pem, key_pem=serving.key_pem,
                ca_pem=ca.bundle_pem()))
        if self.kube.create_if_absent(SERVICES, render_service(prime=prime)):
            logger.info("%s/%s: created upload service", ns, name)

    def _cert_lifetime(self) -> dt.timedelta:
        return dt.timedelta(seconds=self.settings.upload_cert_lifetime)

    def _progress(self, target: Obj, url: str) -> None:
        """No progress metric: the server speaks only HTTPS to the proxy (upstream reports
        none for uploads either); the client shows its own."""

    def reconcile(self, namespace: str, name: str) -> bool:
        again = super().reconcile(namespace, name)
        target = self.kube.get_or_none(PVCS, name, namespace)
        if target is None or not self.is_target(target):
            return again
        ann = annots(target)
        ready = "false"
        prime = names.prime_name(str(meta(target).get("uid")))
        if ann.get(api.POD_PHASE) not in (api.SUCCEEDED, api.FAILED) and \
                (target.get("status") or {}).get("phase") != "Bound":
            pod = self.kube.get_or_none(PODS, server_name(prime), namespace)
            ready = "true" if pod_ready(pod) else "false"
        if ann.get(POD_READY) != ready:
            self.kube.patch(PVCS, name, {"metadata": {"annotations": {POD_READY: ready}}},
                            namespace)
        return again
