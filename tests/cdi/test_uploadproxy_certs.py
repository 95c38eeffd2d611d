"""The upload proxy's own certificates, on a real API server: its CA rotates in its
Secret, the bundle clients read (ConfigMap ``cdi-uploadproxy-ca``) follows, a client
holding the bundle from before a rotation trusts what the proxy serves after it (the
renewal into the live server: tests/test_pki_serving.py)."""

from __future__ import annotations

import base64
import datetime as dt
from collections.abc import Iterator
from pathlib import Path

import pytest

from cdi import uploadproxy
from kubeclient import Client
from kubeclient.resources import CONFIGMAPS, SECRETS
from pki import certs, rotation
from tests.cdi.conftest import cdi_client
from tests.fixtures.tls import handshake, signer_index

NS = "rootdisk"
CA_L = dt.timedelta(hours=48)
LEAF_L = dt.timedelta(hours=24)
T0 = dt.datetime.now(dt.UTC).replace(microsecond=0)


@pytest.fixture
def kube(tmp_path: Path) -> Iterator[Client]:
    with cdi_client(tmp_path / "api", crds=(), served="/api/v1/namespaces",
                    namespaces=(NS,)) as c:
        yield c


def published(kube: Client) -> bytes:
    cm = kube.get_or_none(CONFIGMAPS, uploadproxy.CA_CONFIGMAP, NS)
    assert cm is not None
    return str(cm["data"]["ca.crt"]).encode()


def secret_data(kube: Client) -> dict[str, bytes]:
    secret = kube.get_or_none(SECRETS, uploadproxy.TLS_SECRET, NS)
    assert secret is not None
    return {k: base64.b64decode(v) for k, v in secret["data"].items()}


def issuer_of(leaf: certs.KeyPair, bundle: bytes) -> int:
    """Which certificate of ``bundle`` signed ``leaf`` (its index)."""
    return signer_index(leaf.cert_pem, rotation.split_bundle(bundle))


def test_the_proxy_ca_rotates_and_clients_with_the_old_bundle_keep_trusting_it(
        kube: Client) -> None:
    first = uploadproxy.ensure_tls(kube, NS, "127.0.0.1", lifetimes=(CA_L, LEAF_L), now=T0)
    bundle_then = published(kube)
    assert len(rotation.split_bundle(bundle_then)) == 2  # the next CA is trusted already
    assert issuer_of(first, bundle_then) == 1  # the current one signs
    assert certs.not_after(first.cert_pem) - T0 == LEAF_L
    again = uploadproxy.ensure_tls(kube, NS, "127.0.0.1", lifetimes=(CA_L, LEAF_L),
                                   now=T0 + dt.timedelta(hours=1))
    assert published(kube) == bundle_then  # nothing due: nothing rewritten
    assert issuer_of(again, bundle_then) == 1

    later = uploadproxy.ensure_tls(kube, NS, "127.0.0.1", lifetimes=(CA_L, LEAF_L),
                                   now=T0 + dt.timedelta(hours=25))
    bundle_now = published(kube)
    assert len(rotation.split_bundle(bundle_now)) == 3
    assert issuer_of(later, bundle_now) == 1 and issuer_of(later, bundle_then) == 0
    assert secret_data(kube)["ca.crt"] == rotation.split_bundle(bundle_then)[0]
    # a client that read the ConfigMap before the rotation accepts what the new CA signs
    # (issued for now: the clock of this handshake is the real one)
    data = secret_data(kube)
    serving = certs.issue(ca=certs.KeyPair(data["ca.crt"], data["ca.key"]),
                          common_name="cdi-uploadproxy",
                          dns_names=certs.service_names("cdi-uploadproxy", NS), now=T0)
    client_ca = certs.make_ca(name="c", now=T0)
    client = certs.issue(ca=client_ca, common_name="a client", now=T0)
    handshake(server_cert=serving, server_trusts=client_ca.cert_pem,
              client_cert=client, client_trusts=bundle_then,
              server_name="cdi-uploadproxy.rootdisk.svc")


def test_an_old_ten_year_proxy_ca_is_kept_until_its_successor_was_trusted(
        kube: Client) -> None:
    old = certs.make_ca(name="cdi-uploadproxy-ca", now=T0)
    kube.create(SECRETS, {"apiVersion": "v1", "kind": "Secret",
                          "metadata": {"name": uploadproxy.TLS_SECRET, "namespace": NS},
                          "data": {"ca.crt": base64.b64encode(old.cert_pem).decode(),
                                   "ca.key": base64.b64encode(old.key_pem).decode()}})
    kube.create(CONFIGMAPS, {"apiVersion": "v1", "kind": "ConfigMap",
                             "metadata": {"name": uploadproxy.CA_CONFIGMAP, "namespace": NS},
                             "data": {"ca.crt": old.cert_pem.decode()}})
    pair = uploadproxy.ensure_tls(kube, NS, "", lifetimes=(CA_L, LEAF_L), now=T0)
    bundle = published(kube)
    assert rotation.split_bundle(bundle)[1] == old.cert_pem
    assert issuer_of(pair, bundle) == 1  # still the old CA: clients trust only it so far
    assert certs.not_after(pair.cert_pem) - T0 == LEAF_L  # no longer ten years


@pytest.mark.parametrize(("env", "said"), [
    ({"UPLOADPROXY_CERT_LIFETIME": "soon"}, "UPLOADPROXY_CERT_LIFETIME: 'soon' is not a number"),
    ({"UPLOADPROXY_CA_CERT_LIFETIME": "100", "UPLOADPROXY_CERT_LIFETIME": "60"},
     "at most half the CA lifetime"),
])
def test_a_bad_lifetime_setting_stops_the_proxy_naming_the_variable(
        env: dict[str, str], said: str, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    with pytest.raises(SystemExit) as stop:
        uploadproxy.main(["--kubeconfig", "/nonexistent"])
    assert stop.value.code == 2
    assert said in capsys.readouterr().err
