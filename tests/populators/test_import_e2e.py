"""The import populator on localcluster: real importer pods, real volumes, real HTTP."""

from __future__ import annotations

import json
import os
import time

import pytest

from kubeclient import Client, resources
from localcluster.cluster import Cluster
from tests.fixtures.httpserver import Faults, HttpServer
from tests.fixtures.images import ImageFactory, MiB, compare
from tests.fixtures.s3server import S3Server
from tests.fixtures.tls import TlsMaterial
from tests.localcluster.clusterkit import (
    claim_volume,
    needs_root,
    phase,
    pod,
    wait_for,
    wait_phase,
    wait_reasons,
)
from tests.populators import kit

pytestmark = [needs_root, pytest.mark.slow, pytest.mark.e2e]

PHASE = "cdi.kubevirt.io/storage.pod.phase"
PROGRESS = "cdi.kubevirt.io/storage.populator.progress"
REASON = "cdi.kubevirt.io/storage.condition.running.reason"
MESSAGE = "cdi.kubevirt.io/storage.condition.running.message"


def _volume_file(kube: Client, claim: dict) -> str:
    pv = kube.get(resources.PVS, claim["spec"]["volumeName"])
    path = pv["spec"]["local"]["path"]
    return os.path.join(path, "disk.img") if pv["spec"]["volumeMode"] == "Filesystem" \
        else os.path.realpath(path)


@pytest.mark.usefixtures("operator")
def test_http_qcow2_filesystem_immediate(kube: Client, ns: str, http_server: HttpServer,
                                         images: ImageFactory) -> None:
    url = http_server.publish(images.get("qcow2").path, "disk.qcow2")
    kit.import_source(kube, ns, "src", {"http": {"url": url}})
    target = kit.target_claim(kube, ns, "disk", source="src")
    uid = target["metadata"]["uid"]
    claim = kit.wait_bound(kube, ns, "disk")
    ann = claim["metadata"]["annotations"]
    assert ann[PHASE] == "Succeeded", ann
    assert ann["cdi.kubevirt.io/storage.populator.progress"] == "100.0%"
    assert ann["cdi.kubevirt.io/storage.populator.pvcPrime"] == f"prime-{uid}"
    assert compare(images.get("raw").path, _volume_file(kube, claim))
    # The importer ran as upstream's uid 107 (restricted pod security), so the disk is
    # virt-launcher's qemu user's to open.
    st = os.stat(_volume_file(kube, claim))
    assert (st.st_uid, st.st_gid) == (107, 107), (st.st_uid, st.st_gid)
    # Nothing outlives the import: PVC' and the importer pod are removed.
    wait_for(lambda: kube.get_or_none(resources.PVCS, f"prime-{uid}", ns) is None,
             timeout=60, what="PVC' deletion")
    wait_for(lambda: kube.get_or_none(resources.PODS, f"importer-prime-{uid}", ns) is None,
             timeout=60, what="importer pod deletion")


def _gone(kube: Client, ns: str, uid: str) -> None:
    wait_for(lambda: kube.get_or_none(resources.PVCS, f"prime-{uid}", ns) is None,
             timeout=60, what="PVC' deletion")
    wait_for(lambda: kube.get_or_none(resources.PODS, f"importer-prime-{uid}", ns) is None,
             timeout=60, what="importer pod deletion")


@pytest.mark.usefixtures("operator")
def test_http_qcow2_block_immediate(kube: Client, ns: str, http_server: HttpServer,
                                    images: ImageFactory) -> None:
    url = http_server.publish(images.get("qcow2").path, "disk.qcow2")
    kit.import_source(kube, ns, "src", {"http": {"url": url}})
    target = kit.target_claim(kube, ns, "disk", source="src", mode="Block")
    uid = target["metadata"]["uid"]
    # The importer pod writes the device, not a file.
    pod = wait_for(lambda: kube.get_or_none(resources.PODS, f"importer-prime-{uid}", ns),
                   timeout=60, what="importer pod")
    container = pod["spec"]["containers"][0]
    assert container["volumeDevices"] == [{"name": "cdi-data-vol",
                                           "devicePath": "/dev/cdi-block-volume"}]
    assert "volumeMounts" not in container
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["FILESYSTEM_OVERHEAD"] == "0"
    claim = kit.wait_bound(kube, ns, "disk")
    assert claim["metadata"]["annotations"][PHASE] == "Succeeded"
    assert compare(images.get("raw").path, _volume_file(kube, claim))
    _gone(kube, ns, uid)


