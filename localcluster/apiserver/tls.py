"""The server's TLS material: a self-signed CA and a serving certificate it signed.

Clients (kubectl, kopf, the ``kubernetes`` package) verify the server against the CA that
the kubeconfig embeds, so the CA must survive restarts: both are written once into the
data dir and reused. The serving certificate covers ``127.0.0.1``, ``::1`` and ``localhost``
(and the in-cluster service name ``kubernetes.default.svc``).
"""

from __future__ import annotations

import datetime
import ipaddress
import logging
import os
import ssl
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from pki.certs import key_pem as _key_pem
from pki.certs import self_signed_ca

logger = logging.getLogger(__name__)

_VALIDITY = datetime.timedelta(days=3650)
SERVER_DNS_NAMES = ("localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc")


@dataclass(frozen=True)
class TLSFiles:
    ca_cert: Path
    server_cert: Path
    server_key: Path

    def ca_pem(self) -> bytes:
        return self.ca_cert.read_bytes()

    def server_context(self) -> ssl.SSLContext:
        ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        ctx.load_cert_chain(str(self.server_cert), str(self.server_key))
        return ctx

    def client_context(self) -> ssl.SSLContext:
        return ssl.create_default_context(cafile=str(self.ca_cert))


def _write_private(path: Path, data: bytes) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    os.replace(tmp, path)


def ensure_tls(directory: Path, *, dns_names: tuple[str, ...] = ()) -> TLSFiles:
    """Load the CA and serving certificate from ``directory``, creating them if absent
    (``dns_names``: more names for the serving certificate, e.g. ``svc.ns.svc``)."""
    directory.mkdir(parents=True, exist_ok=True)
    files = TLSFiles(directory / "ca.crt", directory / "server.crt", directory / "server.key")
    if files.ca_cert.exists() and files.server_cert.exists() and files.server_key.exists():
        return files
    now = datetime.datetime.now(datetime.UTC)
    ca_key, ca_cert, ca_name = self_signed_ca("localcluster-ca", now=now)
    key = ec.generate_private_key(ec.SECP256R1())
    sans: list[x509.GeneralName] = [x509.DNSName(n) for n in (*SERVER_DNS_NAMES, *dns_names)]
    sans += [x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
             x509.IPAddress(ipaddress.ip_address("::1"))]
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localcluster")]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + _VALIDITY)
        .add_extension(x509.SubjectAlternativeName(sans), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
                       critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    _write_private(directory / "ca.key", _key_pem(ca_key))
    _write_private(files.server_key, _key_pem(key))
    _write_private(files.server_cert, cert.public_bytes(serialization.Encoding.PEM))
    _write_private(files.ca_cert, ca_cert.public_bytes(serialization.Encoding.PEM))
    logger.info("created a CA and serving certificate in %s", directory)
    return files
