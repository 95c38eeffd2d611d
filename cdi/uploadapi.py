"""The cdi-apiserver (``python -m cdi.uploadapi``, image ``rootdisk/operator``): serves
``upload.cdi.kubevirt.io/v1beta1`` ``UploadTokenRequest`` (namespaced, create only)
behind an APIService, as upstream's cdi-apiserver does.

``POST /apis/upload.cdi.kubevirt.io/v1beta1/namespaces/NS/uploadtokenrequests`` with
``{"spec": {"pvcName": NAME}}`` answers 201 with ``status.token``: a signed upload token
(:mod:`cdi.uploadtoken`) for that claim. Requests are taken only from the API server's
front proxy (its client certificate) and only for users a SubjectAccessReview allows to
``create uploadtokenrequests`` in NS. The signing key lives in the Secret
``cdi-upload-signing-key`` (made here when missing); its public half in the ConfigMap of
the same name, which is all the upload proxy reads.

Its serving certificate is issued again at half its lifetime (``CDI_APISERVER_CERT_LIFETIME``,
24 h) by its own CA (Secret ``cdi-api-tls``), which rotates as :mod:`pki.rotation`
describes (``CDI_APISERVER_CA_CERT_LIFETIME``, 48 h); the CA bundle goes into the
APIService's ``caBundle`` before the new CA signs anything.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import datetime as dt
import logging
import os
import re
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any, TypeVar

from aiohttp import web

from apiservice import cabundle, frontproxy
from cdi import certstore, uploadtoken
from cdi.kube import cdi_namespace
from kubeclient import Client, KubeError, load_configuration
from kubeclient.resources import APISERVICES, CONFIGMAPS, SECRETS
from kubeclient.startup import retry_startup
from pki import certs, rotation, serving
from vocab import cdi as api

logger = logging.getLogger("cdi.uploadapi")

GROUP = api.UPLOAD_GROUP
VERSION = api.VERSION
BASE = f"/apis/{GROUP}/{VERSION}"
APISERVICE = f"{VERSION}.{GROUP}"
SERVICE = "cdi-api"
TLS_SECRET = "cdi-api-tls"  # noqa: S105 - names
SIGNING = "cdi-upload-signing-key"
MAX_BODY = 64 * 1024

RESOURCES = {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": f"{GROUP}/{VERSION}",
             "resources": [{"name": "uploadtokenrequests", "singularName": "uploadtokenrequest",
                            "namespaced": True, "kind": "UploadTokenRequest",
                            "verbs": ["create"]}]}
GROUP_DOC = {"kind": "APIGroup", "apiVersion": "v1", "name": GROUP,
             "versions": [{"groupVersion": f"{GROUP}/{VERSION}", "version": VERSION}],
             "preferredVersion": {"groupVersion": f"{GROUP}/{VERSION}", "version": VERSION}}


def status(code: int, message: str) -> web.Response:
    reasons = {400: "BadRequest", 401: "Unauthorized", 403: "Forbidden", 500: "InternalError"}
    return web.json_response({"kind": "Status", "apiVersion": "v1", "metadata": {},
                              "status": "Failure", "message": message,
                              "reason": reasons.get(code, "Unknown"), "code": code},
                             status=code)


_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")


def token_response(*, request_body: Any, namespace: str, key_pem: bytes,
                   now: int) -> tuple[int, dict[str, Any]]:
    """(HTTP status, body) for an UploadTokenRequest (pure)."""
    if not isinstance(request_body, dict) or request_body.get("kind") not in (
            None, "UploadTokenRequest"):
        return 400, {"message": "the body is not an UploadTokenRequest"}
    pvc = (request_body.get("spec") or {}).get("pvcName")
    if not isinstance(pvc, str) or not pvc:
        return 400, {"message": "spec.pvcName: the name of the claim to upload to is required"}
    if len(pvc) > 253 or not _DNS_SUBDOMAIN.fullmatch(pvc):
        return 400, {"message": f"spec.pvcName: {pvc[:80]!r} is not a valid claim name"
                     " (lower-case letters, digits, '-' and '.')"}
    token = uploadtoken.issue(key_pem=key_pem, namespace=namespace, name=pvc, now=now)
    meta = dict(request_body.get("metadata") or {})
    meta["namespace"] = namespace
    meta.setdefault("creationTimestamp", None)
    return 201, {"apiVersion": f"{GROUP}/{VERSION}", "kind": "UploadTokenRequest",
                 "metadata": meta, "spec": {"pvcName": pvc}, "status": {"token": token}}


async def _ok(_: web.Request) -> web.Response:
    return web.Response(text="ok")


async def _group(_: web.Request) -> web.Response:
    return web.json_response(GROUP_DOC)


async def _resources(_: web.Request) -> web.Response:
    return web.json_response(RESOURCES)


class TokenAPI:
    def __init__(self, kube: Client, proxy: frontproxy.FrontProxyConfig,
                 key_pem: bytes) -> None:
        self.kube = kube
        self.proxy = proxy
        self.key_pem = key_pem

    def app(self) -> web.Application:
        app = web.Application(client_max_size=MAX_BODY)
        app.router.add_get("/healthz", _ok)
        app.router.add_get(f"/apis/{GROUP}", _group)
        app.router.add_get(BASE, _resources)
        app.router.add_post(BASE + "/namespaces/{ns}/uploadtokenrequests", self.create)
        return app

    async def create(self, request: web.Request) -> web.Response:
        try:
            who = frontproxy.authenticate_aiohttp(request, self.proxy)
        except frontproxy.FrontProxyError as err:
            return status(401, str(err))
        ns = request.match_info["ns"]
        review = {"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
                  "spec": {"user": who.username, "groups": list(who.groups),
                           "extra": {k: list(v) for k, v in who.extra.items()},
                           "resourceAttributes": {"namespace": ns, "verb": "create",
                                                  "group": GROUP, "version": VERSION,
                                                  "resource": "uploadtokenrequests"}}}
        try:
            allowed = await asyncio.to_thread(self.kube.allowed, review)
        except KubeError as err:
            return status(500, f"authorization check failed: {err.message}")
        if not allowed:
            return status(403, f'uploadtokenrequests.{GROUP} is forbidden: User '
                          f'"{who.username}" cannot create resource "uploadtokenrequests" in'
                          f' API group "{GROUP}" in the namespace "{ns}"')
        try:
            body = await request.json()
        except ValueError:
            return status(400, "the body is not JSON")
        code, out = token_response(request_body=body, namespace=ns, key_pem=self.key_pem,
                                   now=int(time.time()))
        if code != 201:
            return status(code, str(out["message"]))
        logger.info("upload token for %s/%s issued to %s", ns, out["spec"]["pvcName"],
                    who.username)
        return web.json_response(out, status=201)


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def ensure_signing_key(kube: Client, namespace: str) -> bytes:
    """The private signing key (made, with the public ConfigMap, when missing)."""
    secret = kube.get_or_none(SECRETS, SIGNING, namespace)
    if secret is None:
        private, public = uploadtoken.make_key()
        kube.create_if_absent(SECRETS, {"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
                              "metadata": {"name": SIGNING, "namespace": namespace},
                              "data": {"private.pem": _b64(private),
                                       "public.pem": _b64(public)}})
        secret = kube.get_or_none(SECRETS, SIGNING, namespace)
        assert secret is not None
    data = {k: base64.b64decode(v) for k, v in (secret.get("data") or {}).items()}
    if kube.get_or_none(CONFIGMAPS, SIGNING, namespace) is None:
        kube.create_if_absent(CONFIGMAPS, {"apiVersion": "v1", "kind": "ConfigMap",
                                 "metadata": {"name": SIGNING, "namespace": namespace},
                                 "data": {"public.pem": data["public.pem"].decode()}})
    return data["private.pem"]


def issue_serving(kube: Client, namespace: str, *,
                  lifetimes: tuple[dt.timedelta, dt.timedelta] = (rotation.CA_LIFETIME,
                                                                  rotation.LEAF_LIFETIME),
                  now: dt.datetime | None = None) -> serving.Issued:
    """A fresh serving certificate for Service ``cdi-api`` from the cdi-apiserver's CA
    (Secret ``cdi-api-tls``, rotated when due), after publishing the CA bundle (next CA
    included) in the APIService's ``caBundle``, so kube-apiserver trusts it first; with
    that bundle."""
    ca_lifetime, lifetime = lifetimes
    now = now or dt.datetime.now(dt.UTC)
    ca = certstore.kept_authority(kube, namespace, TLS_SECRET, ca_name="cdi-apiserver-ca",
                                  now=now, lifetime=ca_lifetime)
    publish_ca(kube, ca.bundle_pem())
    return serving.Issued(certs.issue(ca=ca.current, common_name=SERVICE,
                                      dns_names=certs.service_names(SERVICE, namespace),
                                      now=now, validity=lifetime), ca.bundle_pem())


def publish_ca(kube: Client, bundle: bytes) -> None:
    """The APIService's ``caBundle`` set to ``bundle`` (re-read and retried on a
    conflict, a bounded number of times)."""
    for attempt in range(10):
        obj = kube.get_or_none(APISERVICES, APISERVICE)
        if obj is None:
            logger.warning("APIService %s is not installed", APISERVICE)
            return
        if (obj.get("spec") or {}).get("caBundle") == _b64(bundle):
            return
        obj["spec"]["caBundle"] = _b64(bundle)
        try:
            kube.request("PUT", APISERVICES.path(None, APISERVICE), body=obj)
            logger.info("caBundle of APIService %s updated", APISERVICE)
            return
        except KubeError as err:
            if err.status != 409 or attempt == 9:
                raise


T = TypeVar("T")


def _retry(what: str, fn: Callable[..., T], *args: Any) -> T:
    return retry_startup("cdi-apiserver", what, lambda: fn(*args),
                         errors=(KubeError, RuntimeError, OSError, frontproxy.FrontProxyError))


def _front_proxy(kube: Client) -> frontproxy.FrontProxyConfig:
    cm = kube.get_or_none(CONFIGMAPS, frontproxy.CONFIGMAP_NAME, frontproxy.CONFIGMAP_NAMESPACE)
    if cm is None:
        raise RuntimeError("the API server publishes no front-proxy settings")
    return frontproxy.FrontProxyConfig.from_configmap_data(cm.get("data") or {})


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m cdi.uploadapi")
    p.add_argument("--address", default=os.environ.get("POD_IP") or "127.0.0.1")
    p.add_argument("--port", type=int, default=8443)
    p.add_argument("--namespace", default=cdi_namespace())
    p.add_argument("--kubeconfig", default=None)
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        lifetimes = rotation.lifetimes_from_env(
            os.environ, ca_var="CDI_APISERVER_CA_CERT_LIFETIME",
            leaf_var="CDI_APISERVER_CERT_LIFETIME")
    except ValueError as err:
        p.error(str(err))
    kube = Client(load_configuration(args.kubeconfig))
    key = _retry("signing key", ensure_signing_key, kube, args.namespace)
    bundles = cabundle.Keeper(lambda bundle: publish_ca(kube, bundle))

    def issue() -> serving.Issued:
        issued = issue_serving(kube, args.namespace, lifetimes=lifetimes)
        bundles.bundle = issued.bundle
        return issued

    first = _retry("certificates", issue)
    proxy = _retry("front-proxy settings", _front_proxy, kube)
    with tempfile.TemporaryDirectory(prefix="cdi-api-") as tmp:
        cert, keyfile = certs.write_pair(tmp, first.pair.cert_pem, first.pair.key_pem)
        ctx = frontproxy.server_ssl_context(proxy, cert_file=cert, key_file=keyfile)
    renewal = serving.Serving(issue, lifetime=lifetimes[1], contexts=(ctx,))
    renewal.load(first)
    app = TokenAPI(kube, proxy, key).app()
    app.cleanup_ctx.append(renewal.keep_fresh)
    app.cleanup_ctx.append(bundles.keep)
    logger.info("serving %s on %s:%d", APISERVICE, args.address, args.port)
    web.run_app(app, host=args.address, port=args.port, ssl_context=ctx,
                print=None, access_log=None)
    return 0


if __name__ == "__main__":
    sys.exit(main())