@pytest.mark.usefixtures("operator")
def test_wait_for_first_consumer_imports_when_a_consumer_arrives(
        kube: Client, ns: str, http_server: HttpServer, images: ImageFactory) -> None:
    url = http_server.publish(images.get("qcow2").path, "disk.qcow2")
    kit.import_source(kube, ns, "src", {"http": {"url": url}})
    target = kit.target_claim(kube, ns, "disk", source="src", sc="local")
    uid = target["metadata"]["uid"]
    # No consumer, no selected node: nothing is created (PendingPopulation).
    time.sleep(3)
    assert kube.get_or_none(resources.PVCS, f"prime-{uid}", ns) is None
    assert kube.get_or_none(resources.PODS, f"importer-prime-{uid}", ns) is None
    consumer = pod("consumer", "statfs", "/data", volumes=[claim_volume("d", "disk")],
                   mounts=[{"name": "d", "mountPath": "/data"}])
    kube.create(resources.PODS, consumer, ns)
    importer = wait_for(lambda: kube.get_or_none(resources.PODS, f"importer-prime-{uid}", ns),
                        timeout=60, what="importer pod")
    assert importer["spec"]["nodeName"] == "localcluster"
    prime = kube.get(resources.PVCS, f"prime-{uid}", ns)
    assert prime["metadata"]["annotations"]["volume.kubernetes.io/selected-node"] == \
        "localcluster"
    claim = kit.wait_bound(kube, ns, "disk")
    wait_phase(kube, resources.PODS, "consumer", "Succeeded", ns=ns, timeout=60)
    assert compare(images.get("raw").path, _volume_file(kube, claim))
    _gone(kube, ns, uid)


@pytest.mark.usefixtures("operator")
def test_wffc_with_immediate_binding_requested_needs_no_consumer(
        kube: Client, ns: str, http_server: HttpServer, images: ImageFactory) -> None:
    url = http_server.publish(images.get("raw").path, "disk.raw")
    kit.import_source(kube, ns, "src", {"http": {"url": url}})
    kit.target_claim(kube, ns, "disk", source="src", sc="local", annotations={
        "cdi.kubevirt.io/storage.bind.immediate.requested": ""})
    claim = kit.wait_bound(kube, ns, "disk")
    assert compare(images.get("raw").path, _volume_file(kube, claim))


@pytest.mark.usefixtures("operator")
def test_progress_is_reported_while_importing(kube: Client, ns: str, http_server: HttpServer,
                                              images: ImageFactory) -> None:
    http_server.publish(images.get("raw").path, "slow.raw")
    http_server.set_faults("slow.raw", Faults(rate=3 * MiB))  # 16 MiB: about 5 s
    kit.import_source(kube, ns, "src", {"http": {"url": http_server.url_for("slow.raw")}})
    kit.target_claim(kube, ns, "disk", source="src")
    seen: set[str] = set()

    def bound() -> bool:
        ann = kit.annotations(kube, ns, "disk")
        if PROGRESS in ann:
            seen.add(ann[PROGRESS])
        return phase(kube, resources.PVCS, "disk", ns) == "Bound"

    wait_for(bound, timeout=120, what="import")
    partial = [float(v.rstrip("%")) for v in seen if v != "100.0%"]
    assert any(0 < p < 100 for p in partial), seen
    assert all(len(v.split(".")[1]) == 3 for v in seen if v != "100.0%"), seen  # "NN.NN%"


@pytest.mark.usefixtures("operator")
def test_not_found_fails_at_once(kube: Client, ns: str, http_server: HttpServer) -> None:
    kit.import_source(kube, ns, "src", {"http": {"url": http_server.url_for("missing.qcow2")}})
    target = kit.target_claim(kube, ns, "disk", source="src")
    uid = target["metadata"]["uid"]
    wait_for(lambda: kit.annotations(kube, ns, "disk").get(PHASE) == "Failed", timeout=90,
             what="Failed")
    ann = kit.annotations(kube, ns, "disk")
    assert ann[REASON] == "NotFound", ann
    assert "404" in ann[MESSAGE] or "not found" in ann[MESSAGE].lower(), ann
    assert ann["cdi.kubevirt.io/storage.pod.restarts"] == "0"  # never retried
    assert ann["cdi.kubevirt.io/storage.condition.running"] == "false"
    _gone(kube, ns, uid)
    assert len(http_server.requests_for("missing.qcow2")) == 1
    wait_reasons(kube, ns, uid, "CreatedPVCPrimeSuccessfully", "NotFound")
    assert phase(kube, resources.PVCS, "disk", ns) == "Pending"


