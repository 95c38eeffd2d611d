"""The upload populator's renderings (pure): the upload server pod confined as the
importer's, its Service and TLS Secret owned by PVC', upstream's names."""

from __future__ import annotations

import datetime as dt
import json
from typing import Any

import pytest

from localcluster.apiserver.admission import podsecurity_checks as psa
from populators.cdiconfig import CdiConfig
from populators.errors import SourceError
from populators.importer_pod import Settings
from populators.upload_populator import (
    SERVER_CERT_LIFETIME,
    UploadPopulator,
    certificate_due,
    pod_ready,
    render_secret,
    render_service,
    secret_due,
    with_deadline,
)

UID = "0f0f0f0f-1111-2222-3333-444444444444"
PRIME = f"prime-{UID}"


def _prime(mode: str = "Filesystem") -> dict[str, Any]:
    return {"metadata": {"name": PRIME, "namespace": "ns", "uid": "puid",
                         "annotations": {"volume.kubernetes.io/selected-node": "n1"}},
            "spec": {"storageClassName": "local", "volumeMode": mode,
                     "resources": {"requests": {"storage": "2Gi"}}}}


def _pod(mode: str = "Filesystem", content: str = "kubevirt") -> dict[str, Any]:
    return UploadPopulator().pod(
        target={"metadata": {"name": "disk", "namespace": "ns", "uid": UID}},
        prime=_prime(mode), source={"metadata": {"name": "s"},
                                    "spec": {"contentType": content}},
        config=CdiConfig(), settings=Settings(image="registry/rootdisk/importer:v1"),
        previous_restarts=0)


def test_the_upload_server_pod_is_confined_like_the_importer() -> None:
    pod = _pod()
    assert pod["metadata"]["name"] == f"cdi-upload-{PRIME}"
    assert pod["metadata"]["ownerReferences"][0]["uid"] == "puid"
    spec = pod["spec"]
    assert spec["securityContext"] == {"fsGroup": 107, "runAsNonRoot": True,
                                       "seccompProfile": {"type": "RuntimeDefault"}}
    [c] = spec["containers"]
    assert c["image"] == "registry/rootdisk/uploadserver:v1"
    sec = c["securityContext"]
    assert sec["runAsUser"] == 107 and sec["capabilities"] == {"drop": ["ALL"]}
    assert sec["allowPrivilegeEscalation"] is False
    assert c["readinessProbe"]["httpGet"] == {"path": "/healthz", "port": 8443,
                                             "scheme": "HTTPS"}
    env = {e["name"]: e.get("value") for e in c["env"]}
    assert env["IMPORTER_DESTINATION"] == "/data/disk.img"
    assert env["IMPORTER_IMAGE_SIZE"] == "2Gi"
    assert env["UPLOAD_CLIENT_NAME"] == "cdi-uploadproxy"
    assert spec["nodeName"] == "n1"
    vols = {v["name"]: v for v in spec["volumes"]}
    assert vols["cdi-data-vol"]["persistentVolumeClaim"]["claimName"] == PRIME
    assert vols["cdi-upload-tls"]["secret"]["secretName"] == f"cdi-upload-{PRIME}"
    # the claim's request, and 1 MiB for the spool's directory and the filesystem's blocks
    assert vols["cdi-scratch-vol"]["emptyDir"] == {"sizeLimit": str(2 * 2**30 + 2**20)}
    # admissible in a namespace enforcing "restricted", as upstream's (issue 24)
    assert psa.evaluate(psa.RESTRICTED, None, pod["metadata"], pod["spec"]) == []
    # the certificate reaches the pod only through the Secret
    assert "BEGIN" not in json.dumps(pod)


def test_block_volume_is_a_device() -> None:
    [c] = _pod("Block")["spec"]["containers"]
    assert c["volumeDevices"] == [{"name": "cdi-data-vol",
                                   "devicePath": "/dev/cdi-block-volume"}]
    assert {e["name"]: e.get("value") for e in c["env"]}["IMPORTER_DESTINATION"] == \
        "/dev/cdi-block-volume"


@pytest.mark.parametrize(("mode", "content", "error"), [
    ("Block", "archive", "ContentType Archive cannot have block volumeMode"),
    ("Filesystem", "tarball", "spec.contentType 'tarball'"),
])
def test_bad_sources_name_the_field(mode: str, content: str, error: str) -> None:
    with pytest.raises(SourceError, match=error):
        _pod(mode, content)


