"""Upload tokens (pure): what the cdi-apiserver signs for an ``UploadTokenRequest`` and
the upload proxy checks before it forwards a byte.

A JWT signed ES256 with the cdi-apiserver's key (issuer ``cdi-apiserver``), valid five
minutes as upstream's, naming the operation (``Upload``), the resource
(``persistentvolumeclaims`` in core/v1), the claim and its namespace. The proxy holds
only the public key; a token for another claim, expired, or signed by another key is
refused (:class:`TokenError`).
"""

from __future__ import annotations

from dataclasses import dataclass

import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from cdi.errors import CdiError

ISSUER = "cdi-apiserver"
TTL = 300
"""Seconds a token is good for (upstream: 5 minutes)."""
OPERATION = "Upload"
RESOURCE = {"group": "", "version": "v1", "resource": "persistentvolumeclaims"}
ALGORITHM = "ES256"


class TokenError(CdiError, ValueError):
    """The token is not one this proxy accepts (the message says why)."""


@dataclass(frozen=True)
class Claims:
    namespace: str
    name: str
    operation: str
    expires: int


def make_key() -> tuple[bytes, bytes]:
    """A new signing key: (private PEM, public PEM)."""
    key = ec.generate_private_key(ec.SECP256R1())
    private = key.private_bytes(serialization.Encoding.PEM,
                                serialization.PrivateFormat.PKCS8,
                                serialization.NoEncryption())
    public = key.public_key().public_bytes(serialization.Encoding.PEM,
                                           serialization.PublicFormat.SubjectPublicKeyInfo)
    return private, public


def issue(*, key_pem: bytes, namespace: str, name: str, now: int, ttl: int = TTL) -> str:
    if not namespace or not name:
        raise TokenError("a token names a namespace and a claim")
    payload = {"iss": ISSUER, "iat": now, "nbf": now - 5, "exp": now + ttl,
               "operation": OPERATION, "namespace": namespace, "name": name,
               "resource": RESOURCE}
    return jwt.encode(payload, key_pem, algorithm=ALGORITHM)


def verify(*, token: str, public_pem: bytes) -> Claims:
    """The claims of a good token (signature, issuer, expiry checked), else TokenError."""
    try:
        payload = jwt.decode(token, public_pem, algorithms=[ALGORITHM], issuer=ISSUER,
                             options={"require": ["exp", "iat", "iss"]})
    except jwt.ExpiredSignatureError:
        raise TokenError("the token has expired") from None
    except jwt.PyJWTError as err:
        raise TokenError(f"the token is not valid: {err}") from None
    if payload.get("operation") != OPERATION or payload.get("resource") != RESOURCE:
        raise TokenError("the token is not an upload token for a PersistentVolumeClaim")
    namespace, name = payload.get("namespace"), payload.get("name")
    if not isinstance(namespace, str) or not isinstance(name, str) or not namespace or not name:
        raise TokenError("the token names no claim")
    return Claims(namespace=namespace, name=name, operation=OPERATION,
                  expires=int(payload["exp"]))
