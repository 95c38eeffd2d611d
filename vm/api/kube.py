"""virt-api's I/O: its certificate Secret, the caBundles, front-proxy settings,
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
from pki import certs
from vm.api.certs import API_CLIENT_CN
from vm.api.lifecycle import Patch
from vm.kube import PODS, VMIS, VMS, Kube, KubeError, Res

logger = logging.getLogger(__name__)

SECRETS = Res("", "v1", "secrets")
CONFIGMAPS = Res("", "v1", "configmaps")
WEBHOOKS = Res("admissionregistration.k8s.io", "v1", "validatingwebhookconfigurations",
               namespaced=False)
APISERVICES = Res("apiregistration.k8s.io", "v1", "apiservices", namespaced=False)
SARS = Res("authorization.k8s.io", "v1", "subjectaccessreviews", namespaced=False)

CERT_SECRET = "virt-api-certs"  # noqa: S105
SERVICE = "virt-api"
WEBHOOK_CONFIG = "virt-api-validator"
APISERVICE = "v1.subresources.kubevirt.io"
HANDLER_LABEL = "kubevirt.io=virt-handler"
HANDLER_PORT = 8186


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def load_pki(kube: Kube, namespace: str) -> tuple[certs.KeyPair, certs.KeyPair] | None:
    """(CA, virt-api's certificate) from the Secret, or None while it does not exist."""
    secret = kube.get(SECRETS, CERT_SECRET, namespace)
    if secret is None:
        return None
    d = {k: base64.b64decode(v) for k, v in (secret.get("data") or {}).items()}
    return (certs.KeyPair(d["ca.crt"], d["ca.key"]), certs.KeyPair(d["tls.crt"], d["tls.key"]))


def ensure_pki(kube: Kube, namespace: str) -> tuple[certs.KeyPair, certs.KeyPair]:
    found = load_pki(kube, namespace)
    if found is not None:
        return found
    now = dt.datetime.now(dt.UTC)
    ca = certs.make_ca(name="kubevirt.io:rootdisk-ca", now=now)
    serving = certs.issue(ca=ca, common_name=API_CLIENT_CN,
                          dns_names=certs.service_names(SERVICE, namespace), now=now)
    secret = {"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
              "metadata": {"name": CERT_SECRET, "namespace": namespace},
              "data": {"ca.crt": _b64(ca.cert_pem), "ca.key": _b64(ca.key_pem),
                       "tls.crt": _b64(serving.cert_pem), "tls.key": _b64(serving.key_pem)}}
    try:
        kube.create(SECRETS, secret, namespace)
    except KubeError as err:
        if err.status != 409:
            raise
    found = load_pki(kube, namespace)
    if found is None:
        raise RuntimeError(f"Secret {namespace}/{CERT_SECRET} vanished")
    return found


def _set_bundle(kube: Kube, res: Res, name: str, bundle: str) -> None:
    """Write ``bundle`` into the object's caBundle(s); re-read and retry on conflicts
    (the aggregator updates an APIService's status concurrently)."""
    for attempt in range(10):
        obj = kube.get(res, name)
        if obj is None:
            logger.warning("%s %s is not installed; caBundle not set", res.plural, name)
            return
        changed = False
        if res is WEBHOOKS:
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
            return
        except KubeError as err:
            if err.status != 409 or attempt == 9:
                raise


def publish_ca(kube: Kube, ca_pem: bytes) -> None:
    """Write the CA into the webhook configuration and the APIService (when installed)."""
    bundle = _b64(ca_pem)
    _set_bundle(kube, WEBHOOKS, WEBHOOK_CONFIG, bundle)
    _set_bundle(kube, APISERVICES, APISERVICE, bundle)


def front_proxy(kube: Kube) -> FrontProxyConfig:
    cm = kube.get(CONFIGMAPS, CONFIGMAP_NAME, CONFIGMAP_NAMESPACE)
    if cm is None:
        raise RuntimeError(f"ConfigMap {CONFIGMAP_NAMESPACE}/{CONFIGMAP_NAME} is missing: "
                           "the API server does not aggregate APIs")
    return FrontProxyConfig.from_configmap_data(cm.get("data") or {})


def allowed(kube: Kube, who: Identity, *, verb: str, resource: str, subresource: str,
            namespace: str, name: str) -> tuple[bool, str]:
    review = {
        "apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
        "spec": {"user": who.username, "groups": list(who.groups),
                 "extra": {k: list(v) for k, v in who.extra.items()},
                 "resourceAttributes": {
                     "namespace": namespace, "verb": verb, "group": "subresources.kubevirt.io",
                     "version": "v1", "resource": resource, "subresource": subresource,
                     "name": name}}}
    out = kube.create(SARS, review)
    status = out.get("status") or {}
    return bool(status.get("allowed")), str(status.get("reason") or "")


def get_vm(kube: Kube, namespace: str, name: str) -> dict[str, Any] | None:
    return kube.get(VMS, name, namespace)


def get_vmi(kube: Kube, namespace: str, name: str) -> dict[str, Any] | None:
    return kube.get(VMIS, name, namespace)


def apply(kube: Kube, namespace: str, name: str, patches: list[Patch], *,
          dry_run: bool) -> None:
    query = {"dryRun": "All"} if dry_run else None
    for p in patches:
        res, sub = {"vm": (VMS, None), "vm-status": (VMS, "status"),
                    "vmi": (VMIS, None)}[p.target]
        kube.request("PATCH", res.path(namespace, name, sub), body=p.ops, query=query,
                     content_type="application/json-patch+json")


def handler_address(kube: Kube, namespace: str, node: str) -> tuple[str, int] | None:
    for pod in kube.list(PODS, namespace, labelSelector=HANDLER_LABEL):
        spec: Mapping[str, Any] = pod.get("spec") or {}
        status: Mapping[str, Any] = pod.get("status") or {}
        if spec.get("nodeName") == node and status.get("podIP") and status.get(
                "phase") == "Running":
            port = next((int(p["containerPort"]) for c in spec.get("containers") or []
                         for p in c.get("ports") or [] if p.get("name") == "console"),
                        HANDLER_PORT)
            return str(status["podIP"]), port
    return None
