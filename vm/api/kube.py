"""virt-api's I/O: its CA's Secret, the caBundles, front-proxy settings,
SubjectAccessReviews, the VM/VMI patches of the subresources, and where a node's
handler listens."""

from __future__ import annotations

import base64
import datetime as dt
import logging
from collections.abc import Mapping
from typing import Any

from apiservice.frontproxy import (
    CONFIGMAP_NAME,
    CONFIGMAP_NAMESPACE,
    FrontProxyConfig,
    Identity,
)
from kubeclient import Client, KubeError, Resource
from kubeclient.resources import (
    APISERVICES,
    CONFIGMAPS,
    PODS,
    SECRETS,
    SUBJECT_ACCESS_REVIEWS,
    VALIDATING_WEBHOOKS,
    VMIS,
    VMS,
)
from pki import certs, rotation, serving
from vm.api.certs import API_CLIENT_CN, CA_NAME, HANDLER_CN, HANDLER_SERVICE
from vm.api.lifecycle import Patch
from vocab import kubevirt

logger = logging.getLogger(__name__)


CERT_SECRET = "virt-api-certs"  # noqa: S105
HANDLER_SECRET = "virt-handler-certs"  # noqa: S105
SERVICE = "virt-api"
WEBHOOK_CONFIG = "virt-api-validator"
APISERVICE = "v1.subresources.kubevirt.io"
HANDLER_LABEL = "kubevirt.io=virt-handler"
HANDLER_PORT = 8186


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def _read_secret(kube: Client, namespace: str) -> tuple[dict[str, bytes], str] | None:
    secret = kube.get_or_none(SECRETS, CERT_SECRET, namespace)
    return None if secret is None else rotation.secret_data(secret)


def kept_authority(kube: Client, namespace: str, *, now: dt.datetime,
                   lifetime: dt.timedelta) -> rotation.Authority:
    """The CA in the Secret, made or rotated when due (:func:`pki.rotation.kept`: writes
    are conditional on the resourceVersion read, so replicas may race). The serving
    certificate an earlier version kept there (``tls.*``, ten years) is dropped."""

    def write(data: dict[str, bytes], version: str | None) -> bool:
        try:
            if version is None:
                kube.create(SECRETS, rotation.secret_object(CERT_SECRET, namespace, data),
                            namespace)
            else:
                logger.info("rotating the CA in Secret %s/%s", namespace, CERT_SECRET)
                kube.patch(SECRETS, CERT_SECRET, {
                    "metadata": {"resourceVersion": version},
                    "data": {**rotation.encoded(data), "tls.crt": None, "tls.key": None}},
                    namespace)
        except KubeError as err:
            if err.status == 409:
                return False
            raise
        return True

    return rotation.kept(lambda: _read_secret(kube, namespace), write, name=CA_NAME,
                         now=now, lifetime=lifetime)


def issue_serving(kube: Client, namespace: str, *,
                  lifetimes: tuple[dt.timedelta, dt.timedelta],
                  now: dt.datetime | None = None) -> serving.Issued:
    """virt-api's serving (and client) certificate, fresh from the current CA, after the
    CA was rotated when due, its bundle written into every ``caBundle`` virt-api owns
    (the API server trusts a new CA before it signs anything), and the node handlers'
    certificate issued (:func:`issue_handlers`)."""
    ca_lifetime, lifetime = lifetimes
    now = now or dt.datetime.now(dt.UTC)
    ca = kept_authority(kube, namespace, now=now, lifetime=ca_lifetime)
    publish_ca(kube, ca.bundle_pem())
    issue_handlers(kube, namespace, ca, now=now, lifetime=lifetime)
    pair = certs.issue(ca=ca.current, common_name=API_CLIENT_CN,
                       dns_names=certs.service_names(SERVICE, namespace), now=now,
                       validity=lifetime)
    return serving.Issued(pair, ca.bundle_pem())


def issue_handlers(kube: Client, namespace: str, ca: rotation.Authority, *,
                   now: dt.datetime, lifetime: dt.timedelta) -> None:
    """The node handlers' console certificate (CN ``virt-handler``, for the handlers'
    service names, server authentication only) and the bundle they check virt-api
    against, into Secret ``virt-handler-certs``, created or overwritten whole. The
    handlers read only this Secret: none of them holds a key that can sign."""
    pair = certs.issue(ca=ca.current, common_name=HANDLER_CN,
                       dns_names=certs.service_names(HANDLER_SERVICE, namespace), now=now,
                       validity=lifetime, client=False)
    data = {"tls.crt": pair.cert_pem, "tls.key": pair.key_pem, "ca.crt": ca.bundle_pem()}
    try:
        kube.create(SECRETS, rotation.secret_object(HANDLER_SECRET, namespace, data),
                    namespace)
    except KubeError as err:
        if err.status != 409:
            raise
        kube.patch(SECRETS, HANDLER_SECRET, {"data": rotation.encoded(data)}, namespace)


