"""Who is calling: bearer tokens for the admin and for service accounts.

The admin token is random and lives in the data dir (and the kubeconfig). Service-account
tokens are minted here without storing them: ``lcsa.<payload>.<hmac>``, where the payload
names the account and the HMAC key is a per-data-dir secret, so a restart keeps mounted
tokens valid and nobody can forge one. Whether the account still exists is checked by the
caller (a deleted account's token stops working, as with bound tokens upstream).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
import secrets
from dataclasses import dataclass
from pathlib import Path

ADMIN_USER = "admin"
ADMIN_GROUPS = ("system:masters", "system:authenticated")
_PREFIX = "lcsa"


@dataclass(frozen=True)
class UserInfo:
    username: str
    groups: tuple[str, ...]
    uid: str = ""
    # Set for service accounts: (namespace, name).
    service_account: tuple[str, str] | None = None

    @property
    def is_admin(self) -> bool:
        return "system:masters" in self.groups

    def to_dict(self) -> dict[str, object]:
        out: dict[str, object] = {"username": self.username, "groups": list(self.groups)}
        if self.uid:
            out["uid"] = self.uid
        return out


ADMIN = UserInfo(ADMIN_USER, ADMIN_GROUPS)


def service_account_user(namespace: str, name: str) -> UserInfo:
    return UserInfo(
        f"system:serviceaccount:{namespace}:{name}",
        ("system:serviceaccounts", f"system:serviceaccounts:{namespace}",
         "system:authenticated"),
        service_account=(namespace, name),
    )


def _read_or_create(path: Path, nbytes: int) -> str:
    if path.exists():
        return path.read_text().strip()
    value = secrets.token_hex(nbytes)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(value)
    return value


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


class Authenticator:
    """Maps bearer tokens to users. Thread-safe: nothing here mutates after __init__."""

    def __init__(self, data_dir: Path) -> None:
        self.admin_token = _read_or_create(data_dir / "admin-token", 32)
        self._key = _read_or_create(data_dir / "sa-signing-key", 32).encode()

    def _sign(self, payload: str) -> str:
        return _b64(hmac.new(self._key, payload.encode(), hashlib.sha256).digest())

    def mint_service_account_token(self, namespace: str, name: str) -> str:
        payload = _b64(json.dumps({"ns": namespace, "sa": name,
                                   "n": secrets.token_hex(4)}).encode())
        return f"{_PREFIX}.{payload}.{self._sign(payload)}"

    def authenticate(self, token: str) -> UserInfo | None:
        if hmac.compare_digest(token, self.admin_token):
            return ADMIN
        parts = token.split(".")
        if len(parts) != 3 or parts[0] != _PREFIX:
            return None
        if not hmac.compare_digest(self._sign(parts[1]), parts[2]):
            return None
        try:
            claims = json.loads(_unb64(parts[1]))
            return service_account_user(str(claims["ns"]), str(claims["sa"]))
        except (ValueError, KeyError):
            return None
