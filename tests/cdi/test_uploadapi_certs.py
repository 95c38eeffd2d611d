"""The cdi-apiserver's certificates, on a real API server: its CA (Secret cdi-api-tls)
rotates, and the APIService's caBundle carries the bundle (next CA included) before the
new CA signs the serving certificate kube-apiserver will check."""

from __future__ import annotations

import base64
import datetime as dt
from collections.abc import Iterator
from pathlib import Path

import pytest

from cdi import uploadapi
from kubeclient import Client
from kubeclient.resources import SECRETS
from pki import certs, rotation
from tests.cdi.conftest import cdi_client
from tests.fixtures.tls import signer_index

NS = "rootdisk"
T0 = dt.datetime.now(dt.UTC).replace(microsecond=0)
L = (dt.timedelta(hours=48), dt.timedelta(hours=24))


@pytest.fixture
def kube(tmp_path: Path) -> Iterator[Client]:
    with cdi_client(tmp_path / "api", crds=(), served="/api/v1/namespaces",
                    namespaces=(NS,)) as c:
        c.create(uploadapi.APISERVICES, {
            "apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService",
            "metadata": {"name": uploadapi.APISERVICE},
            "spec": {"group": uploadapi.GROUP, "version": uploadapi.VERSION,
                     "groupPriorityMinimum": 1000, "versionPriority": 15,
                     "service": {"name": uploadapi.SERVICE, "namespace": NS, "port": 443}}})
        yield c


def ca_bundle(kube: Client) -> tuple[bytes, ...]:
    obj = kube.get_or_none(uploadapi.APISERVICES, uploadapi.APISERVICE)
    assert obj is not None
    return rotation.split_bundle(base64.b64decode(obj["spec"]["caBundle"]))


def signer(leaf: certs.KeyPair, bundle: tuple[bytes, ...]) -> int:
    return signer_index(leaf.cert_pem, bundle)


def test_the_apiservice_trusts_every_serving_certificate_across_a_rotation(
        kube: Client) -> None:
    first = uploadapi.issue_serving(kube, NS, lifetimes=L, now=T0).pair
    before = ca_bundle(kube)
    assert len(before) == 2 and signer(first, before) == 1
    assert certs.not_after(first.cert_pem) - T0 == L[1]  # no longer ten years
    later = uploadapi.issue_serving(kube, NS, lifetimes=L,
                                    now=T0 + dt.timedelta(hours=25)).pair
    after = ca_bundle(kube)
    assert len(after) == 3
    assert signer(later, before) == 0  # the CA the bundle already held as next
    assert signer(later, after) == 1 and signer(first, after) == 2  # old ones still trusted


def test_an_old_secret_keeps_its_ca_until_the_successor_was_trusted(kube: Client) -> None:
    old = certs.make_ca(name="cdi-apiserver-ca", now=T0)
    leaf = certs.issue(ca=old, common_name="cdi-api", now=T0)
    kube.create(SECRETS, {"apiVersion": "v1", "kind": "Secret",
                          "metadata": {"name": uploadapi.TLS_SECRET, "namespace": NS},
                          "data": {k: base64.b64encode(v).decode() for k, v in (
                              ("ca.crt", old.cert_pem), ("ca.key", old.key_pem),
                              ("tls.crt", leaf.cert_pem), ("tls.key", leaf.key_pem))}})
    pair = uploadapi.issue_serving(kube, NS, lifetimes=L, now=T0).pair
    bundle = ca_bundle(kube)
    assert bundle[1] == old.cert_pem and signer(pair, bundle) == 1