def read_handlers(kube: Client, namespace: str) -> serving.Issued | None:
    """What :func:`issue_handlers` last wrote, as a node handler reads it; None while
    there is none."""
    secret = kube.get_or_none(SECRETS, HANDLER_SECRET, namespace)
    if secret is None:
        return None
    data, _ = rotation.secret_data(secret)
    if not all(data.get(k) for k in ("tls.crt", "tls.key", "ca.crt")):
        return None
    return serving.Issued(certs.KeyPair(data["tls.crt"], data["tls.key"]), data["ca.crt"])


def _set_bundle(kube: Client, res: Resource, name: str, bundle: str) -> None:
    """Write ``bundle`` into the object's caBundle(s); re-read and retry on conflicts
    (the aggregator updates an APIService's status concurrently)."""
    for attempt in range(10):
        obj = kube.get_or_none(res, name)
        if obj is None:
            logger.warning("%s %s is not installed; caBundle not set", res.plural, name)
            return
        changed = False
        if res is VALIDATING_WEBHOOKS:
            for hook in obj.get("webhooks") or []:
                cc = hook.setdefault("clientConfig", {})
                if cc.get("caBundle") != bundle:
                    cc["caBundle"] = bundle
                    changed = True
        elif (obj.get("spec") or {}).get("caBundle") != bundle:
            obj["spec"]["caBundle"] = bundle
            changed = True
        if not changed:
            return
        try:
            kube.request("PUT", res.path(None, name), body=obj)
            logger.info("caBundle of %s %s updated", res.plural, name)
            return
        except KubeError as err:
            if err.status != 409 or attempt == 9:
                raise


def publish_ca(kube: Client, bundle_pem: bytes) -> None:
    """Write the CA bundle into the webhook configuration and the APIService (when
    installed)."""
    bundle = _b64(bundle_pem)
    _set_bundle(kube, VALIDATING_WEBHOOKS, WEBHOOK_CONFIG, bundle)
    _set_bundle(kube, APISERVICES, APISERVICE, bundle)


def front_proxy(kube: Client) -> FrontProxyConfig:
    cm = kube.get_or_none(CONFIGMAPS, CONFIGMAP_NAME, CONFIGMAP_NAMESPACE)
    if cm is None:
        raise RuntimeError(f"ConfigMap {CONFIGMAP_NAMESPACE}/{CONFIGMAP_NAME} is missing: "
                           "the API server does not aggregate APIs")
    return FrontProxyConfig.from_configmap_data(cm.get("data") or {})


def allowed(kube: Client, who: Identity, *, verb: str, resource: str, subresource: str,
            namespace: str, name: str) -> tuple[bool, str]:
    review = {
        "apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
        "spec": {"user": who.username, "groups": list(who.groups),
                 "extra": {k: list(v) for k, v in who.extra.items()},
                 "resourceAttributes": {
                     "namespace": namespace, "verb": verb, "group": kubevirt.SUBRESOURCE_GROUP,
                     "version": "v1", "resource": resource, "subresource": subresource,
                     "name": name}}}
    out = kube.create(SUBJECT_ACCESS_REVIEWS, review)
    status = out.get("status") or {}
    return bool(status.get("allowed")), str(status.get("reason") or "")


def get_vm(kube: Client, namespace: str, name: str) -> dict[str, Any] | None:
    return kube.get_or_none(VMS, name, namespace)


def get_vmi(kube: Client, namespace: str, name: str) -> dict[str, Any] | None:
    return kube.get_or_none(VMIS, name, namespace)


def apply(kube: Client, namespace: str, name: str, patches: list[Patch], *,
          dry_run: bool) -> None:
    query = {"dryRun": "All"} if dry_run else None
    for p in patches:
        res, sub = {"vm": (VMS, None), "vm-status": (VMS, "status"),
                    "vmi": (VMIS, None)}[p.target]
        kube.request("PATCH", res.path(namespace, name, sub), body=p.ops, query=query,
                     content_type="application/json-patch+json")


def handler_address(kube: Client, namespace: str, node: str) -> tuple[str, int] | None:
    for pod in kube.list(PODS, namespace, labelSelector=HANDLER_LABEL):
        spec: Mapping[str, Any] = pod.get("spec") or {}
        status: Mapping[str, Any] = pod.get("status") or {}
        if (pod.get("metadata") or {}).get("deletionTimestamp"):
            continue  # going away (a handler being replaced): never the one to use
        if spec.get("nodeName") == node and status.get("podIP") and status.get(
                "phase") == "Running":
            port = next((int(p["containerPort"]) for c in spec.get("containers") or []
                         for p in c.get("ports") or [] if p.get("name") == "console"),
                        HANDLER_PORT)
            return str(status["podIP"]), port
    return None
