"""The kubelet's service-account token files: bound to the pod, with the projected
volume's audience and lifetime, and replaced in place at 80% of their lifetime. Tokens
are minted by a real API server."""

from __future__ import annotations

import base64
import json
import os
import time

import pytest
from kubernetes import client as k8s

from localcluster.kubelet import podvolumes
from localcluster.kubelet.env import ConfigError

from ..apiserver.server_fixtures import api, namespace, shared_server  # noqa: F401


def _claims(token: str) -> dict:
    payload = token.split(".")[1]
    return json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))


def _read(path: str) -> str:
    with open(path) as fh:
        return fh.read()


def _pod(ns: str, sa: str = "default") -> dict:
    return {"metadata": {"name": "p", "namespace": ns}, "spec": {
        "serviceAccountName": sa, "containers": [{"name": "c", "image": "i"}],
        "volumes": [{"name": "vault-token", "projected": {"sources": [{
            "serviceAccountToken": {"audience": "vault", "expirationSeconds": 600,
                                    "path": "vault"}}]}}]}}


def _context(server, tmp_path, ns, pod_uid, sa="default"):
    def mint(*, audience=None, expiration_seconds):
        return server.token_for_service_account(
            ns, sa, pod_name="p", pod_uid=pod_uid,
            audiences=(audience,) if audience else (), expiration_seconds=expiration_seconds)

    return podvolumes.PodContext(
        pod_dir=str(tmp_path), pod_ip="127.1.0.2", host_ip="127.0.0.1", configmaps={},
        secrets={}, claims={}, volumes={}, token=mint, ca_pem="CA", node_cpu_millis=1000,
        node_memory=1 << 30)


def test_tokens_are_bound_and_rotated_at_80_percent(shared_server, api, namespace,  # noqa: F811
                                                    tmp_path):
    pod = k8s.CoreV1Api(api).create_namespaced_pod(namespace, _pod(namespace))
    ctx = _context(shared_server, tmp_path, namespace, pod.metadata.uid)
    volumes = podvolumes.prepare(_pod(namespace), ctx)
    vault_file = os.path.join(volumes["vault-token"].host, "vault")
    sa_file = os.path.join(volumes[podvolumes.SA_VOLUME].host, "token")
    vault = _read(vault_file)
    claims = _claims(vault)
    assert claims["aud"] == ["vault"] and claims["exp"] - claims["iat"] == 600
    assert claims["kubernetes.io"]["pod"] == {"name": "p", "uid": pod.metadata.uid}
    sa_claims = _claims(_read(sa_file))
    assert sa_claims["exp"] - sa_claims["iat"] == podvolumes.SA_TOKEN_SECONDS
    start = time.time()
    assert podvolumes.rotate_tokens(ctx.tokens, ctx.token, now=start) == 0
    assert _read(vault_file) == vault
    # Past 80% of the 600 s token, before 80% of the 3607 s one: only the first changes.
    assert podvolumes.rotate_tokens(ctx.tokens, ctx.token, now=start + 0.81 * 600) == 1
    rotated = _read(vault_file)
    assert rotated != vault and _claims(rotated)["aud"] == ["vault"]
    assert _claims(rotated)["kubernetes.io"]["pod"]["uid"] == pod.metadata.uid
    # The mode stays what the volume asked for (defaultMode, 0644 when unset).
    assert oct(os.stat(vault_file).st_mode & 0o777) == oct(podvolumes.DEFAULT_MODE)
    assert podvolumes.rotate_tokens(ctx.tokens, ctx.token, now=start + 0.81 * 600) == 0
    later = start + 0.81 * podvolumes.SA_TOKEN_SECONDS
    assert podvolumes.rotate_tokens(ctx.tokens, ctx.token, now=later) == 2
    assert not [f for f in os.listdir(volumes["vault-token"].host) if f.endswith(".rotating")]


def test_refresh_time_is_80_percent_capped_at_a_day():
    assert podvolumes.refresh_time(issued=100.0, expiration_seconds=1000) == 900.0
    assert podvolumes.refresh_time(issued=0.0, expiration_seconds=10 ** 7) == 24 * 3600


def test_a_missing_service_account_is_a_config_error(shared_server, namespace, tmp_path):  # noqa: F811
    ctx = _context(shared_server, tmp_path, namespace, "uid", sa="nobody")
    with pytest.raises(ConfigError, match="nobody"):
        podvolumes.prepare(_pod(namespace, sa="nobody"), ctx)
