"""Who sent a request that the Kubernetes API server proxied to an aggregated API.

kube-apiserver (and localcluster's) forwards requests for an ``APIService``'s group to
its backend over TLS, presenting a client certificate signed by the *requestheader* CA
and naming the authenticated user in headers (``X-Remote-User``, ``X-Remote-Group``,
``X-Remote-Extra-<key>``). The headers are only worth trusting when that certificate
verified against the requestheader CA and its common name is one of the allowed names:
anybody else who can reach the backend could send the same headers.

The API server publishes what a backend needs in ConfigMap
``kube-system/extension-apiserver-authentication`` (keys below); read it with any client
and pass ``data`` to :meth:`FrontProxyConfig.from_configmap_data`. The decisions here
are pure; :func:`server_ssl_context` and :func:`peer_common_name` are the small TLS
parts, :func:`authenticate_aiohttp` the aiohttp adapter.
"""

from __future__ import annotations

import json
import ssl
import urllib.parse
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

CONFIGMAP_NAMESPACE = "kube-system"
CONFIGMAP_NAME = "extension-apiserver-authentication"
KEY_CLIENT_CA = "requestheader-client-ca-file"
KEY_USERNAME_HEADERS = "requestheader-username-headers"
KEY_GROUP_HEADERS = "requestheader-group-headers"
KEY_EXTRA_PREFIXES = "requestheader-extra-headers-prefix"
KEY_ALLOWED_NAMES = "requestheader-allowed-names"
KEY_USER_CLIENT_CA = "client-ca-file"


class FrontProxyError(Exception):
    """The request does not come from a trusted front proxy (the message says why)."""


@dataclass(frozen=True)
class FrontProxyConfig:
    client_ca_pem: str
    """PEM of the requestheader CA: the proxy's client certificate must chain to it."""
    allowed_names: tuple[str, ...] = ()
    """Common names the proxy's certificate may have; empty: any it signed."""
    username_headers: tuple[str, ...] = ("X-Remote-User",)
    group_headers: tuple[str, ...] = ("X-Remote-Group",)
    extra_prefixes: tuple[str, ...] = ("X-Remote-Extra-",)

    @classmethod
    def from_configmap_data(cls, data: Mapping[str, str]) -> FrontProxyConfig:
        """From the ``data`` of ``kube-system/extension-apiserver-authentication``."""
        ca = data.get(KEY_CLIENT_CA, "")
        if "BEGIN CERTIFICATE" not in ca:
            raise FrontProxyError(f"{CONFIGMAP_NAME}: {KEY_CLIENT_CA} holds no PEM "
                                  "certificate: the API server does not proxy with a "
                                  "client certificate")
        return cls(client_ca_pem=ca,
                   allowed_names=_json_list(data, KEY_ALLOWED_NAMES, ()),
                   username_headers=_json_list(data, KEY_USERNAME_HEADERS, ("X-Remote-User",)),
                   group_headers=_json_list(data, KEY_GROUP_HEADERS, ("X-Remote-Group",)),
                   extra_prefixes=_json_list(data, KEY_EXTRA_PREFIXES, ("X-Remote-Extra-",)))


def _json_list(data: Mapping[str, str], key: str, default: tuple[str, ...]) -> tuple[str, ...]:
    text = data.get(key)
    if text is None or text == "":
        return default
    try:
        value = json.loads(text)
    except ValueError:
        raise FrontProxyError(f"{CONFIGMAP_NAME}: {key} is not a JSON list: "
                              f"{text[:80]!r}") from None
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise FrontProxyError(f"{CONFIGMAP_NAME}: {key} must be a JSON list of strings")
    return tuple(value)


@dataclass(frozen=True)
class Identity:
    username: str
    groups: tuple[str, ...] = ()
    extra: Mapping[str, tuple[str, ...]] = field(default_factory=dict)


def check_proxy_name(common_name: str | None, config: FrontProxyConfig) -> None:
    """The verified client certificate's common name must be an allowed proxy name."""
    if not common_name:
        raise FrontProxyError("no verified client certificate: requests must come through "
                              "the API server's front proxy")
    if config.allowed_names and common_name not in config.allowed_names:
        raise FrontProxyError(f"client certificate CN {common_name!r} is not one of the "
                              f"allowed front-proxy names {list(config.allowed_names)}")


def identity_from_headers(headers: Iterable[tuple[str, str]],
                          config: FrontProxyConfig) -> Identity:
    """The user named by the front-proxy headers (``headers``: every (name, value) pair,
    repeated names included). Raises FrontProxyError when no username header is set."""
    pairs = [(k.lower(), v) for k, v in headers]
    username = ""
    for wanted in config.username_headers:
        values = [v for k, v in pairs if k == wanted.lower() and v]
        if values:
            username = values[0]
            break
    if not username:
        raise FrontProxyError(f"none of the username headers {list(config.username_headers)} "
                              "is set")
    group_names = {h.lower() for h in config.group_headers}
    groups = tuple(v for k, v in pairs if k in group_names)
    extra: dict[str, list[str]] = {}
    for prefix in (p.lower() for p in config.extra_prefixes):
        for k, v in pairs:
            if k.startswith(prefix) and len(k) > len(prefix):
                key = urllib.parse.unquote(k[len(prefix):]).lower()
                extra.setdefault(key, []).append(v)
    return Identity(username=username, groups=groups,
                    extra={k: tuple(v) for k, v in extra.items()})


def server_ssl_context(config: FrontProxyConfig, *, cert_file: str,
                       key_file: str) -> ssl.SSLContext:
    """A serving context that asks for (but does not require) a client certificate and
    verifies one that is sent against the requestheader CA only."""
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.load_cert_chain(cert_file, key_file)
    ctx.verify_mode = ssl.CERT_OPTIONAL
    ctx.load_verify_locations(cadata=config.client_ca_pem)
    return ctx


def common_name_of(peercert: Mapping[str, Any] | None) -> str | None:
    """The CN of a certificate as ``SSLSocket.getpeercert()`` returns it (only verified
    certificates are returned there; an unverified one gives an empty dict)."""
    for rdn in (peercert or {}).get("subject", ()):
        for key, value in rdn:
            if key == "commonName":
                return str(value)
    return None


def authenticate_aiohttp(request: Any, config: FrontProxyConfig) -> Identity:
    """The identity of an aiohttp ``web.Request`` served with :func:`server_ssl_context`.
    Raises FrontProxyError (answer 401) for anything not sent by the front proxy."""
    transport = request.transport
    peercert = transport.get_extra_info("peercert") if transport is not None else None
    check_proxy_name(common_name_of(peercert), config)
    return identity_from_headers(request.headers.items(), config)
