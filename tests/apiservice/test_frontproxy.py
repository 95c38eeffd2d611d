"""The pure decisions of ``apiservice.frontproxy``: the ConfigMap's settings, the proxy's
certificate name and the identity headers. (The TLS half is exercised end to end in
tests/localcluster/apiserver/test_aggregation.py.)"""

from __future__ import annotations

import json

import pytest

from apiservice import frontproxy
from apiservice.frontproxy import FrontProxyConfig, FrontProxyError

PEM = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"


def _data(**over):
    data = {"requestheader-client-ca-file": PEM,
            "requestheader-allowed-names": json.dumps(["front-proxy-client"]),
            "requestheader-username-headers": json.dumps(["X-Remote-User"]),
            "requestheader-group-headers": json.dumps(["X-Remote-Group"]),
            "requestheader-extra-headers-prefix": json.dumps(["X-Remote-Extra-"])}
    data.update(over)
    return data


def test_config_from_the_configmap():
    config = FrontProxyConfig.from_configmap_data(_data())
    assert config.allowed_names == ("front-proxy-client",)
    assert config.username_headers == ("X-Remote-User",)
    assert FrontProxyConfig.from_configmap_data(
        _data(**{"requestheader-allowed-names": ""})).allowed_names == ()


@pytest.mark.parametrize(("key", "value", "message"), [
    ("requestheader-client-ca-file", "", "holds no PEM certificate"),
    ("requestheader-allowed-names", "front-proxy-client", "is not a JSON list"),
    ("requestheader-group-headers", json.dumps({"a": 1}), "JSON list of strings"),
])
def test_bad_configmaps_name_the_key(key, value, message):
    with pytest.raises(FrontProxyError, match=message) as err:
        FrontProxyConfig.from_configmap_data(_data(**{key: value}))
    assert key in str(err.value)


def test_the_proxy_certificate_name_must_be_allowed():
    config = FrontProxyConfig.from_configmap_data(_data())
    frontproxy.check_proxy_name("front-proxy-client", config)
    with pytest.raises(FrontProxyError, match="not one of the allowed"):
        frontproxy.check_proxy_name("someone-else", config)
    with pytest.raises(FrontProxyError, match="no verified client certificate"):
        frontproxy.check_proxy_name(None, config)
    anyone = FrontProxyConfig(client_ca_pem=PEM)
    frontproxy.check_proxy_name("someone-else", anyone)


def test_identity_headers():
    config = FrontProxyConfig.from_configmap_data(_data())
    who = frontproxy.identity_from_headers([
        ("x-remote-user", "system:serviceaccount:ns:robot"), ("X-Remote-Group", "a"),
        ("X-Remote-Group", "b"), ("X-Remote-Extra-Authentication.kubernetes.io%2fpod-name",
                                  "p"), ("X-Remote-Extra-Scopes", "s1"),
        ("X-Remote-Extra-Scopes", "s2"), ("X-Other", "x")], config)
    assert who.username == "system:serviceaccount:ns:robot" and who.groups == ("a", "b")
    assert who.extra == {"authentication.kubernetes.io/pod-name": ("p",),
                         "scopes": ("s1", "s2")}
    with pytest.raises(FrontProxyError, match="username headers"):
        frontproxy.identity_from_headers([("X-Remote-Group", "a")], config)


def test_common_name_of_a_peer_certificate():
    cert = {"subject": ((("organizationName", "o"),), (("commonName", "front-proxy-client"),))}
    assert frontproxy.common_name_of(cert) == "front-proxy-client"
    assert frontproxy.common_name_of({}) is None and frontproxy.common_name_of(None) is None
