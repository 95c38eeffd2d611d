"""Who is calling: bearer tokens for the admin and for service accounts.

The admin token is random and lives in the data dir (and the kubeconfig). Service-account
tokens are signed JWTs (``sa_tokens``) whose signing key is kept in the data dir's pki, so
a restart keeps mounted tokens valid and nobody without the key can forge one. Whether the
bound objects (the ServiceAccount, the pod) still exist with the uids the token names is
checked by the caller against the store: a token of a deleted account or pod stops working.

A token is whatever the client sent, from a header or a TokenReview's body: any string,
non-ASCII, NUL or lone surrogates (undecodable header bytes) included. Every such token is
an unknown one (None, then 401), never an exception: comparisons are on bytes, and only an
ASCII token can be a JWT (``BearerTokens``).
"""

from __future__ import annotations

import hmac
import os
import secrets
import time
from dataclasses import dataclass
from pathlib import Path

from .sa_tokens import TokenClaims, TokenError, TokenIssuer, load_or_create_key

ADMIN_USER = "admin"
ADMIN_GROUPS = ("system:masters", "system:authenticated")
ANONYMOUS = "system:anonymous"


@dataclass(frozen=True)
class UserInfo:
    username: str
    groups: tuple[str, ...]
    uid: str = ""
    # Set for service accounts: (namespace, name).
    service_account: tuple[str, str] | None = None
    # (key, values) pairs sent on as X-Remote-Extra-<key> and in reviews' userInfo.extra.
    extra: tuple[tuple[str, tuple[str, ...]], ...] = ()
    # For service-account tokens: the uids the token is bound to (checked per request).
    bound_uids: tuple[str, ...] = ()

    @property
    def is_admin(self) -> bool:
        return "system:masters" in self.groups

    def to_dict(self) -> dict[str, object]:
        out: dict[str, object] = {"username": self.username, "groups": list(self.groups)}
        if self.uid:
            out["uid"] = self.uid
        if self.extra:
            out["extra"] = {k: list(v) for k, v in self.extra}
        return out


ADMIN = UserInfo(ADMIN_USER, ADMIN_GROUPS)
ANONYMOUS_USER = UserInfo(ANONYMOUS, ("system:unauthenticated",))


def service_account_user(namespace: str, name: str) -> UserInfo:
    return UserInfo(
        f"system:serviceaccount:{namespace}:{name}",
        ("system:serviceaccounts", f"system:serviceaccounts:{namespace}",
         "system:authenticated"),
        service_account=(namespace, name),
    )


def token_user(claims: TokenClaims) -> UserInfo:
    """The user of a verified service-account token, as kube-apiserver names it."""
    base = service_account_user(claims.namespace, claims.service_account)
    extra: list[tuple[str, tuple[str, ...]]] = []
    if claims.token_id:
        extra.append(("authentication.kubernetes.io/credential-id",
                      (f"JTI={claims.token_id}",)))
    bound = [claims.service_account_uid]
    if claims.pod_uid:
        extra += [("authentication.kubernetes.io/pod-name", (claims.pod_name,)),
                  ("authentication.kubernetes.io/pod-uid", (claims.pod_uid,))]
        bound.append(claims.pod_uid)
    return UserInfo(base.username, base.groups, uid=claims.service_account_uid,
                    service_account=base.service_account, extra=tuple(extra),
                    bound_uids=tuple(bound))


def _read_or_create(path: Path, nbytes: int) -> str:
    if path.exists():
        return path.read_text().strip()
    value = secrets.token_hex(nbytes)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(value)
    return value


def _token_bytes(token: str) -> bytes:
    """``token`` as bytes for a constant-time comparison; any string encodes (lone
    surrogates too: aiohttp decodes header bytes that are not UTF-8 as surrogates)."""
    return token.encode("utf-8", "surrogatepass")


class BearerTokens(TokenIssuer):
    """The token issuer, verifying only what can be a JWT: base64url segments and dots,
    so ASCII. PyJWT raises UnicodeEncodeError (not a TokenError) on a lone surrogate."""

    def verify(self, token: str, *, now: int, audiences: tuple[str, ...] = ()) -> TokenClaims:
        if not token.isascii():
            raise TokenError("not a JWT: the token is not ASCII")
        return super().verify(token, now=now, audiences=audiences)


class Authenticator:
    """Maps bearer tokens to users. Thread-safe (the token issuer's cache has a lock)."""

    def __init__(self, data_dir: Path) -> None:
        self.admin_token = _read_or_create(data_dir / "admin-token", 32)
        self.tokens: TokenIssuer = BearerTokens(
            load_or_create_key(data_dir / "pki" / "sa.key"))

    def authenticate(self, token: str, *, audiences: tuple[str, ...] = ()) -> UserInfo | None:
        """The user of ``token``, or None (also for a token no client could have been
        given: not ASCII, NUL, any length). Service-account users carry ``bound_uids``:
        the caller checks those objects still exist."""
        if hmac.compare_digest(_token_bytes(token), _token_bytes(self.admin_token)):
            return ADMIN
        if not token.isascii() or token.count(".") != 2:
            return None
        try:
            claims = self.tokens.verify(token, now=int(time.time()), audiences=audiences)
        except TokenError:
            return None
        return token_user(claims)
