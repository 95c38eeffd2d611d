"""CA rotation (pki.rotation): when the CA turns over, what the bundle holds, when a leaf
is issued again, and, with real TLS handshakes, that a peer holding a bundle from before
a rotation trusts what the new CA signs."""

from __future__ import annotations

import datetime as dt
import ssl

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes

from pki import certs, rotation
from tests.fixtures.tls import handshake

T0 = dt.datetime(2026, 12, 1, tzinfo=dt.UTC)
L = dt.timedelta(hours=48)
H = dt.timedelta(hours=1)


def found(a: rotation.Authority) -> tuple[certs.KeyPair, certs.KeyPair | None,
                                          tuple[bytes, ...]]:
    got = rotation.authority_from(a.data())
    assert got is not None
    return got


def names(a: rotation.Authority) -> list[bytes]:
    return [x509.load_pem_x509_certificate(p).fingerprint(hashes.SHA256())
            for p in a.bundle]


def fp(pem: bytes) -> bytes:
    return x509.load_pem_x509_certificate(pem).fingerprint(hashes.SHA256())


def test_a_new_authority_has_a_current_and_an_already_trusted_next_ca() -> None:
    a = rotation.rotated(None, name="ca", now=T0, lifetime=L)
    assert a is not None and a.current != a.next
    assert names(a) == [fp(a.next.cert_pem), fp(a.current.cert_pem)]
    assert rotation.remaining(a.current.cert_pem, now=T0) == L
    assert rotation.remaining(a.next.cert_pem, now=T0) == L * 3 / 2
    assert rotation.rotated(found(a), name="ca", now=T0 + 23 * H, lifetime=L) is None


def test_the_next_ca_takes_over_at_half_life_and_the_old_one_stays_trusted() -> None:
    a = rotation.rotated(None, name="ca", now=T0, lifetime=L)
    assert a is not None
    b = rotation.rotated(found(a), name="ca", now=T0 + 24 * H + H, lifetime=L)
    assert b is not None
    assert b.current == a.next  # already in every bundle handed out since T0
    assert b.next not in (a.current, a.next)
    assert names(b) == [fp(b.next.cert_pem), fp(a.next.cert_pem), fp(a.current.cert_pem)]
    # steady state: each CA signs for half a lifetime, with half a lifetime left at the end
    assert rotation.rotated(found(b), name="ca", now=T0 + 47 * H, lifetime=L) is None
    c = rotation.rotated(found(b), name="ca", now=T0 + 49 * H, lifetime=L)
    assert c is not None and c.current == b.next
    # the first CA expired at T0 + 48 h: dropped from the bundle
    assert fp(a.current.cert_pem) not in names(c)
    assert names(c) == [fp(c.next.cert_pem), fp(b.next.cert_pem), fp(a.next.cert_pem)]


def test_an_old_secret_gets_a_next_ca_first_and_its_long_ca_retires_after_an_overlap(
        ) -> None:
    old = certs.make_ca(name="ca", now=T0)  # the ten-year CA earlier versions made
    first = rotation.rotated((old, None, ()), name="ca", now=T0, lifetime=L)
    assert first is not None and first.current == old  # kept: every peer trusts it
    assert names(first) == [fp(first.next.cert_pem), fp(old.cert_pem)]
    assert rotation.rotated(found(first), name="ca", now=T0 + 23 * H, lifetime=L) is None
    second = rotation.rotated(found(first), name="ca", now=T0 + 25 * H, lifetime=L)
    assert second is not None and second.current == first.next
    assert fp(old.cert_pem) in names(second)  # still valid: still trusted


def test_an_unusable_current_ca_without_a_next_one_is_replaced() -> None:
    assert rotation.authority_from({"ca.crt": b"junk", "ca.key": b"x"}) is None
    expired = certs.make_ca(name="ca", now=T0 - 3 * L, validity=L)
    a = rotation.rotated((expired, None, (expired.cert_pem,)), name="ca", now=T0, lifetime=L)
    assert a is not None and a.current != expired
    assert fp(expired.cert_pem) not in names(a)
    assert rotation.remaining(a.current.cert_pem, now=T0) == L


