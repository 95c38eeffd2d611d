"""The VM side's own small PKI: one CA, certificates signed by it.

virt-api makes the CA once and keeps it in Secret ``kubevirt/virt-api-certs``; its
serving certificate (for ``virt-api.<ns>.svc``, also good as a client certificate with
CN ``virt-api``) is what the API server checks through the webhook and APIService
``caBundle``s. Node handlers sign their own serving certificate with the same CA, so the
console relay between virt-api and a handler is mutually authenticated.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from pki.certs import cert_pem, key_pem, leaf, self_signed_ca
from pki.certs import service_names as service_names

VALIDITY = dt.timedelta(days=3650)
API_CLIENT_CN = "virt-api"


@dataclass(frozen=True)
class KeyPair:
    cert_pem: bytes
    key_pem: bytes


def make_ca(*, name: str, now: dt.datetime) -> KeyPair:
    key, cert, _ = self_signed_ca(name, now=now, validity=VALIDITY)
    return KeyPair(cert_pem(cert), key_pem(key))


def issue(*, ca: KeyPair, common_name: str, dns_names: tuple[str, ...] = (),
          ips: tuple[str, ...] = (), now: dt.datetime) -> KeyPair:
    """A certificate good for serving (the names given) and as a client (its CN)."""
    ca_cert = x509.load_pem_x509_certificate(ca.cert_pem)
    ca_key = serialization.load_pem_private_key(ca.key_pem, password=None)
    if not isinstance(ca_key, ec.EllipticCurvePrivateKey):
        raise ValueError("the CA key is not an EC key")
    key, cert = leaf(ca_key=ca_key, ca_name=ca_cert.subject, common_name=common_name,
                     server=True, client=True, dns_names=dns_names, ips=ips, now=now,
                     validity=VALIDITY)
    return KeyPair(cert_pem(cert), key_pem(key))
