"""Service-account tokens: signed JWTs (ES256) as kube-apiserver issues them.

Claims: ``iss`` (the issuer URL), ``aud`` (the audiences asked for, by default the API
server's own), ``exp``/``iat``/``nbf``, ``sub`` (``system:serviceaccount:NS:NAME``),
``jti`` and the binding claim ``kubernetes.io`` with the namespace, the ServiceAccount's
name and uid and, for a token bound to a pod, the pod's name and uid. Verification
checks the signature with the server's key only, the algorithm (ES256 only: ``none`` or
an HMAC over the public key never pass), issuer, audience and the time window; whether
the bound objects still exist is the caller's check (``Handlers._user``), since it
depends on the store.

The signing key is a P-256 key kept 0600 in the data dir's pki, so tokens survive a
restart; its public half is published as a JWKS (``/openid/v1/jwks``) for OIDC-style
verifiers. Verified signatures are cached (a dict keyed by the token text), so a busy
client costs one signature check, not one per request.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import threading
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

ISSUER = "https://kubernetes.default.svc.cluster.local"
ALGORITHM = "ES256"
CLAIM = "kubernetes.io"
MIN_EXPIRATION = 600
MAX_EXPIRATION = 2 ** 32
_CACHE_LIMIT = 4096


class TokenError(Exception):
    """The token is not one this server issued and still honours (message says why)."""


@dataclass(frozen=True)
class TokenClaims:
    namespace: str
    service_account: str
    service_account_uid: str
    pod_name: str
    pod_uid: str
    audiences: tuple[str, ...]
    expires: int
    token_id: str


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def load_or_create_key(path: Path) -> ec.EllipticCurvePrivateKey:
    """The signing key at ``path`` (PEM, created 0600 when absent)."""
    if path.exists():
        key = serialization.load_pem_private_key(path.read_bytes(), password=None)
        if not isinstance(key, ec.EllipticCurvePrivateKey):
            raise TokenError(f"{path} does not hold an EC private key")
        return key
    path.parent.mkdir(parents=True, exist_ok=True)
    key = ec.generate_private_key(ec.SECP256R1())
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                            serialization.NoEncryption())
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(pem)
    return key


class TokenIssuer:
    """Mints and verifies tokens. Thread-safe (the kubelet mints from worker threads)."""

    def __init__(self, key: ec.EllipticCurvePrivateKey, *, issuer: str = ISSUER,
                 api_audiences: tuple[str, ...] = (ISSUER,)) -> None:
        self._key = key
        self._public = key.public_key()
        self.issuer = issuer
        self.api_audiences = api_audiences
        der = self._public.public_bytes(serialization.Encoding.DER,
                                        serialization.PublicFormat.SubjectPublicKeyInfo)
        self.key_id = _b64(hashlib.sha256(der).digest())
        self._cache: dict[str, TokenClaims] = {}
        self._lock = threading.Lock()

    def mint(self, *, namespace: str, service_account: str, service_account_uid: str,
             now: int, expiration_seconds: int = 3600, audiences: tuple[str, ...] = (),
             pod_name: str = "", pod_uid: str = "") -> str:
        binding: dict[str, Any] = {
            "namespace": namespace,
            "serviceaccount": {"name": service_account, "uid": service_account_uid}}
        if pod_name:
            binding["pod"] = {"name": pod_name, "uid": pod_uid}
        claims = {"iss": self.issuer, "aud": list(audiences or self.api_audiences),
                  "sub": f"system:serviceaccount:{namespace}:{service_account}",
                  "iat": now, "nbf": now, "exp": now + expiration_seconds,
                  "jti": str(uuid.uuid4()), CLAIM: binding}
        return jwt.encode(claims, self._key, algorithm=ALGORITHM,
                          headers={"kid": self.key_id})

    def verify(self, token: str, *, now: int, audiences: tuple[str, ...] = ()) -> TokenClaims:
        """The claims of a token this server signed, valid at ``now`` for one of
        ``audiences`` (default: the API server's). Raises TokenError."""
        wanted = audiences or self.api_audiences
        with self._lock:
            cached = self._cache.get(token)
        if cached is None:
            cached = self._verify_signature(token)
            with self._lock:
                if len(self._cache) >= _CACHE_LIMIT:
                    self._cache.clear()
                self._cache[token] = cached
        if now >= cached.expires:
            raise TokenError("the token has expired")
        if not set(cached.audiences) & set(wanted):
            raise TokenError(f"the token's audiences {list(cached.audiences)} include none "
                             f"of {list(wanted)}")
        return cached

    def _verify_signature(self, token: str) -> TokenClaims:
        try:
            header = jwt.get_unverified_header(token)
        except jwt.PyJWTError as err:
            raise TokenError(f"not a JWT: {err}") from None
        if header.get("alg") != ALGORITHM:
            raise TokenError(f"unexpected signing algorithm {header.get('alg')!r}")
        try:
            # Audience and expiry are checked by verify() against the cached claims (the
            # wanted audiences vary by caller); everything else here, signature first.
            claims = jwt.decode(token, self._public, algorithms=[ALGORITHM],
                                issuer=self.issuer,
                                options={"verify_aud": False,
                                         "require": ["iss", "aud", "exp", "iat", "nbf",
                                                     "sub"]})
        except jwt.PyJWTError as err:
            raise TokenError(f"invalid token: {err}") from None
        return _claims(claims)

    def jwks(self) -> dict[str, Any]:
        jwk = json.loads(jwt.algorithms.ECAlgorithm.to_jwk(self._public))
        jwk.update({"kid": self.key_id, "use": "sig", "alg": ALGORITHM})
        return {"keys": [jwk]}

    def openid_configuration(self) -> dict[str, Any]:
        return {"issuer": self.issuer, "jwks_uri": f"{self.issuer}/openid/v1/jwks",
                "response_types_supported": ["id_token"], "subject_types_supported": ["public"],
                "id_token_signing_alg_values_supported": [ALGORITHM]}


def _claims(claims: dict[str, Any]) -> TokenClaims:
    binding = claims.get(CLAIM)
    if not isinstance(binding, dict):
        raise TokenError(f"the token has no {CLAIM} claim")
    sa = binding.get("serviceaccount") or {}
    pod = binding.get("pod") or {}
    namespace = binding.get("namespace")
    if not isinstance(namespace, str) or not namespace or not isinstance(sa, dict) \
            or not sa.get("name") or not sa.get("uid") or not isinstance(pod, dict):
        raise TokenError("the token's binding claim is incomplete")
    if claims.get("sub") != f"system:serviceaccount:{namespace}:{sa['name']}":
        raise TokenError("the token's subject does not match its service account")
    aud = claims.get("aud")
    audiences = (aud,) if isinstance(aud, str) else tuple(str(a) for a in aud or ())
    if pod and (not pod.get("name") or not pod.get("uid")):
        raise TokenError("the token's pod binding is incomplete")
    return TokenClaims(namespace=namespace, service_account=str(sa["name"]),
                       service_account_uid=str(sa["uid"]), pod_name=str(pod.get("name", "")),
                       pod_uid=str(pod.get("uid", "")), audiences=audiences,
                       expires=int(claims["exp"]), token_id=str(claims.get("jti", "")))
