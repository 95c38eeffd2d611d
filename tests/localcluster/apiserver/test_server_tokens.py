"""Service-account tokens are signed JWTs: every forgery is refused (tampered, re-signed,
``alg: none``, HMAC over the public key, expired, not yet valid, wrong issuer, wrong
audience, bound to a deleted pod or account), while the genuine token next to it works.
Also TokenRequest, TokenReview, OIDC discovery, SelfSubjectRulesReview and anonymous
access to the public endpoints."""

from __future__ import annotations

import base64
import json
import os
import stat
import subprocess
import time
import uuid

import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from kubernetes import client as k8s

from .server_fixtures import Raw

KUBECTL = "/usr/bin/kubectl"


def _whoami(server, token):
    """(HTTP code, username) of a SelfSubjectReview made with ``token``."""
    code, body = Raw(server, token=token).request(
        "POST", "/apis/authentication.k8s.io/v1/selfsubjectreviews",
        {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"})
    status = body.get("status") if isinstance(body, dict) else None
    return code, status.get("userInfo", {}).get("username") \
        if isinstance(status, dict) else None


def _sa(api, namespace, name="robot"):
    return k8s.CoreV1Api(api).create_namespaced_service_account(
        namespace, {"metadata": {"name": name}})


def _token(api, namespace, name="robot", **spec):
    return k8s.CoreV1Api(api).create_namespaced_service_account_token(
        name, namespace, {"spec": spec}).status.token


def _segments(token):
    head, payload, sig = token.split(".")
    pad = lambda s: s + "=" * (-len(s) % 4)  # noqa: E731
    return (json.loads(base64.urlsafe_b64decode(pad(head))),
            json.loads(base64.urlsafe_b64decode(pad(payload))), sig)


def _b64(obj):
    return base64.urlsafe_b64encode(json.dumps(obj).encode()).rstrip(b"=").decode()


def _signing_key(server):
    return serialization.load_pem_private_key(
        (server.data_dir / "pki" / "sa.key").read_bytes(), password=None)


def test_a_token_is_a_signed_jwt_with_binding_claims(shared_server, api, namespace):
    sa = _sa(api, namespace)
    token = _token(api, namespace, expirationSeconds=1200)
    header, claims, _ = _segments(token)
    assert header["alg"] == "ES256" and header["kid"]
    assert claims["iss"] == "https://kubernetes.default.svc.cluster.local"
    assert claims["aud"] == ["https://kubernetes.default.svc.cluster.local"]
    assert claims["exp"] - claims["iat"] == 1200 and claims["nbf"] == claims["iat"]
    assert claims["sub"] == f"system:serviceaccount:{namespace}:robot"
    assert claims["kubernetes.io"] == {"namespace": namespace, "serviceaccount": {
        "name": "robot", "uid": sa.metadata.uid}}
    assert _whoami(shared_server, token) == (201, f"system:serviceaccount:{namespace}:robot")
    key = shared_server.data_dir / "pki" / "sa.key"
    assert stat.S_IMODE(os.stat(key).st_mode) == 0o600


def test_forged_tokens_are_refused(shared_server, api, namespace):
    _sa(api, namespace)
    token = _token(api, namespace)
    assert _whoami(shared_server, token)[0] == 201  # the genuine one works
    header, claims, sig = _segments(token)
    head = token.split(".")[0]
    forged = {}
    # The payload changed (another account), the signature kept.
    other = dict(claims, sub="system:serviceaccount:kube-system:default")
    other["kubernetes.io"] = dict(claims["kubernetes.io"], namespace="kube-system")
    forged["tampered"] = f"{head}.{_b64(other)}.{sig}"
    # Same claims, signed by a key of the attacker's (with the server's kid).
    attacker = ec.generate_private_key(ec.SECP256R1())
    forged["re-signed"] = jwt.encode(claims, attacker, algorithm="ES256", headers=header)
    forged["alg none"] = f"{_b64({'alg': 'none', 'typ': 'JWT'})}.{_b64(claims)}."
    # HS256 keyed with the published public key (algorithm confusion).
    public_pem = _signing_key(shared_server).public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    forged["hmac with the public key"] = ".".join([
        _b64({"alg": "HS256", "typ": "JWT"}), _b64(claims),
        base64.urlsafe_b64encode(__import__("hmac").new(
            public_pem, f"{_b64({'alg': 'HS256', 'typ': 'JWT'})}.{_b64(claims)}".encode(),
            "sha256").digest()).rstrip(b"=").decode()])
    # Signed with the real key, but wrong in time or issuer.
    key = _signing_key(shared_server)
    now = int(time.time())
    forged["expired"] = jwt.encode(dict(claims, iat=now - 7200, nbf=now - 7200,
                                        exp=now - 3600), key, algorithm="ES256",
                                   headers=header)
    forged["not yet valid"] = jwt.encode(dict(claims, iat=now + 3600, nbf=now + 3600,
                                              exp=now + 7200), key, algorithm="ES256",
                                         headers=header)
    forged["wrong issuer"] = jwt.encode(dict(claims, iss="https://evil.example"), key,
                                        algorithm="ES256", headers=header)
    forged["no binding claim"] = jwt.encode(
        {k: v for k, v in claims.items() if k != "kubernetes.io"}, key, algorithm="ES256",
        headers=header)
    for what, bad in forged.items():
        code, _ = _whoami(shared_server, bad)
        assert code == 401, f"{what} token accepted"
    # The same token signed with the real key passes (the forgery was the only fault).
    assert _whoami(shared_server, jwt.encode(claims, key, algorithm="ES256",
                                             headers=header))[0] == 201


def test_audiences_and_expiration_of_token_requests(shared_server, api, namespace):
    _sa(api, namespace)
    other = _token(api, namespace, audiences=["vault"], expirationSeconds=600)
    _, claims, _ = _segments(other)
    assert claims["aud"] == ["vault"] and claims["exp"] - claims["iat"] == 600
    assert _whoami(shared_server, other)[0] == 401  # not for the API server
    auth = k8s.AuthenticationV1Api(k8s.ApiClient(api.configuration))
    review = auth.create_token_review({"spec": {"token": other, "audiences": ["vault"]}})
    assert review.status.authenticated is True and review.status.audiences == ["vault"]
    assert review.status.user.username == f"system:serviceaccount:{namespace}:robot"
    review = auth.create_token_review({"spec": {"token": other}})
    assert review.status.authenticated is False and "audiences" in review.status.error
    for bad in ({"expirationSeconds": 60}, {"expirationSeconds": 2 ** 33},
                {"audiences": [""]}, {"boundObjectRef": {"kind": "Node", "name": "n"}}):
        with pytest.raises(k8s.ApiException) as err:
            _token(api, namespace, **bad)
        assert err.value.status == 422, bad
        field = "spec." + next(iter(bad))
        assert field in json.loads(err.value.body)["message"]


def test_pod_bound_token_ends_with_the_pod(shared_server, api, namespace):
    core = k8s.CoreV1Api(api)
    _sa(api, namespace)
    pod = core.create_namespaced_pod(namespace, {"metadata": {"name": "p"}, "spec": {
        "serviceAccountName": "robot", "containers": [{"name": "c", "image": "i"}]}})
    with pytest.raises(k8s.ApiException) as err:
        _token(api, namespace, boundObjectRef={"kind": "Pod", "apiVersion": "v1",
                                               "name": "p", "uid": str(uuid.uuid4())})
    assert err.value.status == 409
    token = _token(api, namespace, boundObjectRef={"kind": "Pod", "apiVersion": "v1",
                                                   "name": "p", "uid": pod.metadata.uid})
    _, claims, _ = _segments(token)
    assert claims["kubernetes.io"]["pod"] == {"name": "p", "uid": pod.metadata.uid}
    assert _whoami(shared_server, token)[0] == 201
    review = k8s.AuthenticationV1Api(api).create_token_review({"spec": {"token": token}})
    assert review.status.user.extra["authentication.kubernetes.io/pod-uid"] == [
        pod.metadata.uid]
    core.delete_namespaced_pod("p", namespace, grace_period_seconds=0)
    assert _whoami(shared_server, token)[0] == 401
    # A new pod with the same name is another pod: the token stays dead.
    core.create_namespaced_pod(namespace, {"metadata": {"name": "p"}, "spec": {
        "serviceAccountName": "robot", "containers": [{"name": "c", "image": "i"}]}})
    assert _whoami(shared_server, token)[0] == 401


def test_tokens_of_a_deleted_service_account_are_refused(shared_server, api, namespace):
    core = k8s.CoreV1Api(api)
    _sa(api, namespace)
    token = shared_server.token_for_service_account(namespace, "robot")
    assert _whoami(shared_server, token)[0] == 201
    core.delete_namespaced_service_account("robot", namespace)
    assert _whoami(shared_server, token)[0] == 401
    _sa(api, namespace)  # same name, new uid
    assert _whoami(shared_server, token)[0] == 401
    assert _whoami(shared_server, shared_server.token_for_service_account(
        namespace, "robot"))[0] == 201


def test_oidc_discovery_verifies_tokens_elsewhere(shared_server, api, namespace):
    _sa(api, namespace)
    token = _token(api, namespace)
    raw = Raw(shared_server, token=token)  # service accounts may read it, as upstream
    code, config = raw.request("GET", "/.well-known/openid-configuration")
    assert code == 200 and config["issuer"] == "https://kubernetes.default.svc.cluster.local"
    assert config["jwks_uri"].endswith("/openid/v1/jwks")
    code, jwks = raw.request("GET", "/openid/v1/jwks")
    assert code == 200
    keys = jwt.PyJWKSet.from_dict(jwks)
    header, _, _ = _segments(token)
    claims = jwt.decode(token, keys[header["kid"]].key, algorithms=["ES256"],
                        audience=config["issuer"], issuer=config["issuer"])
    assert claims["sub"] == f"system:serviceaccount:{namespace}:robot"
    assert Raw(shared_server, token="").request("GET", "/openid/v1/jwks")[0] == 401


def test_public_info_is_readable_anonymously(shared_server):
    anonymous = Raw(shared_server, token="")
    code, version = anonymous.request("GET", "/version")
    assert code == 200 and version["major"] == "1"
    for path in ("/healthz", "/livez", "/readyz"):
        assert anonymous.request("GET", path) == (200, "ok")
    for path in ("/api", "/apis", "/api/v1/namespaces", "/openapi/v2"):
        assert anonymous.request("GET", path)[0] == 401, path
    assert Raw(shared_server, token="bogus").request("GET", "/version")[0] == 401


def test_auth_can_i_list(shared_server, api, namespace, tmp_path):
    _sa(api, namespace)
    rbac = k8s.RbacAuthorizationV1Api(api)
    rbac.create_namespaced_role(namespace, {"metadata": {"name": "cm"}, "rules": [{
        "apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list"]}]})
    rbac.create_namespaced_role_binding(namespace, {
        "metadata": {"name": "cm"}, "roleRef": {"apiGroup": "rbac.authorization.k8s.io",
                                                "kind": "Role", "name": "cm"},
        "subjects": [{"kind": "ServiceAccount", "name": "robot", "namespace": namespace}]})
    token = _token(api, namespace)
    out = subprocess.run(
        [KUBECTL, "--kubeconfig", str(shared_server.kubeconfig_path), "--token", token,
         "auth", "can-i", "--list", "-n", namespace],
        capture_output=True, text=True, timeout=60, check=True).stdout
    rows = [line.split() for line in out.splitlines()]
    assert ["configmaps", "[]", "[]", "[get", "list]"] in rows
    assert any(r[0] == "selfsubjectaccessreviews.authorization.k8s.io" for r in rows)
    assert ["[/version]", "[]", "[get]"] in [r[:3] for r in rows]
    assert not any(r[0] == "secrets" for r in rows)
    other = subprocess.run(
        [KUBECTL, "--kubeconfig", str(shared_server.kubeconfig_path), "--token", token,
         "auth", "can-i", "--list", "-n", "default"],
        capture_output=True, text=True, timeout=60, check=True).stdout
    assert "configmaps" not in other
