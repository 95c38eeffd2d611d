"""Table tests of the upload's pure parts: token claims, the proxy's routing, the token
request answer, the DataVolume's upload phases and events, the target's rendering."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import jwt
import pytest

from cdi import uploadapi, uploadproxy, uploadtoken
from cdi.render import render
from cdi.status import events_for, observe
from tests.cdi.builders import claim, dv, sc

P = "cdi.kubevirt.io/"
KEY, PUBLIC = uploadtoken.make_key()


# -- tokens -------------------------------------------------------------------------------

def now() -> int:
    """The time a token is made at: when the test runs, not when the module was imported
    (verify() reads the clock, and a module may run minutes after the collection)."""
    return int(time.time())


def test_a_token_names_the_claim_and_expires() -> None:
    issued = now()
    token = uploadtoken.issue(key_pem=KEY, namespace="ns", name="disk", now=issued)
    claims = uploadtoken.verify(token=token, public_pem=PUBLIC)
    assert (claims.namespace, claims.name, claims.operation) == ("ns", "disk", "Upload")
    assert claims.expires == issued + uploadtoken.TTL


def _forge(**payload: Any) -> str:
    base = {"iss": "cdi-apiserver", "iat": now(), "exp": now() + 300, "operation": "Upload",
            "namespace": "ns", "name": "disk", "resource": uploadtoken.RESOURCE}
    base.update(payload)
    return jwt.encode({k: v for k, v in base.items() if v is not None}, KEY, algorithm="ES256")


@pytest.mark.parametrize(("token", "why"), [
    (lambda: uploadtoken.issue(key_pem=uploadtoken.make_key()[0], namespace="ns",
                               name="disk", now=now()), "not valid"),
    (lambda: uploadtoken.issue(key_pem=KEY, namespace="ns", name="disk", now=now() - 3600),
     "expired"),
    (lambda: _forge(operation="Clone"), "not an upload token"),
    (lambda: _forge(resource={"group": "", "version": "v1", "resource": "secrets"}),
     "not an upload token"),
    (lambda: _forge(iss="someone-else"), "not valid"),
    (lambda: _forge(name=""), "names no claim"),
    (lambda: _forge(exp=None), "not valid"),
    (lambda: jwt.encode({"iss": "cdi-apiserver", "iat": now(), "exp": now() + 300}, "s" * 40,
                        algorithm="HS256"), "not valid"),
    (lambda: "garbage", "not valid"),
])
def test_bad_tokens_are_refused(token: Callable[[], str], why: str) -> None:
    with pytest.raises(uploadtoken.TokenError, match=why):
        uploadtoken.verify(token=token(), public_pem=PUBLIC)


# -- the token request ------------------------------------------------------------------------

def test_token_request_answers_a_token_for_the_named_claim() -> None:
    code, body = uploadapi.token_response(
        request_body={"apiVersion": "upload.cdi.kubevirt.io/v1beta1",
                      "kind": "UploadTokenRequest", "metadata": {"name": "t"},
                      "spec": {"pvcName": "disk"}}, namespace="ns", key_pem=KEY, now=now())
    assert code == 201
    assert body["kind"] == "UploadTokenRequest"
    claims = uploadtoken.verify(token=body["status"]["token"], public_pem=PUBLIC)
    assert (claims.namespace, claims.name) == ("ns", "disk")


@pytest.mark.parametrize("body", [{"spec": {}}, {"spec": {"pvcName": ""}}, [],
                                  {"kind": "Pod", "spec": {"pvcName": "x"}},
                                  {"spec": {"pvcName": "../../secrets/x"}},
                                  {"spec": {"pvcName": "Disk"}},
                                  {"spec": {"pvcName": "a" * 254}},
                                  {"spec": {"pvcName": 7}}])
def test_token_request_without_a_claim_is_refused(body: Any) -> None:
    code, out = uploadapi.token_response(request_body=body, namespace="ns", key_pem=KEY,
                                         now=now())
    assert code == 400
    assert "UploadTokenRequest" in out["message"] or out["message"].startswith("spec.pvcName")


# -- the proxy's routing ----------------------------------------------------------------------

def _target(anns: dict[str, str], *, kind: str = "VolumeUploadSource",
            phase: str = "Pending") -> dict[str, Any]:
    return {"metadata": {"name": "disk", "namespace": "ns", "annotations": anns},
            "spec": {"dataSourceRef": {"apiGroup": "cdi.kubevirt.io", "kind": kind,
                                       "name": "volume-upload-source-u"}},
            "status": {"phase": phase}}


READY = {P + "storage.populator.pvcPrime": "prime-u", P + "storage.pod.ready": "true",
         P + "storage.pod.phase": "Running"}


@pytest.mark.parametrize(("target", "service", "error", "retry"), [
    (_target(READY), "cdi-upload-prime-u", "", False),
    (None, "", "doesn't exist", False),
    (_target(READY, kind="VolumeImportSource"), "", "not an upload target", False),
    (_target({**READY, P + "storage.pod.phase": "Succeeded"}), "", "already finished", False),
    (_target(READY, phase="Bound"), "", "already finished", False),
    (_target({**READY, P + "storage.pod.phase": "Failed"}), "", "the upload failed", False),
    (_target({P + "storage.pod.ready": "true"}), "", "wasn't created yet", True),
    (_target({**READY, P + "storage.pod.ready": "false"}), "", "not ready", True),
    (_target({**READY, P + "storage.contentType": "evil"}), "", "content-type evil", False),
])
def test_proxy_routes_only_to_a_ready_upload_target(target: Any, service: str, error: str,
                                                    retry: bool) -> None:
    found = uploadproxy.route(target, name="disk")
    assert found.service == service
    assert error in found.error if error else not found.error
    assert found.retry is retry


def test_archive_uploads_go_to_the_archive_path() -> None:
    found = uploadproxy.route(_target({**READY, P + "storage.contentType": "archive"}),
                              name="disk")
    assert found.archive
    assert uploadproxy.upstream_path("/v1beta1/upload", archive=True) == \
        "/v1beta1/upload-archive"
    assert uploadproxy.upstream_path("/v1alpha1/upload-async", archive=True) == \
        "/v1alpha1/upload-archive"
    assert uploadproxy.upstream_path("/v1beta1/upload-async", archive=False) == \
        "/v1beta1/upload-async"


def test_ready_address_is_the_first_ready_endpoint() -> None:
    assert uploadproxy.ready_address(None) is None
    assert uploadproxy.ready_address({"subsets": [{"notReadyAddresses": [{"ip": "1.1.1.1"}]}]}) \
        is None
    assert uploadproxy.ready_address({"subsets": [{"addresses": [{"ip": "10.0.0.7"}]}]}) == \
        "10.0.0.7"


# -- the DataVolume ---------------------------------------------------------------------------

def _upload_claim(anns: dict[str, str], phase: str = "Pending") -> dict[str, Any]:
    c = claim(phase=phase, anns=anns)
    c["spec"]["dataSourceRef"]["kind"] = "VolumeUploadSource"
    return c


@pytest.mark.parametrize(("anns", "claim_phase", "phase"), [
    ({}, "Pending", "UploadScheduled"),
    ({P + "storage.pod.phase": "Pending"}, "Pending", "UploadScheduled"),
    ({P + "storage.pod.phase": "Running", P + "storage.pod.ready": "false"}, "Pending",
     "UploadScheduled"),
    ({P + "storage.pod.phase": "Running", P + "storage.pod.ready": "true"}, "Pending",
     "UploadReady"),
    ({P + "storage.pod.phase": "Succeeded"}, "Pending", "UploadReady"),  # being rebound
    ({P + "storage.pod.phase": "Succeeded"}, "Bound", "Succeeded"),
    ({P + "storage.pod.phase": "Failed", P + "storage.condition.running.reason": "TooSmall",
      P + "storage.condition.running.message": "too small"}, "Pending", "Failed"),
])
def test_upload_phases(anns: dict[str, str], claim_phase: str, phase: str) -> None:
    source = {"upload": {}}
    o = observe(dv=dv(source=source), claim=_upload_claim(anns, claim_phase),
                storage_class=sc())
    assert o.phase == phase


@pytest.mark.parametrize(("phase", "reason", "message"), [
    ("UploadScheduled", "UploadScheduled", "Upload into disk scheduled"),
    ("UploadReady", "UploadReady", "Upload into disk ready"),
    ("Succeeded", "UploadSucceeded", "Successfully uploaded into disk"),
])
def test_upload_events_are_upstreams(phase: str, reason: str, message: str) -> None:
    o = observe(dv=dv(source={"upload": {}}), claim=_upload_claim(
        {P + "storage.pod.phase": {"UploadScheduled": "Pending", "UploadReady": "Succeeded",
                                   "Succeeded": "Succeeded"}[phase]},
        "Bound" if phase == "Succeeded" else "Pending"), storage_class=sc())
    assert o.phase == phase
    [event] = events_for(previous="Pending", observed=o, claim_name="disk", upload=True)
    assert (event.reason, event.message) == (reason, message)


def test_failed_upload_event_carries_the_reason() -> None:
    o = observe(dv=dv(source={"upload": {}}), claim=_upload_claim(
        {P + "storage.pod.phase": "Failed", P + "storage.condition.running.reason": "TooSmall",
         P + "storage.condition.running.message": "virtual size 1 GiB"}), storage_class=sc())
    [event] = events_for(previous="UploadReady", observed=o, claim_name="disk", upload=True)
    assert event.type == "Warning"
    assert event.reason == "UploadFailed"
    assert "TooSmall: virtual size 1 GiB" in event.message


def test_upload_datavolume_renders_a_volume_upload_source() -> None:
    target = render(dv=dv(source={"upload": {}}, contentType="archive",
                          pvc={"accessModes": ["ReadWriteOnce"],
                               "resources": {"requests": {"storage": "1Gi"}}}),
                    storage_class=sc(), profile=None, config_status=None)
    assert target.claim["spec"]["dataSourceRef"] == {
        "apiGroup": "cdi.kubevirt.io", "kind": "VolumeUploadSource",
        "name": "volume-upload-source-dv-uid"}
    assert target.import_source is not None
    assert target.import_source["kind"] == "VolumeUploadSource"
    assert target.import_source["metadata"]["name"] == "volume-upload-source-dv-uid"
    assert target.import_source["spec"] == {"contentType": "archive"}