def test_service_and_secret_belong_to_prime_and_select_the_pod() -> None:
    pod = _pod()
    svc = render_service(prime=_prime())
    assert svc["metadata"]["name"] == f"cdi-upload-{PRIME}"
    assert svc["spec"]["ports"][0]["port"] == 443
    assert svc["spec"]["ports"][0]["targetPort"] == 8443
    assert all(pod["metadata"]["labels"][k] == v for k, v in svc["spec"]["selector"].items())
    secret = render_secret(prime=_prime(), cert_pem=b"C", key_pem=b"K", ca_pem=b"A")
    for obj in (svc, secret):
        assert obj["metadata"]["ownerReferences"][0]["uid"] == "puid"
    assert set(secret["data"]) == {"tls.crt", "tls.key", "ca.crt"}


def test_prime_carries_upstreams_upload_annotations() -> None:
    anns = UploadPopulator().prime_annotations({"metadata": {"name": "s"}, "spec": {}})
    assert anns == {"cdi.kubevirt.io/storage.upload.target": "",
                    "cdi.kubevirt.io/storage.contentType": "kubevirt",
                    "cdi.kubevirt.io/storage.preallocation.requested": "false"}


@pytest.mark.parametrize(("pod", "ready"), [
    (None, False),
    ({"status": {"phase": "Pending"}}, False),
    ({"status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "False"}]}},
     False),
    ({"status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}},
     True),
])
def test_pod_ready(pod: Any, ready: bool) -> None:
    assert pod_ready(pod) is ready


def test_each_server_pod_gets_upstreams_deadline_half_a_certificate_lifetime_on() -> None:
    pod = _pod()
    now = dt.datetime(2026, 12, 1, 6, 0, 0, tzinfo=dt.UTC)
    timed = with_deadline(pod, now=now)
    env = {e["name"]: e.get("value") for e in timed["spec"]["containers"][0]["env"]}
    assert env["DEADLINE"] == "2026-12-01T18:00:00Z"
    assert "DEADLINE" not in json.dumps(pod)  # the rendered pod itself is left alone
    again = with_deadline(timed, now=now + dt.timedelta(hours=1))
    assert [e["value"] for e in again["spec"]["containers"][0]["env"]
            if e["name"] == "DEADLINE"] == ["2026-12-01T19:00:00Z"]


def test_a_certificate_is_renewed_for_every_new_server_pod() -> None:
    from pki import certs
    now = dt.datetime(2026, 12, 1, 6, 0, 0, tzinfo=dt.UTC)
    ca = certs.make_ca(name="upload CA", now=now)
    fresh = certs.issue(ca=ca, common_name="cdi-upload-x", now=now,
                        validity=SERVER_CERT_LIFETIME)
    assert not certificate_due(fresh.cert_pem, now=now + dt.timedelta(minutes=1))
    # the old pod's deadline (12 h on): its certificate has 12 h left, a new pod needs 24
    assert certificate_due(fresh.cert_pem, now=now + dt.timedelta(hours=12))
    assert certificate_due(fresh.cert_pem, now=now + dt.timedelta(days=30))


def test_only_our_own_server_secret_is_replaced_and_an_unreadable_one_is() -> None:
    import base64

    from pki import certs
    now = dt.datetime(2026, 12, 1, 6, 0, 0, tzinfo=dt.UTC)
    ca = certs.make_ca(name="upload CA", now=now)
    old = certs.issue(ca=ca, common_name="cdi-upload-x", now=now - dt.timedelta(hours=12),
                      validity=SERVER_CERT_LIFETIME)
    fresh = certs.issue(ca=ca, common_name="cdi-upload-x", now=now,
                        validity=SERVER_CERT_LIFETIME)

    def secret(cert: bytes | str, *, owner: str | None = "puid") -> dict[str, Any]:
        data = cert if isinstance(cert, str) else base64.b64encode(cert).decode()
        meta: dict[str, Any] = {"name": f"cdi-upload-{PRIME}", "namespace": "ns"}
        if owner:
            meta["ownerReferences"] = [{"kind": "PersistentVolumeClaim", "uid": owner}]
        return {"metadata": meta, "data": {"tls.crt": data}}

    prime = _prime()
    assert secret_due(secret(old.cert_pem), prime=prime, now=now)
    assert not secret_due(secret(fresh.cert_pem), prime=prime, now=now)
    assert secret_due(secret(b"not a certificate"), prime=prime, now=now)
    assert secret_due(secret("%%% not base64"), prime=prime, now=now)
    # a namesake this PVC' does not own is left alone, however old
    assert not secret_due(secret(old.cert_pem, owner=None), prime=prime, now=now)
    assert not secret_due(secret(old.cert_pem, owner="someone-else"), prime=prime, now=now)
