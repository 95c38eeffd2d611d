"""The operator's own API calls: the leader Lease, the webhook Secret and caBundle."""

from __future__ import annotations

import base64
import datetime
import logging
import threading
from typing import Any

from kubeclient import Client, KubeError, Resource
from kubeclient.resources import LEASES, MUTATING_WEBHOOKS, SECRETS, VALIDATING_WEBHOOKS
from rootdisk.operator import certs, lease

logger = logging.getLogger(__name__)



class Elector:
    """Acquire, hold and release one Lease."""

    def __init__(self, client: Client, *, namespace: str, name: str, identity: str,
                 duration: int) -> None:
        self.client, self.namespace, self.name = client, namespace, name
        self.identity, self.duration = identity, duration
        self.last_renew: float | None = None

    def try_acquire(self) -> bool:
        """One attempt: True when this candidate holds the Lease afterwards."""
        current = self.client.get_or_none(LEASES, self.name, self.namespace)
        decision = lease.decide(
            lease_spec=(current or {}).get("spec"), exists=current is not None,
            identity=self.identity, now=datetime.datetime.now(datetime.UTC),
            duration=self.duration)
        if decision.action == "wait":
            return False
        body: dict[str, Any] = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                                "metadata": {"name": self.name, "namespace": self.namespace},
                                "spec": decision.spec}
        try:
            if decision.action == "create":
                return self.client.create_if_absent(LEASES, body) is not None
            assert current is not None
            body["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
            self.client.request("PUT", LEASES.path(self.namespace, self.name), body=body)
            return True
        except KubeError as err:
            if err.status == 409:
                return False
            raise

    def acquire(self, stop: threading.Event, *, retry: float) -> bool:
        while not stop.is_set():
            try:
                if self.try_acquire():
                    logger.info("leader election: %s holds lease %s/%s", self.identity,
                                self.namespace, self.name)
                    return True
            except KubeError as err:
                logger.warning("leader election: %s", err)
            stop.wait(retry)
        return False

    def release(self) -> None:
        try:
            current = self.client.get_or_none(LEASES, self.name, self.namespace)
            if current is None or (current.get("spec") or {}).get("holderIdentity") != (
                    self.identity):
                return
            current["spec"] = lease.released(current["spec"])
            self.client.request("PUT", LEASES.path(self.namespace, self.name), body=current)
            logger.info("leader election: released lease %s/%s", self.namespace, self.name)
        except KubeError as err:
            logger.warning("leader election: release failed: %s", err)


def webhook_certificate(client: Client, *, namespace: str, secret: str,
                        service: str) -> certs.ServingCert:
    """The serving certificate from ``secret``, made and stored first if missing."""
    for _ in range(3):
        found = client.get_or_none(SECRETS, secret, namespace)
        if found is not None:
            data = found.get("data") or {}
            try:
                return certs.ServingCert(ca=base64.b64decode(data["ca.crt"]),
                                         cert=base64.b64decode(data["tls.crt"]),
                                         key=base64.b64decode(data["tls.key"]))
            except (KeyError, ValueError):
                raise KubeError(0, f"Secret {namespace}/{secret} lacks ca.crt, tls.crt or"
                                   " tls.key") from None
        made = certs.make(dns_names=certs.service_names(service, namespace),
                          now=datetime.datetime.now(datetime.UTC))
        body = {"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls",
                "metadata": {"name": secret, "namespace": namespace},
                "data": {"ca.crt": base64.b64encode(made.ca).decode(),
                         "tls.crt": base64.b64encode(made.cert).decode(),
                         "tls.key": base64.b64encode(made.key).decode()}}
        if client.create_if_absent(SECRETS, body) is not None:
            logger.info("webhook certificate created in Secret %s/%s", namespace, secret)
            return made
    raise KubeError(0, f"Secret {namespace}/{secret} could not be read or created")


def patch_ca_bundle(client: Client, *, name: str, ca: bytes) -> None:
    """Point every webhook of configurations ``name`` (validating, and mutating when
    there is one) at ``ca`` (no-op when already so)."""
    _patch_ca_bundle(client, kind=MUTATING_WEBHOOKS, name=name, ca=ca, required=False)
    _patch_ca_bundle(client, kind=VALIDATING_WEBHOOKS, name=name, ca=ca, required=True)


def _patch_ca_bundle(client: Client, *, kind: Resource, name: str, ca: bytes,
                     required: bool) -> None:
    config = client.get_or_none(kind, name)
    if config is None and not required:
        return
    if config is None:
        logger.warning("ValidatingWebhookConfiguration %s not found; webhooks not trusted", name)
        return
    bundle = base64.b64encode(ca).decode()
    hooks = config.get("webhooks") or []
    if all((h.get("clientConfig") or {}).get("caBundle") == bundle for h in hooks):
        return
    for h in hooks:
        h.setdefault("clientConfig", {})["caBundle"] = bundle
    client.request("PUT", kind.path(None, name), body=config)
    logger.info("caBundle of %s updated", name)
