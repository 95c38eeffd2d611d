"""Admission webhooks, against real HTTPS webhook servers started here on 127.0.0.1."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import datetime
import ipaddress
import json
import ssl
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from aiohttp import web
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from localcluster.apiserver.admission import review
from localcluster.apiserver.admission.review import (
    AdmissionDenied,
    admit,
    denial,
    matching_webhooks,
)

# ------------------------------------------------------------------ PKI


@dataclass(frozen=True)
class Pki:
    ca_bundle: str  # base64 PEM, as in clientConfig.caBundle
    other_ca_bundle: str  # a CA that did not sign the server's certificate
    cert: Path
    key: Path


def _name(cn: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def _ca(cn: str) -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate]:
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    cert = (x509.CertificateBuilder().subject_name(_name(cn)).issuer_name(_name(cn))
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=1))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True,
                                         crl_sign=True, content_commitment=False,
                                         key_encipherment=False, data_encipherment=False,
                                         key_agreement=False, encipher_only=False,
                                         decipher_only=False), critical=True)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()),
                           critical=False)
            .sign(key, hashes.SHA256()))
    return key, cert


def _pem(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    ca_key, ca_cert = _ca("test webhook CA")
    _, other_cert = _ca("unrelated CA")
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    cert = (x509.CertificateBuilder().subject_name(_name("hook.webhooks.svc"))
            .issuer_name(ca_cert.subject).public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=1))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName([
                x509.DNSName("hook.webhooks.svc"), x509.DNSName("localhost"),
                x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(
                ca_key.public_key()), critical=False)
            .sign(ca_key, hashes.SHA256()))
    directory = tmp_path_factory.mktemp("pki")
    (directory / "tls.crt").write_bytes(_pem(cert))
    (directory / "tls.key").write_bytes(key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption()))
    return Pki(base64.b64encode(_pem(ca_cert)).decode(),
               base64.b64encode(_pem(other_cert)).decode(),
               directory / "tls.crt", directory / "tls.key")


# ------------------------------------------------------------------ the webhook server


def _b64patch(ops: list[dict[str, Any]]) -> str:
    return base64.b64encode(json.dumps(ops).encode()).decode()


@dataclass
class Hooks:
    port: int
    calls: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    release: asyncio.Event = field(default_factory=asyncio.Event)  # ends /slow at teardown
    arrived: int = 0  # /barrier answers once two requests are in flight together
    together: asyncio.Event = field(default_factory=asyncio.Event)

    def paths(self) -> list[str]:
        return [p for p, _ in self.calls]


HOOKS = web.AppKey("hooks", Hooks)


def _respond(review: dict[str, Any], **response: Any) -> web.Response:
    body = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "response": {"uid": review["request"]["uid"], **response}}
    return web.json_response(body)


async def _handle(request: web.Request) -> web.StreamResponse:
    hooks = request.app[HOOKS]
    review = await request.json()
    path = request.path
    hooks.calls.append((path, {"review": review, "query": dict(request.query)}))
    obj = review["request"].get("object") or {}
    labels = (obj.get("metadata") or {}).get("labels")
    if path == "/allow":
        return _respond(review, allowed=True)
    if path == "/warn":
        return _respond(review, allowed=True, warnings=["deprecated field spec.x"])
    if path == "/deny":
        return _respond(review, allowed=False,
                        status={"code": 403, "message": "pods named bad are not allowed"})
    if path == "/deny-422":
        return _respond(review, allowed=False, status={"code": 422, "reason": "Invalid",
                                                       "message": "spec.size too small"})
    if path == "/deny-silent":
        return _respond(review, allowed=False)
    if path == "/bad-code":
        return _respond(review, allowed=False, status={"code": "422"})
    if path == "/bad-causes":
        return _respond(review, allowed=False, status={"details": {"causes": [{"field": 1}]}})
    if path == "/big":
        return _respond(review, allowed=True, warnings=["w" * 5000])
    if path == "/bad-warnings":
        return _respond(review, allowed=True, warnings="not a list")
    if path == "/label":
        ops: list[dict[str, Any]] = []
        if labels is None:
            ops.append({"op": "add", "path": "/metadata/labels", "value": {}})
        ops.append({"op": "add", "path": "/metadata/labels/mutated", "value": "yes"})
        return _respond(review, allowed=True, patchType="JSONPatch", patch=_b64patch(ops))
    if path == "/copy-label":
        # Records what it saw: reinvocation must show it the later webhook's label.
        seen = (labels or {}).get("mutated", "none")
        ops = [{"op": "add", "path": "/metadata/annotations",
                "value": {"copy-saw": seen}}]
        return _respond(review, allowed=True, patchType="JSONPatch", patch=_b64patch(ops))
    if path == "/bad-patch":
        return _respond(review, allowed=True, patchType="JSONPatch",
                        patch=_b64patch([{"op": "test", "path": "/nope", "value": 1}]))
    if path == "/not-base64":
        return _respond(review, allowed=True, patchType="JSONPatch", patch="%%%")
    if path == "/slow":
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(hooks.release.wait(), 5)
        return _respond(review, allowed=True)
    if path == "/barrier":
        hooks.arrived += 1
        if hooks.arrived == 2:
            hooks.together.set()
        await asyncio.wait_for(hooks.together.wait(), 5)
        return _respond(review, allowed=True)
    if path == "/garbage":
        return web.Response(text="<html>oops</html>")
    if path == "/wrong-uid":
        return web.json_response({"apiVersion": "admission.k8s.io/v1",
                                  "kind": "AdmissionReview",
                                  "response": {"uid": "someone-else", "allowed": True}})
    if path == "/v1beta1":
        return web.json_response({"apiVersion": "admission.k8s.io/v1beta1",
                                  "kind": "AdmissionReview",
                                  "response": {"uid": review["request"]["uid"],
                                               "allowed": True}})
    return web.Response(status=500, text="internal failure")


@pytest_asyncio.fixture
async def hooks(pki: Pki) -> AsyncIterator[Hooks]:
    app = web.Application()
    app.router.add_post("/{tail:.*}", _handle)
    state = Hooks(0)
    app[HOOKS] = state
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(pki.cert, pki.key)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=context)
    await site.start()
    state.port = runner.addresses[0][1]
    try:
        yield state
    finally:
        state.release.set()
        await runner.cleanup()


# ------------------------------------------------------------------ helpers

POD_RULE = {"operations": ["CREATE", "UPDATE"], "apiGroups": [""], "apiVersions": ["v1"],
            "resources": ["pods"], "scope": "*"}


def _webhook(name: str, path: str, pki: Pki, hooks: Hooks, *, via: str = "service",
             rules: list[dict[str, Any]] | None = None, **extra: Any) -> dict[str, Any]:
    if via == "service":
        client: dict[str, Any] = {"service": {"namespace": "webhooks", "name": "hook",
                                              "port": 443, "path": path}}
    else:
        client = {"url": f"https://127.0.0.1:{hooks.port}{path}"}
    client["caBundle"] = extra.pop("caBundle", pki.ca_bundle)
    return {"name": name, "clientConfig": client, "rules": rules or [POD_RULE],
            "sideEffects": "None", "admissionReviewVersions": ["v1"], "timeoutSeconds": 2,
            **extra}


def _config(kind: str, name: str, *webhooks: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "admissionregistration.k8s.io/v1", "kind": kind,
            "metadata": {"name": name}, "webhooks": list(webhooks)}


def mutating(name: str, *webhooks: dict[str, Any]) -> dict[str, Any]:
    return _config("MutatingWebhookConfiguration", name, *webhooks)


def validating(name: str, *webhooks: dict[str, Any]) -> dict[str, Any]:
    return _config("ValidatingWebhookConfiguration", name, *webhooks)


def _request(operation: str = "CREATE", *, resource: str = "pods", group: str = "",
             sub: str = "", namespace: str = "team", dry_run: bool = False,
             old: dict[str, Any] | None = None) -> dict[str, Any]:
    return {
        "uid": "req-1",
        "kind": {"group": group, "version": "v1", "kind": "Pod"},
        "resource": {"group": group, "version": "v1", "resource": resource},
        "subResource": sub,
        "requestKind": {"group": group, "version": "v1", "kind": "Pod"},
        "requestResource": {"group": group, "version": "v1", "resource": resource},
        "name": "p", "namespace": namespace, "operation": operation,
        "userInfo": {"username": "system:serviceaccount:team:builder",
                     "groups": ["system:serviceaccounts"]},
        "oldObject": old, "dryRun": dry_run, "options": None,
    }


POD = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "team",
                                                        "labels": {"app": "web"}},
       "spec": {"containers": [{"name": "c", "image": "i"}]}}


def _resolver(hooks: Hooks) -> Any:
    seen: list[tuple[str, str, int]] = []

    def resolve(namespace: str, name: str, port: int) -> tuple[str, int]:
        seen.append((namespace, name, port))
        return "127.0.0.1", hooks.port

    resolve.seen = seen  # type: ignore[attr-defined]
    return resolve


# ------------------------------------------------------------------ tests


@pytest.mark.asyncio
async def test_mutating_then_validating(pki: Pki, hooks: Hooks) -> None:
    resolve = _resolver(hooks)
    warnings: list[str] = []
    out = await admit(
        mutating=[mutating("m", _webhook("label.x.io", "/label", pki, hooks))],
        validating=[validating("v", _webhook("allow.x.io", "/allow", pki, hooks, via="url"),
                               _webhook("warn.x.io", "/warn", pki, hooks))],
        request=_request(), obj=POD, resolve_service=resolve, namespace_labels={},
        warnings=warnings)
    assert out is not None and out["metadata"]["labels"] == {"app": "web", "mutated": "yes"}
    assert POD["metadata"]["labels"] == {"app": "web"}  # input untouched
    assert hooks.paths()[0] == "/label" and sorted(hooks.paths()[1:]) == ["/allow", "/warn"]
    # validators see the mutated object, in an admission.k8s.io/v1 AdmissionReview
    review = hooks.calls[1][1]["review"]
    assert review["apiVersion"] == "admission.k8s.io/v1" and review["kind"] == "AdmissionReview"
    assert review["request"]["object"]["metadata"]["labels"]["mutated"] == "yes"
    assert review["request"]["uid"] == "req-1" and review["request"]["operation"] == "CREATE"
    assert hooks.calls[0][1]["query"] == {"timeout": "2s"}
    assert resolve.seen[0] == ("webhooks", "hook", 443)
    assert warnings == ["deprecated field spec.x"]


@pytest.mark.asyncio
async def test_mutations_chain_in_configuration_name_order(pki: Pki, hooks: Hooks) -> None:
    out = await admit(
        mutating=[mutating("b-second", _webhook("copy.x.io", "/copy-label", pki, hooks)),
                  mutating("a-first", _webhook("label.x.io", "/label", pki, hooks))],
        validating=[], request=_request(), obj=POD, resolve_service=_resolver(hooks))
    assert hooks.paths() == ["/label", "/copy-label"]
    assert out is not None and out["metadata"]["annotations"] == {"copy-saw": "yes"}


@pytest.mark.asyncio
async def test_reinvocation_if_needed(pki: Pki, hooks: Hooks) -> None:
    copy_hook = _webhook("copy.x.io", "/copy-label", pki, hooks,
                         reinvocationPolicy="IfNeeded")
    out = await admit(
        mutating=[mutating("a", copy_hook), mutating("b", _webhook("label.x.io", "/label",
                                                                  pki, hooks))],
        validating=[], request=_request(), obj=POD, resolve_service=_resolver(hooks))
    assert hooks.paths() == ["/copy-label", "/label", "/copy-label"]
    assert out is not None and out["metadata"]["annotations"] == {"copy-saw": "yes"}


@pytest.mark.asyncio
async def test_no_reinvocation_by_default(pki: Pki, hooks: Hooks) -> None:
    out = await admit(
        mutating=[mutating("a", _webhook("copy.x.io", "/copy-label", pki, hooks)),
                  mutating("b", _webhook("label.x.io", "/label", pki, hooks))],
        validating=[], request=_request(), obj=POD, resolve_service=_resolver(hooks))
    assert hooks.paths() == ["/copy-label", "/label"]
    assert out is not None and out["metadata"]["annotations"] == {"copy-saw": "none"}


DENIALS = [
    ("/deny", 403, 'admission webhook "deny.x.io" denied the request: pods named bad are '
                   'not allowed', ""),
    ("/deny-422", 422, 'admission webhook "deny.x.io" denied the request: spec.size too small',
     "Invalid"),
    ("/deny-silent", 400, 'admission webhook "deny.x.io" denied the request without '
                          'explanation', ""),
]


@pytest.mark.asyncio
@pytest.mark.parametrize(("path", "code", "message", "reason"), DENIALS)
async def test_validating_denial(pki: Pki, hooks: Hooks, path: str, code: int, message: str,
                                 reason: str) -> None:
    with pytest.raises(AdmissionDenied) as err:
        await admit(mutating=[], validating=[validating("v", _webhook(
            "deny.x.io", path, pki, hooks))], request=_request(), obj=POD,
            resolve_service=_resolver(hooks))
    assert (err.value.code, err.value.message, err.value.reason) == (code, message, reason)


DENIED_BY = 'admission webhook "foo" denied the request'
# kube-apiserver's TestToStatusErr (pkg/admission/plugin/webhook/errors), case by case:
# (name, the webhook's status, message, code, status).
TO_STATUS_ERR = [
    ("nil result", None, DENIED_BY + " without explanation", 400, "Failure"),
    ("only message", {"message": "you shall not pass"}, DENIED_BY + ": you shall not pass",
     400, "Failure"),
    ("only reason", {"reason": "Forbidden"}, DENIED_BY + ": Forbidden", 400, "Failure"),
    ("message and reason", {"message": "you shall not pass", "reason": "Forbidden"},
     DENIED_BY + ": you shall not pass", 400, "Failure"),
    ("no message, no reason", {}, DENIED_BY + " without explanation", 400, "Failure"),
    ("500 status code", {"code": 500}, DENIED_BY + " without explanation", 500, "Failure"),
    ("200 status code", {"code": 200}, DENIED_BY + " without explanation", 400, "Failure"),
    ("300 status code", {"code": 300}, DENIED_BY + " without explanation", 400, "Failure"),
    ("399 status code", {"code": 399}, DENIED_BY + " without explanation", 400, "Failure"),
    ("missing status", {}, DENIED_BY + " without explanation", 400, "Failure"),
    ("success status overridden", {"status": "Success"}, DENIED_BY + " without explanation",
     400, "Failure"),
    ("failure status preserved", {"status": "Failure"}, DENIED_BY + " without explanation",
     400, "Failure"),
    ("custom status preserved", {"status": "custom"}, DENIED_BY + " without explanation", 400,
     "custom"),
]


@pytest.mark.parametrize(("label", "status", "message", "code", "outcome"), TO_STATUS_ERR,
                         ids=[c[0] for c in TO_STATUS_ERR])
def test_to_status_err(label: str, status: dict[str, Any] | None, message: str, code: int,
                       outcome: str) -> None:
    err = denial("foo", status)
    assert (err.message, err.code, err.status) == (message, code, outcome), label


def test_a_denial_keeps_the_webhooks_reason_and_details() -> None:
    causes = [{"reason": "FieldValueInvalid", "message": "bad", "field": "spec.x"}]
    err = denial("v.io", {"code": 422, "reason": "Invalid", "message": "bad",
                          "details": {"causes": causes}})
    assert (err.reason, err.details, err.code) == ("Invalid", {"causes": causes}, 422)


@pytest.mark.asyncio
async def test_validating_webhooks_run_concurrently(pki: Pki, hooks: Hooks) -> None:
    # Each /barrier call waits for the other: sequential calls would time out (1 s).
    first = _webhook("one.x.io", "/barrier", pki, hooks, timeoutSeconds=1)
    second = _webhook("two.x.io", "/barrier", pki, hooks, timeoutSeconds=1)
    out = await admit(mutating=[], validating=[validating("v", first, second)],
                      request=_request(), obj=POD, resolve_service=_resolver(hooks))
    assert out == POD and hooks.paths() == ["/barrier", "/barrier"]


@pytest.mark.asyncio
async def test_mutating_denial_stops_the_chain(pki: Pki, hooks: Hooks) -> None:
    with pytest.raises(AdmissionDenied, match="denied the request"):
        await admit(mutating=[mutating("a", _webhook("deny.x.io", "/deny", pki, hooks)),
                              mutating("b", _webhook("label.x.io", "/label", pki, hooks))],
                    validating=[validating("v", _webhook("allow.x.io", "/allow", pki, hooks))],
                    request=_request(), obj=POD, resolve_service=_resolver(hooks))
    assert hooks.paths() == ["/deny"]


FAILURES: list[tuple[str, dict[str, Any], str]] = [
    ("/status-500", {}, "HTTP 500"),
    ("/garbage", {}, "the response is not JSON"),
    ("/wrong-uid", {}, "expected response.uid='req-1'"),
    ("/v1beta1", {}, "expected admission.k8s.io/v1 AdmissionReview"),
    ("/slow", {"timeoutSeconds": 1}, "context deadline exceeded"),
    ("/allow", {"caBundle": "not-base64!"}, "invalid caBundle"),
    ("/allow", {"admissionReviewVersions": ["v1beta1"]},
     "does not accept known AdmissionReview versions"),
    ("/bad-code", {}, "the response's status.code is not an integer"),
    ("/bad-causes", {}, "the response's status.details.causes is not a list of causes"),
    ("/bad-warnings", {}, "the response's warnings are not a list of strings"),
]


@pytest.mark.asyncio
@pytest.mark.parametrize(("path", "extra", "fragment"), FAILURES)
async def test_failure_policy_fail(pki: Pki, hooks: Hooks, path: str, extra: dict[str, Any],
                                   fragment: str) -> None:
    hook = _webhook("broken.x.io", path, pki, hooks, **extra)
    with pytest.raises(AdmissionDenied) as err:
        await admit(mutating=[], validating=[validating("v", hook)], request=_request(),
                    obj=POD, resolve_service=_resolver(hooks))
    assert err.value.code == 500 and err.value.reason == "InternalError"
    assert err.value.message.startswith('Internal error occurred: failed calling webhook '
                                        '"broken.x.io": failed to call webhook: ')
    assert fragment in err.value.message


@pytest.mark.asyncio
async def test_an_answer_over_the_size_limit_is_a_failure(pki: Pki, hooks: Hooks,
                                                          monkeypatch: pytest.MonkeyPatch
                                                          ) -> None:
    monkeypatch.setattr(review, "MAX_RESPONSE_BYTES", 4096)
    hook = _webhook("big.x.io", "/big", pki, hooks)
    with pytest.raises(AdmissionDenied) as err:
        await admit(mutating=[], validating=[validating("v", hook)], request=_request(),
                    obj=POD, resolve_service=_resolver(hooks))
    assert err.value.code == 500
    assert "the response is larger than 4096 bytes" in err.value.message
    monkeypatch.setattr(review, "MAX_RESPONSE_BYTES", 8192)
    await admit(mutating=[], validating=[validating("v", hook)], request=_request(),
                obj=POD, resolve_service=_resolver(hooks))


@pytest.mark.asyncio
@pytest.mark.parametrize(("path", "extra", "fragment"), FAILURES)
async def test_failure_policy_ignore(pki: Pki, hooks: Hooks, path: str, extra: dict[str, Any],
                                     fragment: str) -> None:
    hook = _webhook("broken.x.io", path, pki, hooks, failurePolicy="Ignore", **extra)
    out = await admit(mutating=[mutating("m", hook)], validating=[validating("v", hook)],
                      request=_request(), obj=POD, resolve_service=_resolver(hooks))
    assert out == POD


@pytest.mark.asyncio
async def test_tls_is_verified(pki: Pki, hooks: Hooks) -> None:
    # Signed by another CA: refused.
    hook = _webhook("tls.x.io", "/allow", pki, hooks, caBundle=pki.other_ca_bundle)
    with pytest.raises(AdmissionDenied, match="certificate verify failed"):
        await admit(mutating=[], validating=[validating("v", hook)], request=_request(),
                    obj=POD, resolve_service=_resolver(hooks))
    # Right CA, but the service name is not in the certificate: refused too.
    hook = _webhook("tls.x.io", "/allow", pki, hooks)
    hook["clientConfig"]["service"]["name"] = "impostor"
    with pytest.raises(AdmissionDenied, match=r"impostor\.webhooks\.svc"):
        await admit(mutating=[], validating=[validating("v", hook)], request=_request(),
                    obj=POD, resolve_service=_resolver(hooks))


@pytest.mark.asyncio
async def test_unreachable_webhook(pki: Pki, hooks: Hooks) -> None:
    hook = _webhook("gone.x.io", "/allow", pki, hooks, via="url")
    hook["clientConfig"]["url"] = "https://127.0.0.1:1/allow"
    with pytest.raises(AdmissionDenied) as err:
        await admit(mutating=[], validating=[validating("v", hook)], request=_request(),
                    obj=POD, resolve_service=_resolver(hooks))
    assert err.value.code == 500 and 'Post "https://127.0.0.1:1/allow?timeout=2s"' in \
        err.value.message


@pytest.mark.asyncio
@pytest.mark.parametrize(("path", "fragment"), [
    ("/bad-patch", "the patch does not apply"),
    ("/not-base64", "the patch is not base64 JSON"),
])
async def test_bad_patches(pki: Pki, hooks: Hooks, path: str, fragment: str) -> None:
    with pytest.raises(AdmissionDenied, match=fragment):
        await admit(mutating=[mutating("m", _webhook("p.x.io", path, pki, hooks))],
                    validating=[], request=_request(), obj=POD,
                    resolve_service=_resolver(hooks))
    out = await admit(mutating=[mutating("m", _webhook("p.x.io", path, pki, hooks,
                                                       failurePolicy="Ignore"))],
                      validating=[], request=_request(), obj=POD,
                      resolve_service=_resolver(hooks))
    assert out == POD


@pytest.mark.asyncio
async def test_dry_run_and_side_effects(pki: Pki, hooks: Hooks) -> None:
    risky = _webhook("risky.x.io", "/allow", pki, hooks, sideEffects="Some")
    with pytest.raises(AdmissionDenied) as err:
        await admit(mutating=[], validating=[validating("v", risky)],
                    request=_request(dry_run=True), obj=POD, resolve_service=_resolver(hooks))
    assert err.value.code == 400 and "does not support dry run" in err.value.message
    assert hooks.calls == []
    safe = _webhook("safe.x.io", "/allow", pki, hooks, sideEffects="NoneOnDryRun")
    await admit(mutating=[], validating=[validating("v", safe)],
                request=_request(dry_run=True), obj=POD, resolve_service=_resolver(hooks))
    assert hooks.calls[0][1]["review"]["request"]["dryRun"] is True


@pytest.mark.asyncio
async def test_delete_sends_old_object(pki: Pki, hooks: Hooks) -> None:
    rule = {**POD_RULE, "operations": ["DELETE"]}
    out = await admit(mutating=[], validating=[validating("v", _webhook(
        "del.x.io", "/allow", pki, hooks, rules=[rule]))],
        request=_request("DELETE", old=POD), obj=None, resolve_service=_resolver(hooks))
    assert out is None
    sent = hooks.calls[0][1]["review"]["request"]
    assert sent["object"] is None and sent["oldObject"] == POD


@pytest.mark.asyncio
async def test_nothing_matches_makes_no_call(pki: Pki, hooks: Hooks) -> None:
    out = await admit(mutating=[], validating=[validating("v", _webhook(
        "deny.x.io", "/deny", pki, hooks))], request=_request(resource="configmaps"), obj=POD,
        resolve_service=_resolver(hooks))
    assert out == POD and hooks.calls == []


# ------------------------------------------------------------------ matching (pure)


def _hook(**spec: Any) -> dict[str, Any]:
    return {"name": "h", "clientConfig": {"url": "https://x"}, "rules": [POD_RULE], **spec}


MATCH_CASES: list[tuple[str, dict[str, Any], dict[str, Any], dict[str, str] | None, bool]] = [
    ("plain", _hook(), _request(), {}, True),
    ("operation", _hook(), _request("DELETE"), {}, False),
    ("operation *", _hook(rules=[{**POD_RULE, "operations": ["*"]}]), _request("CONNECT"),
     {}, True),
    ("group", _hook(), _request(group="apps"), {}, False),
    ("group *", _hook(rules=[{**POD_RULE, "apiGroups": ["*"]}]), _request(group="apps"), {},
     True),
    ("version", _hook(rules=[{**POD_RULE, "apiVersions": ["v2"]}]), _request(), {}, False),
    ("subresource not in 'pods'", _hook(), _request(sub="status"), {}, False),
    ("pods/status", _hook(rules=[{**POD_RULE, "resources": ["pods/status"]}]),
     _request(sub="status"), {}, True),
    ("pods/* covers subresources", _hook(rules=[{**POD_RULE, "resources": ["pods/*"]}]),
     _request(sub="log"), {}, True),
    ("pods/* not the resource", _hook(rules=[{**POD_RULE, "resources": ["pods/*"]}]),
     _request(), {}, False),
    ("* is resources only", _hook(rules=[{**POD_RULE, "resources": ["*"]}]),
     _request(sub="status"), {}, False),
    ("*/* is everything", _hook(rules=[{**POD_RULE, "resources": ["*/*"]}]),
     _request(sub="status"), {}, True),
    ("*/status", _hook(rules=[{**POD_RULE, "resources": ["*/status"]}]),
     _request(resource="pvcs", sub="status"), {}, True),
    ("scope Cluster", _hook(rules=[{**POD_RULE, "scope": "Cluster"}]), _request(), {}, False),
    ("scope Namespaced", _hook(rules=[{**POD_RULE, "scope": "Namespaced"}]), _request(), {},
     True),
    ("namespaceSelector match", _hook(namespaceSelector={"matchLabels": {"env": "prod"}}),
     _request(), {"env": "prod"}, True),
    ("namespaceSelector miss", _hook(namespaceSelector={"matchLabels": {"env": "prod"}}),
     _request(), {"env": "dev"}, False),
    ("namespaceSelector ignored when cluster-scoped",
     _hook(namespaceSelector={"matchLabels": {"env": "prod"}}), _request(namespace=""), None,
     True),
    ("namespaceSelector exclusion", _hook(namespaceSelector={"matchExpressions": [
        {"key": "skip", "operator": "DoesNotExist"}]}), _request(), {"skip": "1"}, False),
    ("objectSelector match", _hook(objectSelector={"matchLabels": {"app": "web"}}),
     _request(), {}, True),
    ("objectSelector miss", _hook(objectSelector={"matchLabels": {"app": "db"}}),
     _request(), {}, False),
    ("objectSelector matches the old object",
     _hook(objectSelector={"matchLabels": {"app": "old"}}),
     _request("UPDATE", old={"metadata": {"labels": {"app": "old"}}}), {}, True),
    ("webhook configurations are exempt",
     _hook(rules=[{**POD_RULE, "apiGroups": ["*"], "resources": ["*"]}]),
     _request(group="admissionregistration.k8s.io",
              resource="validatingwebhookconfigurations"), None, False),
]


@pytest.mark.parametrize(("label", "spec", "request_", "ns_labels", "expected"), MATCH_CASES,
                         ids=[c[0] for c in MATCH_CASES])
def test_matching(label: str, spec: dict[str, Any], request_: dict[str, Any],
                  ns_labels: dict[str, str] | None, expected: bool) -> None:
    found = matching_webhooks([validating("v", spec)], request_, obj=POD,
                              namespace_labels=ns_labels)
    assert bool(found) is expected


def test_namespace_objects_use_their_own_labels() -> None:
    spec = _hook(rules=[{**POD_RULE, "resources": ["namespaces"], "scope": "Cluster"}],
                 namespaceSelector={"matchLabels": {"team": "a"}})
    ns = {"metadata": {"name": "a", "labels": {"team": "a"}}}
    request = _request(resource="namespaces", namespace="a")
    assert matching_webhooks([validating("v", spec)], request, obj=ns, namespace_labels=None)
    other = {"metadata": {"name": "b", "labels": {"team": "b"}}}
    assert not matching_webhooks([validating("v", spec)], request, obj=other,
                                 namespace_labels=None)
