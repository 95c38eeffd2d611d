"""A CA and a serving certificate for the webhook Service (pure: PEM bytes out).

The operator makes them once and keeps them in a Secret that every replica reads, and
puts the CA into the ValidatingWebhookConfiguration's caBundle, so kube-apiserver trusts
whichever replica the Service picks. Built by :mod:`pki.certs`, the project's one
certificate builder.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass

from pki.certs import cert_pem, key_pem, leaf, self_signed_ca
from pki.certs import service_names as _service_names

VALIDITY = datetime.timedelta(days=3650)


@dataclass(frozen=True)
class ServingCert:
    ca: bytes
    cert: bytes
    key: bytes


def service_names(service: str, namespace: str) -> list[str]:
    return list(_service_names(service, namespace))


def make(*, dns_names: list[str], now: datetime.datetime) -> ServingCert:
    ca_key, ca_cert, ca_name = self_signed_ca("rootdisk webhook CA", now=now, validity=VALIDITY)
    key, cert = leaf(ca_key=ca_key, ca_name=ca_name, common_name=dns_names[0], server=True,
                     dns_names=tuple(dns_names), now=now, validity=VALIDITY)
    return ServingCert(ca=cert_pem(ca_cert), cert=cert_pem(cert), key=key_pem(key))
