"""Rotating a CA without a moment of broken trust (pure but for key generation).

An :class:`Authority` is a CA kept in a Secret with the one that will follow it: the
*current* CA signs, the *next* one is already made and already trusted. Every trust
bundle handed out (a server pod's client CA, the proxy's view of the servers, the
ConfigMap clients read) holds every CA still valid, next included. So when the current
CA reaches half its life and the next one takes over, whatever it signs is trusted by
peers that took their bundle before the change: the swap needs no restart anywhere, as
long as those peers take a fresh bundle at least once every half CA lifetime (upload
server pods live half a certificate lifetime; the proxy reloads on every change).

Timeline for a CA lifetime ``L``: a CA is made ``next`` with ``1.5 L`` of validity,
becomes ``current`` one rotation later, signs for ``L / 2`` and still has ``L / 2`` left
when it is replaced; so a leaf lasting at most ``L / 2`` never outlives its CA (checked
by :func:`check_lifetimes`). Upstream's defaults, kept here: CA 48 h, renewed at 24 h;
server and client certificates 24 h, renewed at 12 h.

Secret keys: ``ca.crt`` / ``ca.key`` (current), ``next.crt`` / ``next.key``,
``bundle.crt`` (every CA still valid, newest first). A Secret of the old shape (``ca.*``
only) is read as an authority whose next CA is still to be made.
"""

from __future__ import annotations

import base64
import datetime as dt
import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes

from pki.certs import KeyPair, make_ca

CA_LIFETIME = dt.timedelta(hours=48)
LEAF_LIFETIME = dt.timedelta(hours=24)
MIN_LIFETIME = dt.timedelta(seconds=10)
MAX_LIFETIME = dt.timedelta(days=366)
_PEM = re.compile(rb"-----BEGIN CERTIFICATE-----\r?\n.+?\r?\n-----END CERTIFICATE-----",
                  re.DOTALL)


@dataclass(frozen=True)
class Authority:
    current: KeyPair
    next: KeyPair
    bundle: tuple[bytes, ...]
    """PEM of every CA still valid, newest first: ``next`` and ``current`` among them."""

    def bundle_pem(self) -> bytes:
        return b"".join(pem if pem.endswith(b"\n") else pem + b"\n" for pem in self.bundle)

    def data(self) -> dict[str, bytes]:
        """The Secret's data (before base64)."""
        return {"ca.crt": self.current.cert_pem, "ca.key": self.current.key_pem,
                "next.crt": self.next.cert_pem, "next.key": self.next.key_pem,
                "bundle.crt": self.bundle_pem()}


def split_bundle(pem: bytes) -> tuple[bytes, ...]:
    """The certificates of a PEM bundle, each as its own PEM."""
    return tuple(m.group(0) + b"\n" for m in _PEM.finditer(pem))


def _cert(pem: bytes) -> x509.Certificate | None:
    try:
        return x509.load_pem_x509_certificate(pem)
    except ValueError:
        return None


def remaining(pem: bytes, *, now: dt.datetime) -> dt.timedelta | None:
    """How long a certificate is still valid (None: unreadable)."""
    cert = _cert(pem)
    return None if cert is None else cert.not_valid_after_utc - now


def authority_from(data: Mapping[str, bytes]) -> tuple[KeyPair, KeyPair | None,
                                                        tuple[bytes, ...]] | None:
    """(current, next or None, bundle) from a Secret's decoded data; None when it holds no
    readable current CA."""
    if not data.get("ca.crt") or not data.get("ca.key") or _cert(data["ca.crt"]) is None:
        return None
    current = KeyPair(data["ca.crt"], data["ca.key"])
    nxt = None
    if data.get("next.crt") and data.get("next.key") and _cert(data["next.crt"]) is not None:
        nxt = KeyPair(data["next.crt"], data["next.key"])
    return current, nxt, split_bundle(data.get("bundle.crt") or b"")


def rotated(found: tuple[KeyPair, KeyPair | None, tuple[bytes, ...]] | None, *, name: str,
            now: dt.datetime, lifetime: dt.timedelta = CA_LIFETIME) -> Authority | None:
    """The authority to store, or None when ``found`` is fine as it is.

    - No CA yet: a current one (``lifetime``) and a next one (``1.5 lifetime``).
    - The next one has been trusted for half a lifetime (it has ``lifetime`` or less
      left), or the current one has less than half a lifetime left: the next one takes
      over and a new next one is made. The first rule also retires a current CA that
      outlasts its successor (one made under a longer lifetime) after a full overlap.
    - No usable next one (an old Secret): one is made; the current one stays.
    - A current one that cannot be used and no next one with half a lifetime left: a new
      current one (peers trust it from their next reload; nothing better is possible).

    The bundle then drops every expired CA."""
    half = lifetime / 2
    if found is None:
        first = make_ca(name=name, now=now, validity=lifetime)
        second = make_ca(name=name, now=now, validity=lifetime + half)
        return Authority(first, second, _bundle((second.cert_pem, first.cert_pem), now=now))
    current, nxt, bundle = found
    left = remaining(current.cert_pem, now=now)
    next_left = remaining(nxt.cert_pem, now=now) if nxt is not None else None
    changed = False
    if left is None or left < half or (next_left is not None and next_left <= lifetime):
        if next_left is not None and next_left >= half:
            assert nxt is not None
            current = nxt
        else:
            current = make_ca(name=name, now=now, validity=lifetime)
        nxt, changed = None, True
    if nxt is None or next_left is None:
        nxt, changed = make_ca(name=name, now=now, validity=lifetime + half), True
    wanted = _bundle((nxt.cert_pem, current.cert_pem, *bundle), now=now)
    if not changed and wanted == bundle:
        return None
    return Authority(current, nxt, wanted)