@pytest.mark.usefixtures("operator")
def test_transient_503s_heal_with_restarts(kube: Client, ns: str, http_server: HttpServer,
                                           images: ImageFactory) -> None:
    http_server.publish(images.get("raw").path, "flaky.raw")
    # The importer tries twice per run (IMPORTER_RETRY_ATTEMPTS=2): three 503s fail the
    # first run; the second run meets one more and then the image.
    http_server.set_faults("flaky.raw", Faults(status=503, status_times=3))
    kit.import_source(kube, ns, "src", {"http": {"url": http_server.url_for("flaky.raw")}})
    target = kit.target_claim(kube, ns, "disk", source="src")
    claim = kit.wait_bound(kube, ns, "disk")
    ann = claim["metadata"]["annotations"]
    assert ann[PHASE] == "Succeeded"
    assert int(ann["cdi.kubevirt.io/storage.pod.restarts"]) >= 1, ann
    assert compare(images.get("raw").path, _volume_file(kube, claim))
    _gone(kube, ns, target["metadata"]["uid"])


@pytest.mark.usefixtures("operator")
def test_retries_exhausted_fail(kube: Client, ns: str, http_server: HttpServer,
                                images: ImageFactory) -> None:
    kit.set_cdiconfig_status(kube, {"importRetryLimit": 1})
    try:
        http_server.publish(images.get("raw").path, "down.raw")
        http_server.set_faults("down.raw", Faults(status=503))
        kit.import_source(kube, ns, "src", {"http": {"url": http_server.url_for("down.raw")}})
        target = kit.target_claim(kube, ns, "disk", source="src")
        wait_for(lambda: kit.annotations(kube, ns, "disk").get(PHASE) == "Failed",
                 timeout=120, what="Failed")
    finally:
        kit.set_cdiconfig_status(kube, {})
    ann = kit.annotations(kube, ns, "disk")
    assert ann[REASON] == "TransferFailed", ann
    assert ann["cdi.kubevirt.io/storage.pod.restarts"] == "1", ann
    assert "retry limit 1" in ann[MESSAGE]
    _gone(kube, ns, target["metadata"]["uid"])
    # Two runs of two tries each: the limit stopped a third run.
    assert len(http_server.requests_for("down.raw")) == 4


@pytest.mark.usefixtures("operator")
def test_deleting_the_target_mid_import_leaves_nothing(
        kube: Client, ns: str, cluster: Cluster, http_server: HttpServer,
        images: ImageFactory) -> None:
    http_server.publish(images.get("raw").path, "slow.raw")
    # The source goes silent after 1 MiB: this import never finishes by itself, so
    # anything that ends it is the deletion.
    http_server.set_faults("slow.raw", Faults(stall_after=MiB, stall_times=None))
    kit.import_source(kube, ns, "src", {"http": {"url": http_server.url_for("slow.raw")}})
    target = kit.target_claim(kube, ns, "disk", source="src")
    uid = target["metadata"]["uid"]
    wait_for(lambda: kit.annotations(kube, ns, "disk").get(PHASE) == "Running", timeout=60,
             what="importer running")
    wait_for(lambda: http_server.requests_for("slow.raw", "HEAD") or
             http_server.requests_for("slow.raw", "GET"), timeout=60, what="the import")
    prime = kube.get(resources.PVCS, f"prime-{uid}", ns)
    volume = wait_for(lambda: kube.get(resources.PVCS, f"prime-{uid}", ns)["spec"].get(
        "volumeName"), timeout=30, what="PVC' volume")
    kube.delete(resources.PVCS, "disk", ns)
    wait_for(lambda: kube.get_or_none(resources.PVCS, "disk", ns) is None, timeout=60,
             what="target deletion")
    _gone(kube, ns, uid)
    wait_for(lambda: kube.get_or_none(resources.PVS, volume) is None, timeout=60,
             what="PV' deletion")
    assert cluster.volumes is not None
    wait_for(lambda: not cluster.volumes.exists(volume), timeout=30, what="volume removal")
    assert prime["metadata"]["ownerReferences"][0]["uid"] == uid


