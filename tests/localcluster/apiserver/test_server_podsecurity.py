"""PodSecurity admission on the real API server: the namespace labels' enforce, warn and
audit modes give kube-apiserver's refusals (403, word for word), ``Warning`` headers and
audit annotations (the server's audit.log); bad labels are refused; raising a
namespace's enforce level warns about the pods already there."""

from __future__ import annotations

import json
import ssl
import urllib.error
import urllib.request
import uuid
from typing import Any

import pytest

from localcluster.apiserver.audit import AuditLog
from localcluster.apiserver.errors import APIError
from localcluster.apiserver.server import APIServer
from localcluster.apiserver.threaded import ServerThread

from .server_fixtures import Raw

RESTRICTED_DEFAULT_POD = (
    'violates PodSecurity "restricted:latest": allowPrivilegeEscalation != false (container '
    '"main" must set securityContext.allowPrivilegeEscalation=false), unrestricted '
    'capabilities (container "main" must set securityContext.capabilities.drop=["ALL"]), '
    'runAsNonRoot != true (pod or container "main" must set '
    "securityContext.runAsNonRoot=true), seccompProfile (pod or container \"main\" must set "
    'securityContext.seccompProfile.type to "RuntimeDefault" or "Localhost")')
"""What kube-apiserver 1.32 answers for a plain pod in a restricted namespace."""


def request(server: APIServer, method: str, path: str,
            body: Any = None) -> tuple[int, Any, list[str]]:
    """status, body, Warning header texts."""
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(server.url + path, data=data, method=method)
    req.add_header("Authorization", f"Bearer {server.admin_token}")
    req.add_header("Content-Type", "application/merge-patch+json" if method == "PATCH"
                   else "application/json")
    ctx = ssl.create_default_context(cafile=str(server.ca_path))
    try:
        with urllib.request.urlopen(req, context=ctx, timeout=30) as resp:
            status, text, headers = resp.status, resp.read(), resp.headers
    except urllib.error.HTTPError as err:
        status, text, headers = err.code, err.read(), err.headers
    warnings = [json.loads(h.removeprefix("299 - ")) for h in headers.get_all("Warning") or []]
    return status, json.loads(text), warnings


def make_ns(raw: Raw, **labels: str) -> str:
    name = "psa-" + uuid.uuid4().hex[:8]
    full = {f"pod-security.kubernetes.io/{k.replace('_', '-')}": v for k, v in labels.items()}
    status, body = raw.request("POST", "/api/v1/namespaces",
                               {"metadata": {"name": name, "labels": full}})
    assert status == 201, body
    return name


def pod(name: str, *, pod_ctx: dict[str, Any] | None = None,
        ctx: dict[str, Any] | None = None, **spec: Any) -> dict[str, Any]:
    c: dict[str, Any] = {"name": "main", "image": "registry.example.com/rootdisk/testbox"}
    if ctx is not None:
        c["securityContext"] = ctx
    s: dict[str, Any] = {"containers": [c], **spec}
    if pod_ctx is not None:
        s["securityContext"] = pod_ctx
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": s}


RESTRICTED_OK = {"pod_ctx": {"runAsNonRoot": True, "runAsUser": 107,
                             "seccompProfile": {"type": "RuntimeDefault"}},
                 "ctx": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}}


@pytest.mark.parametrize(("labels", "p", "message"), [
    ({"enforce": "restricted"}, pod("plain"),
     f'pods "plain" is forbidden: {RESTRICTED_DEFAULT_POD}'),
    ({"enforce": "baseline"}, pod("priv", ctx={"privileged": True}),
     'pods "priv" is forbidden: violates PodSecurity "baseline:latest": privileged '
     '(container "main" must not set securityContext.privileged=true)'),
    ({"enforce": "baseline"}, pod("sysadmin", ctx={"capabilities": {"add": ["SYS_ADMIN"]}}),
     'pods "sysadmin" is forbidden: violates PodSecurity "baseline:latest": non-default '
     'capabilities (container "main" must not include "SYS_ADMIN" in '
     "securityContext.capabilities.add)"),
    ({"enforce": "baseline"},
     pod("hostly", hostNetwork=True, volumes=[{"name": "h", "hostPath": {"path": "/"}}]),
     'pods "hostly" is forbidden: violates PodSecurity "baseline:latest": host namespaces '
     '(hostNetwork=true), hostPath volumes (volume "h")'),
    ({"enforce": "restricted"},
     pod("hostpath", volumes=[{"name": "h", "hostPath": {"path": "/"}}], **RESTRICTED_OK),
     'pods "hostpath" is forbidden: violates PodSecurity "restricted:latest": restricted '
     'volume types (volume "h" uses restricted volume type "hostPath")'),
    ({"enforce": "restricted", "enforce_version": "v1.21"},
     pod("old", ctx={"capabilities": {"add": ["SYS_ADMIN"]}, "allowPrivilegeEscalation": False},
         pod_ctx={"runAsNonRoot": True}),
     'pods "old" is forbidden: violates PodSecurity "restricted:v1.21": non-default '
     'capabilities (container "main" must not include "SYS_ADMIN" in '
     'securityContext.capabilities.add), seccompProfile (pod or container "main" must set '
     'securityContext.seccompProfile.type to "RuntimeDefault" or "Localhost")'),
], ids=["restricted-plain", "baseline-privileged", "baseline-sys-admin", "baseline-host",
        "restricted-hostpath", "restricted-v1.21"])
