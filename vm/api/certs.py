"""The VM side's own small PKI: one rotating CA (:mod:`pki.rotation`) and what it signs.

virt-api keeps the CA in Secret ``kubevirt/virt-api-certs`` (current, next, and the
bundle of every CA still valid) and is the only one to rotate it. Its serving
certificate (for ``virt-api.<ns>.svc``, also its client certificate towards the node
handlers, CN ``virt-api``) lasts ``VIRT_API_CERT_LIFETIME`` and is issued again at half
its life into the running server; each time, the CA is rotated when due and the bundle
is written into the APIService's and the webhooks' ``caBundle`` before the new CA signs
anything (``vm.api.kube.issue_serving``). virt-api checks handlers against the bundle
it last wrote.

Node handlers never see the CA's key. Each time virt-api issues its own certificate it
also issues the handlers' one into Secret ``virt-handler-certs`` (``tls.*`` and the
bundle as ``ca.crt``; ``vm.api.kube.issue_handlers``): CN ``virt-handler``, for
``virt-handler.<ns>.svc``, server authentication only, shared by every node's handler
as upstream's virt-handler server certificate is. Handlers read only that Secret, at
start and again at half their certificate's life; they accept only CN ``virt-api``
signed by a CA of the bundle. virt-api reaches a handler at its pod IP and checks the
certificate for ``virt-handler.<ns>.svc`` (:func:`handler_server_name`).

Lifetimes in seconds, the same on virt-api and virt-handler: ``VIRT_API_CA_CERT_LIFETIME``
(default 7 days) and ``VIRT_API_CERT_LIFETIME`` (24 h), upstream KubeVirt's defaults for
its self-signed CA and certificates. A certificate may last at most a quarter of the
CA: it must end before the CA that signed it, which hands over to the next at half its
life, with room for a renewal that comes late.
"""

from __future__ import annotations

import datetime as dt
import ssl
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from apiservice import frontproxy
from pki import certs, rotation, serving

API_CLIENT_CN = "virt-api"
HANDLER_CN = "virt-handler"
HANDLER_SERVICE = "virt-handler"
CA_NAME = "kubevirt.io:rootdisk-ca"
CA_VAR = "VIRT_API_CA_CERT_LIFETIME"
LEAF_VAR = "VIRT_API_CERT_LIFETIME"
CA_LIFETIME = dt.timedelta(days=7)
LEAF_LIFETIME = dt.timedelta(hours=24)


def handler_server_name(namespace: str) -> str:
    """The name virt-api checks a node handler's certificate for (it connects to the
    handler's pod IP, which no certificate virt-api issues names)."""
    return f"{HANDLER_SERVICE}.{namespace}.svc"


def lifetimes(env: Mapping[str, str]) -> tuple[dt.timedelta, dt.timedelta]:
    """(CA lifetime, certificate lifetime) from the environment; ValueError naming the
    variable when a value is not usable."""
    ca, leaf = rotation.lifetimes_from_env(env, ca_var=CA_VAR, leaf_var=LEAF_VAR,
                                           defaults=(CA_LIFETIME, LEAF_LIFETIME))
    if leaf > ca / 4:
        raise ValueError(f"{CA_VAR} / {LEAF_VAR}: the certificate lifetime "
                         f"({leaf.total_seconds():g} s) must be at most a quarter of the CA"
                         f" lifetime ({ca.total_seconds():g} s): a certificate must end"
                         " before the CA that signed it, which may be close to its"
                         " handover")
    return ca, leaf


@dataclass(frozen=True)
class VirtAPITLS:
    server: ssl.SSLContext
    """What the API server (front proxy, webhooks) connects to."""
    handlers: ssl.SSLContext
    """virt-api's client side towards the node handlers."""
    renewal: serving.Serving
    """Renews both (aiohttp cleanup context: ``renewal.keep_fresh``)."""


def virt_api_tls(issue: Callable[[], serving.Issued], first: serving.Issued,
                 proxy: frontproxy.FrontProxyConfig, *, lifetime: dt.timedelta,
                 ) -> VirtAPITLS:
    """virt-api's two TLS contexts with ``first`` loaded, and their renewal by ``issue``
    (the serving certificate into both, the bundle into the handlers' side)."""
    with tempfile.TemporaryDirectory(prefix="virt-api-") as tmp:
        cert, key = certs.write_pair(tmp, first.pair.cert_pem, first.pair.key_pem)
        server = frontproxy.server_ssl_context(proxy, cert_file=cert, key_file=key)
    # cadata given: the system's CAs are not trusted for handlers
    handlers = ssl.create_default_context(ssl.Purpose.SERVER_AUTH,
                                          cadata=first.bundle.decode())
    renewal = serving.Serving(issue, lifetime=lifetime, contexts=(server, handlers),
                              trusting=(handlers,))
    renewal.load(first)
    return VirtAPITLS(server, handlers, renewal)