@pytest.mark.usefixtures("operator")
def test_https_with_ca_basic_auth_and_headers(
        kube: Client, ns: str, https_server: HttpServer, tls_material: TlsMaterial,
        images: ImageFactory) -> None:
    """The CA reaches the importer from the certConfigMap, the credentials from the Secret
    by reference only: the pod spec holds no credential, and the server saw them."""
    https_server.publish(images.get("qcow2").path, "private.qcow2")
    https_server.set_faults("private.qcow2", Faults(
        basic_auth=("alice", "s3cr3t-Pa55"), required_headers=(("X-Tenant", "blue"),)))
    kube.create(resources.SECRETS, {"apiVersion": "v1", "kind": "Secret",
                                 "metadata": {"name": "creds"}, "type": "Opaque",
                                 "stringData": {"accessKeyId": "alice",
                                                "secretKey": "s3cr3t-Pa55"}}, ns)
    ca = (tls_material.cert_dir / "ca.pem").read_text()
    kube.create(resources.CONFIGMAPS, {"apiVersion": "v1", "kind": "ConfigMap",
                                    "metadata": {"name": "ca"}, "data": {"ca.pem": ca}}, ns)
    kit.import_source(kube, ns, "src", {"http": {
        "url": https_server.url_for("private.qcow2"), "secretRef": "creds",
        "certConfigMap": "ca", "extraHeaders": ["X-Tenant: blue"]}})
    target = kit.target_claim(kube, ns, "disk", source="src")
    uid = target["metadata"]["uid"]
    pod_obj = wait_for(lambda: kube.get_or_none(resources.PODS, f"importer-prime-{uid}", ns),
                       timeout=60, what="importer pod")
    assert "s3cr3t-Pa55" not in json.dumps(pod_obj)
    claim = kit.wait_bound(kube, ns, "disk")
    assert compare(images.get("raw").path, _volume_file(kube, claim))
    authorized = [r for r in https_server.requests_for("private.qcow2")
                  if r.headers.get("Authorization") and r.headers.get("X-Tenant") == "blue"]
    assert authorized and all(r.status in (200, 206) for r in authorized)
    assert "s3cr3t-Pa55" not in json.dumps(kit.annotations(kube, ns, "disk"))
    # PVC''s and the pod's events are told on the target too.
    copied = [e for e in kit.events_for(kube, ns, uid)
              if e["message"].startswith(("[prime-", "[importer-prime-"))]
    assert copied, kit.events_for(kube, ns, uid)
    _gone(kube, ns, uid)


@pytest.mark.usefixtures("operator")
def test_wrong_password_is_unauthorized_at_once(
        kube: Client, ns: str, http_server: HttpServer, images: ImageFactory) -> None:
    http_server.publish(images.get("raw").path, "private.raw")
    http_server.set_faults("private.raw", Faults(basic_auth=("alice", "right")))
    kube.create(resources.SECRETS, {"apiVersion": "v1", "kind": "Secret",
                                 "metadata": {"name": "creds"},
                                 "stringData": {"accessKeyId": "alice",
                                                "secretKey": "wrong"}}, ns)
    kit.import_source(kube, ns, "src", {"http": {"url": http_server.url_for("private.raw"),
                                                 "secretRef": "creds"}})
    kit.target_claim(kube, ns, "disk", source="src")
    wait_for(lambda: kit.annotations(kube, ns, "disk").get(PHASE) == "Failed", timeout=90,
             what=f"Failed\n{kit.diagnosis(kube, ns)}")
    ann = kit.annotations(kube, ns, "disk")
    assert ann[REASON] == "Unauthorized", ann
    assert "wrong" not in ann[MESSAGE]


