"""The front proxy's certificates: a requestheader CA and the client certificate the
server presents when it forwards a request to an aggregated API's backend.

A separate CA from the serving one, as kube-apiserver's ``--requestheader-client-ca-file``:
a backend that trusts it for identity headers must not thereby trust every certificate
the cluster CA signs. Written once into the data dir's pki and reused across restarts.
"""

from __future__ import annotations

import datetime
import ssl
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from pki.certs import key_pem as _key_pem
from pki.certs import self_signed_ca

from ..tls import _write_private

PROXY_CLIENT_NAME = "front-proxy-client"
_VALIDITY = datetime.timedelta(days=3650)


@dataclass(frozen=True)
class FrontProxyFiles:
    ca_cert: Path
    client_cert: Path
    client_key: Path

    def ca_pem(self) -> str:
        return self.ca_cert.read_text()

    def client_context(self, *, ca_pem: str | None, verify: bool) -> ssl.SSLContext:
        """For a connection to a backend: our client certificate; the backend verified
        against ``ca_pem`` (an APIService's caBundle) unless ``verify`` is false."""
        ctx = ssl.create_default_context(cadata=ca_pem) if verify and ca_pem else \
            ssl.create_default_context()
        if not verify:
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE
        ctx.load_cert_chain(str(self.client_cert), str(self.client_key))
        return ctx


def ensure_front_proxy(directory: Path) -> FrontProxyFiles:
    directory.mkdir(parents=True, exist_ok=True)
    files = FrontProxyFiles(directory / "front-proxy-ca.crt",
                            directory / "front-proxy-client.crt",
                            directory / "front-proxy-client.key")
    if files.ca_cert.exists() and files.client_cert.exists() and files.client_key.exists():
        return files
    now = datetime.datetime.now(datetime.UTC)
    ca_key, ca_cert, ca_name = self_signed_ca("localcluster-front-proxy-ca", now=now)
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, PROXY_CLIENT_NAME)]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + _VALIDITY)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
                       critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    # The CA key signs nothing after this: it is not kept.
    _write_private(files.client_key, _key_pem(key))
    _write_private(files.client_cert, cert.public_bytes(serialization.Encoding.PEM))
    _write_private(files.ca_cert, ca_cert.public_bytes(serialization.Encoding.PEM))
    return files