def test_enforce_refuses_with_kube_apiservers_message(
        shared_server: APIServer, raw: Raw, labels: dict[str, str], p: dict[str, Any],
        message: str) -> None:
    ns = make_ns(raw, **labels)
    status, body, _ = request(shared_server, "POST", f"/api/v1/namespaces/{ns}/pods", p)
    assert status == 403, body
    assert body["reason"] == "Forbidden" and body["message"] == message
    assert body["details"] == {"name": p["metadata"]["name"], "kind": "pods"}


def test_enforce_admits_what_the_level_allows(shared_server: APIServer, raw: Raw) -> None:
    ns = make_ns(raw, enforce="restricted")
    status, body, warnings = request(shared_server, "POST", f"/api/v1/namespaces/{ns}/pods",
                                     pod("fine", **RESTRICTED_OK))
    assert status == 201, body
    assert warnings == []
    base = make_ns(raw, enforce="baseline")
    status, body, _ = request(shared_server, "POST", f"/api/v1/namespaces/{base}/pods",
                              pod("net-bind",
                                  ctx={"capabilities": {"add": ["NET_BIND_SERVICE"]}}))
    assert status == 201, body
    privileged = make_ns(raw)  # unlabelled: privileged
    status, body, _ = request(shared_server, "POST", f"/api/v1/namespaces/{privileged}/pods",
                              pod("anything", ctx={"privileged": True}, hostNetwork=True))
    assert status == 201, body


def test_warn_and_audit_labels(shared_server: APIServer, raw: Raw) -> None:
    ns = make_ns(raw, enforce="baseline", warn="restricted", audit="restricted",
                 audit_version="v1.30")
    status, body, warnings = request(shared_server, "POST", f"/api/v1/namespaces/{ns}/pods",
                                     pod("warned"))
    assert status == 201, body
    assert warnings == ["would violate PodSecurity \"restricted:latest\": "
                        + RESTRICTED_DEFAULT_POD.split(": ", 1)[1]]
    events = [e for e in AuditLog(shared_server.data_dir / "audit.log").read()
              if e["objectRef"].get("namespace") == ns]
    assert len(events) == 1
    ev = events[0]
    assert ev["verb"] == "create" and ev["objectRef"]["name"] == "warned"
    assert ev["objectRef"]["resource"] == "pods" and ev["level"] == "Metadata"
    assert ev["annotations"] == {
        "pod-security.kubernetes.io/enforce-policy": "baseline:latest",
        "pod-security.kubernetes.io/audit-violations":
            "would violate PodSecurity \"restricted:v1.30\": "
            + RESTRICTED_DEFAULT_POD.split(": ", 1)[1]}
    assert "responseStatus" not in ev


def test_a_refusal_is_audited_with_the_enforced_policy(shared_server: APIServer,
                                                       raw: Raw) -> None:
    ns = make_ns(raw, enforce="restricted", audit="restricted")
    status, _, warnings = request(shared_server, "POST", f"/api/v1/namespaces/{ns}/pods",
                                  pod("refused"))
    assert status == 403 and warnings == []  # no warning on a refused request
    (ev,) = [e for e in AuditLog(shared_server.data_dir / "audit.log").read()
             if e["objectRef"].get("namespace") == ns]
    assert ev["annotations"]["pod-security.kubernetes.io/enforce-policy"] == \
        "restricted:latest"
    assert ev["responseStatus"]["code"] == 403


def test_workloads_are_warned_never_refused(shared_server: APIServer, raw: Raw) -> None:
    ns = make_ns(raw, enforce="restricted")  # warn follows enforce
    template = {"metadata": {"labels": {"app": "x"}}, "spec": pod("t")["spec"]}
    deployment = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d"},
                  "spec": {"selector": {"matchLabels": {"app": "x"}}, "template": template}}
    status, body, warnings = request(shared_server, "POST",
                                     f"/apis/apps/v1/namespaces/{ns}/deployments", deployment)
    assert status == 201, body
    assert warnings == ["would violate PodSecurity \"restricted:latest\": "
                        + RESTRICTED_DEFAULT_POD.split(": ", 1)[1]]
    job = {"apiVersion": "batch/v1", "kind": "CronJob", "metadata": {"name": "cj"},
           "spec": {"schedule": "* * * * *", "jobTemplate": {"spec": {"template": {
               "spec": {**pod("t", ctx={"privileged": True})["spec"],
                        "restartPolicy": "Never"}}}}}}
    status, body, warnings = request(shared_server, "POST",
                                     f"/apis/batch/v1/namespaces/{ns}/cronjobs", job)
    assert status == 201, body
    assert len(warnings) == 1 and warnings[0].startswith(
        'would violate PodSecurity "restricted:latest": privileged (container "main" must '
        "not set securityContext.privileged=true), allowPrivilegeEscalation != false")