@pytest.mark.usefixtures("operator")
def test_unsupported_source_kind_fails_naming_the_field(kube: Client, ns: str) -> None:
    kit.import_source(kube, ns, "src", {"gcs": {"url": "gs://bucket/disk.img"}})
    target = kit.target_claim(kube, ns, "disk", source="src")
    wait_for(lambda: kit.annotations(kube, ns, "disk").get(PHASE) == "Failed", timeout=60,
             what="Failed")
    ann = kit.annotations(kube, ns, "disk")
    assert ann[REASON] == "InvalidSource"
    assert "spec.source.gcs" in ann[MESSAGE]
    uid = target["metadata"]["uid"]
    assert kube.get_or_none(resources.PVCS, f"prime-{uid}", ns) is None
    assert kube.get_or_none(resources.PODS, f"importer-prime-{uid}", ns) is None


@pytest.mark.usefixtures("operator")
def test_several_imports_at_once(kube: Client, ns: str, http_server: HttpServer,
                                 images: ImageFactory) -> None:
    url = http_server.publish(images.get("qcow2").path, "disk.qcow2")
    kit.import_source(kube, ns, "src", {"http": {"url": url}})
    names = [f"disk-{i}" for i in range(4)]
    for name in names:
        kit.target_claim(kube, ns, name, source="src",
                         mode="Block" if name.endswith(("1", "3")) else "Filesystem")
    for name in names:
        claim = kit.wait_bound(kube, ns, name, timeout=180)
        assert compare(images.get("raw").path, _volume_file(kube, claim)), name
    wait_for(lambda: not [p for p in kube.list(resources.PODS, ns)], timeout=60,
             what="importer pods gone")
    wait_for(lambda: not [c for c in kube.list(resources.PVCS, ns)
                          if c["metadata"]["name"].startswith("prime-")], timeout=60,
             what="PVC's gone")
    # One PVC' per target, each announced once.
    created = [e for e in kube.list(resources.EVENTS, ns)
               if e["reason"] == "CreatedPVCPrimeSuccessfully"]
    assert sorted(e["involvedObject"]["name"] for e in created) == names


@pytest.mark.usefixtures("operator")
def test_retain_after_completion_keeps_pod_and_prime(
        kube: Client, ns: str, http_server: HttpServer, images: ImageFactory) -> None:
    url = http_server.publish(images.get("raw").path, "disk.raw")
    kit.import_source(kube, ns, "src", {"http": {"url": url}})
    target = kit.target_claim(kube, ns, "disk", source="src", annotations={
        "cdi.kubevirt.io/storage.pod.retainAfterCompletion": "true"})
    uid = target["metadata"]["uid"]
    claim = kit.wait_bound(kube, ns, "disk")
    assert compare(images.get("raw").path, _volume_file(kube, claim))
    wait_phase(kube, resources.PVCS, f"prime-{uid}", "Lost", ns=ns, timeout=60)
    time.sleep(3)  # a few reconciles later, both are still there
    assert kube.get(resources.PVCS, f"prime-{uid}", ns)["status"]["phase"] == "Lost"
    done = kube.get(resources.PODS, f"importer-prime-{uid}", ns)
    assert done["status"]["phase"] == "Succeeded"
    # Deleting the target still takes them along.
    kube.delete(resources.PVCS, "disk", ns)
    _gone(kube, ns, uid)


@pytest.mark.usefixtures("operator")
def test_s3_qcow2_with_a_credentials_secret(kube: Client, ns: str, s3_server: S3Server,
                                            s3_bucket: str, images: ImageFactory) -> None:
    s3_server.put_file(s3_bucket, "images/disk.qcow2", images.get("qcow2").path)
    kube.create(resources.SECRETS, {"apiVersion": "v1", "kind": "Secret",
                                 "metadata": {"name": "s3creds"},
                                 "stringData": {"accessKeyId": s3_server.access_key,
                                                "secretKey": s3_server.secret_key}}, ns)
    kit.import_source(kube, ns, "src", {"s3": {
        "url": f"{s3_server.endpoint}/{s3_bucket}/images/disk.qcow2", "secretRef": "s3creds"}})
    target = kit.target_claim(kube, ns, "disk", source="src")
    pod_obj = wait_for(lambda: kube.get_or_none(
        resources.PODS, f"importer-prime-{target['metadata']['uid']}", ns), timeout=60,
        what="importer pod")
    assert s3_server.secret_key not in json.dumps(pod_obj)
    claim = kit.wait_bound(kube, ns, "disk")
    assert compare(images.get("raw").path, _volume_file(kube, claim))