Read = Callable[[], tuple[dict[str, bytes], str] | None]
"""The Secret's decoded data and resourceVersion, or None when there is none."""
Write = Callable[[dict[str, bytes], str | None], bool]
"""Store data: create (no resourceVersion) or update at that resourceVersion; False when
someone else wrote first (409): read again."""
ATTEMPTS = 5


def secret_data(secret: Mapping[str, Any]) -> tuple[dict[str, bytes], str]:
    """A Secret object as the API returned it, as :data:`Read` gives it: its decoded
    data and its resourceVersion."""
    data = {k: base64.b64decode(v) for k, v in (secret.get("data") or {}).items()}
    return data, str((secret.get("metadata") or {}).get("resourceVersion") or "")


def encoded(data: Mapping[str, bytes]) -> dict[str, str]:
    """Secret data as the API takes it (base64)."""
    return {k: base64.b64encode(v).decode() for k, v in data.items()}


def secret_object(name: str, namespace: str, data: Mapping[str, bytes]) -> dict[str, Any]:
    """An Opaque Secret holding ``data``, to create."""
    return {"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
            "metadata": {"name": name, "namespace": namespace}, "data": encoded(data)}


def kept(read: Read, write: Write, *, name: str, now: dt.datetime,
         lifetime: dt.timedelta = CA_LIFETIME) -> Authority:
    """The authority in a Secret, rotated (and stored) when due. Several writers may race
    (replicas, the populator's workers): each write is conditional and the loser reads
    the winner's, a bounded number of times."""
    for _ in range(ATTEMPTS):
        got = read()
        parsed = authority_from(got[0]) if got is not None else None
        new = rotated(parsed, name=name, now=now, lifetime=lifetime)
        if new is None:
            assert parsed is not None and parsed[1] is not None
            return Authority(parsed[0], parsed[1], parsed[2])
        if write(new.data(), got[1] if got is not None else None):
            return new
    raise RuntimeError(f"the Secret of CA {name} kept changing ({ATTEMPTS} tries)")


def _bundle(pems: tuple[bytes, ...], *, now: dt.datetime) -> tuple[bytes, ...]:
    out: list[bytes] = []
    seen: set[bytes] = set()
    for pem in pems:
        cert = _cert(pem)
        if cert is None or cert.not_valid_after_utc <= now:
            continue
        fingerprint = cert.fingerprint(hashes.SHA256())
        if fingerprint not in seen:
            seen.add(fingerprint)
            out.append(pem if pem.endswith(b"\n") else pem + b"\n")
    return tuple(out)


def leaf_due(cert_pem: bytes, *, issuer: KeyPair, now: dt.datetime,
             lifetime: dt.timedelta = LEAF_LIFETIME) -> bool:
    """Whether a leaf certificate is to be issued again: less than half its lifetime left,
    not signed by ``issuer`` (the CA rotated), or unreadable."""
    cert, ca = _cert(cert_pem), _cert(issuer.cert_pem)
    if cert is None or ca is None or cert.not_valid_after_utc - now < lifetime / 2:
        return True
    try:
        cert.verify_directly_issued_by(ca)
    except (ValueError, TypeError, InvalidSignature):
        return True
    return False


def lifetimes_from_env(env: Mapping[str, str], *, ca_var: str, leaf_var: str,
                       defaults: tuple[dt.timedelta, dt.timedelta] = (CA_LIFETIME,
                                                                      LEAF_LIFETIME),
                       ) -> tuple[dt.timedelta, dt.timedelta]:
    """(CA lifetime, leaf lifetime) from two variables holding seconds (unset: the
    ``defaults``, CDI upstream's 48 h and 24 h unless given), checked by
    :func:`check_lifetimes`; ValueError naming the variable otherwise."""
    values = []
    for var, default in zip((ca_var, leaf_var), defaults, strict=True):
        raw = env.get(var) or ""
        try:
            seconds = float(raw) if raw else default.total_seconds()
        except ValueError:
            raise ValueError(f"{var}: {raw!r} is not a number of seconds") from None
        if not math.isfinite(seconds):
            raise ValueError(f"{var}: {raw!r} is not a number of seconds")
        values.append((var, dt.timedelta(seconds=seconds)))
    (ca_name, ca), (leaf_name, leaf) = values
    check_lifetimes(ca=ca, leaf=leaf, what=f"{ca_name} / {leaf_name}")
    return ca, leaf


def check_lifetimes(*, ca: dt.timedelta, leaf: dt.timedelta, what: str) -> None:
    """Each lifetime within bounds, and a leaf lasting at most half its CA (so it ends
    before the CA that signed it); ValueError naming ``what`` otherwise."""
    for value, label in ((ca, "CA"), (leaf, "certificate")):
        if not MIN_LIFETIME <= value <= MAX_LIFETIME:
            raise ValueError(f"{what}: the {label} lifetime {value.total_seconds():g} s is not"
                             f" between {MIN_LIFETIME.total_seconds():g} s and a year")
    if leaf > ca / 2:
        raise ValueError(f"{what}: the certificate lifetime ({leaf.total_seconds():g} s) must"
                         f" be at most half the CA lifetime ({ca.total_seconds():g} s), so"
                         " that no certificate outlives the CA that signed it")