@pytest.mark.parametrize(("label", "value", "detail"), [
    ("enforce", "bogus", 'Invalid value: "bogus": must be one of privileged, baseline, '
                         "restricted"),
    ("warn-version", "1.30", 'Invalid value: "1.30": must be "latest" or "v1.x"'),
])
def test_bad_labels_are_refused(shared_server: APIServer, raw: Raw, label: str, value: str,
                                detail: str) -> None:
    status, body = raw.request("POST", "/api/v1/namespaces", {"metadata": {
        "name": "psa-bad", "labels": {f"pod-security.kubernetes.io/{label}": value}}})
    assert status == 422, body
    assert body["message"] == (f'Namespace "psa-bad" is invalid: metadata.labels'
                               f"[pod-security.kubernetes.io/{label}]: {detail}")
    ns = make_ns(raw)
    status, body, _ = request(shared_server, "PATCH", f"/api/v1/namespaces/{ns}", {
        "metadata": {"labels": {f"pod-security.kubernetes.io/{label}": value}}})
    assert status == 422, body


def test_raising_enforce_warns_about_existing_pods(shared_server: APIServer,
                                                   raw: Raw) -> None:
    ns = make_ns(raw)
    for name in ("b-pod", "a-pod"):
        assert raw.request("POST", f"/api/v1/namespaces/{ns}/pods", pod(name))[0] == 201
    assert raw.request("POST", f"/api/v1/namespaces/{ns}/pods",
                       pod("root", ctx={"privileged": True}))[0] == 201
    status, body, warnings = request(shared_server, "PATCH", f"/api/v1/namespaces/{ns}", {
        "metadata": {"labels": {"pod-security.kubernetes.io/enforce": "baseline"}}})
    assert status == 200, body
    assert warnings == [f'existing pods in namespace "{ns}" violate the new PodSecurity '
                        'enforce level "baseline:latest"', "root: privileged"]
    status, body, warnings = request(shared_server, "PATCH", f"/api/v1/namespaces/{ns}", {
        "metadata": {"labels": {"pod-security.kubernetes.io/enforce": "restricted"}}})
    assert status == 200, body
    assert warnings == [
        f'existing pods in namespace "{ns}" violate the new PodSecurity enforce level '
        '"restricted:latest"',
        "a-pod (and 1 other pod): allowPrivilegeEscalation != false, unrestricted "
        "capabilities, runAsNonRoot != true, seccompProfile",
        "root: privileged, allowPrivilegeEscalation != false, unrestricted capabilities, "
        "runAsNonRoot != true, seccompProfile"]
    # An update that changes no image is not checked again; one that does is.
    status, body, _ = request(shared_server, "PATCH", f"/api/v1/namespaces/{ns}/pods/a-pod",
                              {"metadata": {"labels": {"x": "y"}}})
    assert status == 200, body
    status, body, _ = request(shared_server, "PATCH", f"/api/v1/namespaces/{ns}/pods/a-pod",
                              {"spec": {"activeDeadlineSeconds": 60}})
    assert status == 200, body


def test_the_audit_log_rotates_and_is_private(tmp_path) -> None:
    log = AuditLog(tmp_path / "audit.log", max_bytes=300)
    for i in range(3):
        log.write({"n": i, "pad": "x" * 150})
    assert (tmp_path / "audit.log.1").exists()
    assert [e["n"] for e in log.read()] == [2]
    assert (tmp_path / "audit.log").stat().st_mode & 0o777 == 0o600


def test_internal_writes_collect_no_warnings(fresh_server: ServerThread) -> None:
    """A pod written by the server's own controllers (no request to answer) is checked
    like any other, and leaves no warning behind in the shared internal options."""
    from localcluster.apiserver import backend as backend_module

    server = fresh_server.server
    ns = make_ns(Raw(server), warn="restricted", enforce="baseline")
    backend = server.backend
    assert backend is not None
    rt = server.registry.get("", "v1", "pods")
    assert rt is not None
    fresh_server.call(backend.create(rt, ns, pod("internal")))
    assert backend_module._INTERNAL_WRITE.warnings == []
    with pytest.raises(APIError) as refused:
        fresh_server.call(backend.create(rt, ns, pod("root", ctx={"privileged": True})))
    assert refused.value.code == 403
