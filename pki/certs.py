"""A self-signed CA and the leaf certificates it signs (pure but for key generation).

One builder for every CA the project makes: localcluster's cluster and front-proxy CAs
(kept for years in its data dir) and the host-assisted clone's per-clone CA (a fresh one
per clone, its key thrown away once the two leaves are signed, so nothing else can ever
be signed by it). P-256 keys, SHA-256 signatures.
"""

from __future__ import annotations

import datetime
import hashlib
import ipaddress
import os
from dataclasses import dataclass

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

_VALIDITY = datetime.timedelta(days=3650)
_SKEW = datetime.timedelta(minutes=5)


def key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def cert_pem(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


def self_signed_ca(common_name: str, *, now: datetime.datetime,
                   validity: datetime.timedelta = _VALIDITY,
                   ) -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate, x509.Name]:
    """A new P-256 CA able to sign leaf certificates: (key, certificate, name)."""
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    ca_cert = (
        x509.CertificateBuilder()
        .subject_name(ca_name).issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - _SKEW)
        .not_valid_after(now + validity)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                     content_commitment=False, key_encipherment=False,
                                     data_encipherment=False, key_agreement=False,
                                     encipher_only=False, decipher_only=False), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()),
                       critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    return ca_key, ca_cert, ca_name


def not_after(pem: bytes) -> datetime.datetime:
    """When a PEM certificate stops being valid (UTC)."""
    return x509.load_pem_x509_certificate(pem).not_valid_after_utc


def write_pair(directory: str | os.PathLike[str], cert: bytes, key: bytes,
               ) -> tuple[str, str]:
    """``tls.crt`` and ``tls.key`` in ``directory`` (a private temporary one), created
    0600 and never over an existing file: ssl loads a certificate chain from files only.
    Returns their paths."""
    paths = (os.path.join(directory, "tls.crt"), os.path.join(directory, "tls.key"))
    for path, data in zip(paths, (cert, key), strict=True):
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
    return paths


def service_names(service: str, namespace: str) -> tuple[str, ...]:
    """The DNS names a Service is reached by inside the cluster."""
    return (service, f"{service}.{namespace}", f"{service}.{namespace}.svc",
            f"{service}.{namespace}.svc.cluster.local")


def leaf(*, ca_key: ec.EllipticCurvePrivateKey, ca_name: x509.Name, common_name: str,
         server: bool, dns_names: tuple[str, ...], now: datetime.datetime,
         validity: datetime.timedelta = _VALIDITY, client: bool | None = None,
         ips: tuple[str, ...] = (),
         ) -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate]:
    """A leaf for serving (``server``) or client authentication: by default for one
    purpose only, so a client's certificate cannot serve and a server's cannot log in;
    ``client=True`` with ``server=True`` where one identity does both (a mutual relay)."""
    key = ec.generate_private_key(ec.SECP256R1())
    usages = [ExtendedKeyUsageOID.SERVER_AUTH] if server else []
    if client if client is not None else not server:
        usages.append(ExtendedKeyUsageOID.CLIENT_AUTH)
    builder = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - _SKEW)
        .not_valid_after(now + validity)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage(usages), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
                       critical=False)
    )
    alt: list[x509.GeneralName] = [x509.DNSName(n) for n in dns_names]
    alt += [x509.IPAddress(ipaddress.ip_address(i)) for i in ips]
    if alt:
        builder = builder.add_extension(x509.SubjectAlternativeName(alt), critical=False)
    return key, builder.sign(ca_key, hashes.SHA256())


@dataclass(frozen=True)
class Party:
    """One side's PEM material: the CA both trust, its certificate and key."""
    ca: bytes
    cert: bytes
    key: bytes


@dataclass(frozen=True)
class PairedTLS:
    """A per-connection CA and the two ends it authenticates, nothing else."""
    server: Party
    client: Party
    fingerprint: str
    """SHA-256 of the CA certificate (hex): tells two halves of one pair apart."""


def paired_tls(*, server_name: str, client_name: str, now: datetime.datetime,
               validity: datetime.timedelta) -> PairedTLS:
    """A fresh CA, a serving certificate for ``server_name`` (its DNS name too) and a
    client certificate for ``client_name``; the CA's key is dropped here."""
    ca_key, ca_cert, ca_name = self_signed_ca(f"{server_name}-ca", now=now, validity=validity)
    skey, scert = leaf(ca_key=ca_key, ca_name=ca_name, common_name=server_name, server=True,
                       dns_names=(server_name,), now=now, validity=validity)
    ckey, ccert = leaf(ca_key=ca_key, ca_name=ca_name, common_name=client_name, server=False,
                       dns_names=(), now=now, validity=validity)
    ca = cert_pem(ca_cert)
    return PairedTLS(server=Party(ca, cert_pem(scert), key_pem(skey)),
                     client=Party(ca, cert_pem(ccert), key_pem(ckey)),
                     fingerprint=hashlib.sha256(ca).hexdigest())


# -- a CA kept as PEM (in a Secret) and the leaves it issues -------------------------------


@dataclass(frozen=True)
class KeyPair:
    """A certificate and its key, PEM: how a CA or a leaf is kept in a Secret."""
    cert_pem: bytes
    key_pem: bytes


def make_ca(*, name: str, now: datetime.datetime,
            validity: datetime.timedelta = _VALIDITY) -> KeyPair:
    key, cert, _ = self_signed_ca(name, now=now, validity=validity)
    return KeyPair(cert_pem(cert), key_pem(key))


def issue(*, ca: KeyPair, common_name: str, dns_names: tuple[str, ...] = (),
          ips: tuple[str, ...] = (), now: datetime.datetime,
          validity: datetime.timedelta = _VALIDITY, client: bool = True) -> KeyPair:
    """A leaf signed by ``ca``, good for serving (the names given) and, unless
    ``client=False``, as a client (its CN): the identity of a component that both serves
    and calls its peers."""
    ca_cert = x509.load_pem_x509_certificate(ca.cert_pem)
    ca_key = serialization.load_pem_private_key(ca.key_pem, password=None)
    if not isinstance(ca_key, ec.EllipticCurvePrivateKey):
        raise ValueError("the CA key is not an EC key")
    key, cert = leaf(ca_key=ca_key, ca_name=ca_cert.subject, common_name=common_name,
                     server=True, client=client, dns_names=dns_names, ips=ips, now=now,
                     validity=validity)
    return KeyPair(cert_pem(cert), key_pem(key))