@pytest.mark.parametrize(("age", "due"), [(0, False), (11, False), (13, True)])
def test_a_leaf_is_renewed_at_half_its_lifetime(age: int, due: bool) -> None:
    a = rotation.rotated(None, name="ca", now=T0, lifetime=L)
    assert a is not None
    leaf = certs.issue(ca=a.current, common_name="client", now=T0, validity=24 * H)
    assert rotation.leaf_due(leaf.cert_pem, issuer=a.current, now=T0 + age * H,
                             lifetime=24 * H) is due


def test_a_leaf_of_the_previous_ca_is_renewed_after_a_rotation() -> None:
    a = rotation.rotated(None, name="ca", now=T0, lifetime=L)
    assert a is not None
    leaf = certs.issue(ca=a.current, common_name="client", now=T0, validity=24 * H)
    assert not rotation.leaf_due(leaf.cert_pem, issuer=a.current, now=T0 + H, lifetime=24 * H)
    assert rotation.leaf_due(leaf.cert_pem, issuer=a.next, now=T0 + H, lifetime=24 * H)
    assert rotation.leaf_due(b"junk", issuer=a.current, now=T0, lifetime=24 * H)


@pytest.mark.parametrize(("ca", "leaf", "error"), [
    (48 * 3600, 24 * 3600, None),
    (48, 24, None),
    (48, 25, "at most half the CA lifetime"),
    (5, 2, "CA lifetime 5 s is not between"),
    (48 * 3600, 3, "certificate lifetime 3 s is not between"),
])
def test_lifetimes_are_checked(ca: int, leaf: int, error: str | None) -> None:
    call = lambda: rotation.check_lifetimes(  # noqa: E731
        ca=dt.timedelta(seconds=ca), leaf=dt.timedelta(seconds=leaf), what="X_LIFETIME")
    if error is None:
        call()
    else:
        with pytest.raises(ValueError, match=error) as err:
            call()
        assert "X_LIFETIME" in str(err.value)


def test_a_peer_holding_a_bundle_from_before_the_rotation_trusts_the_new_ca() -> None:
    """The claim the design rests on, with real handshakes: a server (pod) made before
    the rotation, with the bundle of then, lets in a client certificate the new CA
    signed; and a client holding the bundle of then trusts a server certificate the new
    CA signed. A CA the server never saw is refused (the check is real)."""
    now = dt.datetime.now(dt.UTC)
    life = dt.timedelta(seconds=40)
    before = rotation.rotated(None, name="ca", now=now, lifetime=life)
    assert before is not None
    server = certs.issue(ca=before.current, common_name="server",
                         dns_names=("server.ns.svc",), now=now, validity=life / 2)
    after = rotation.rotated(found(before), name="ca", now=now + life * 0.6, lifetime=life)
    assert after is not None and after.current == before.next
    new_client = certs.issue(ca=after.current, common_name="client", now=now,
                             validity=life / 2)
    handshake(server_cert=server, server_trusts=before.bundle_pem(),
              client_cert=new_client, client_trusts=after.bundle_pem())
    new_server = certs.issue(ca=after.current, common_name="server",
                             dns_names=("server.ns.svc",), now=now, validity=life / 2)
    handshake(server_cert=new_server, server_trusts=after.bundle_pem(),
              client_cert=new_client, client_trusts=before.bundle_pem())
    stranger = certs.issue(ca=certs.make_ca(name="ca", now=now), common_name="client",
                           now=now)
    with pytest.raises(ssl.SSLError):
        handshake(server_cert=server, server_trusts=before.bundle_pem(),
                  client_cert=stranger, client_trusts=after.bundle_pem())


def test_secret_data_round_trip() -> None:
    """What the three CA stores write is what they read back, and a Secret of another
    writer without data reads as empty."""
    obj = rotation.secret_object("ca", "ns", {"ca.crt": b"\x00pem\xff", "ca.key": b"k"})
    assert obj["type"] == "Opaque"
    assert obj["metadata"] == {"name": "ca", "namespace": "ns"}
    obj["metadata"]["resourceVersion"] = "42"
    assert rotation.secret_data(obj) == ({"ca.crt": b"\x00pem\xff", "ca.key": b"k"}, "42")
    assert rotation.secret_data({"metadata": {}}) == ({}, "")
