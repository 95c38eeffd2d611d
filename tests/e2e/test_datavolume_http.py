"""DataVolumes from HTTP on `rootdisk up`: the operator pod, the populator, the importer pod."""

from __future__ import annotations

import os
import subprocess
import sys
import threading

import pytest
import yaml

from kubeclient import Client, KubeError, resources
from localcluster.cluster import Cluster
from tests.e2e import kit
from tests.fixtures.httpserver import Faults, HttpServer
from tests.fixtures.images import ImageFactory, build_patterned_raw, compare, convert
from tests.fixtures.podmemory import PodMemory
from tests.localcluster.clusterkit import needs_root, wait_for

pytestmark = [needs_root, pytest.mark.slow, pytest.mark.e2e]

MiB = 2**20


def wait_cli(cluster: Cluster, ns: str, name: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "rootdisk", "wait", "dv", name, "-n", ns,
         "--kubeconfig", cluster.kubeconfig, "--timeout", "240"],
        capture_output=True, text=True, timeout=300, check=False,
        env={**os.environ, "KUBECONFIG": "/nonexistent"})


def test_http_qcow2_filesystem_succeeds_with_content(kube: Client, ns: str,
                                                      http_server: HttpServer,
                                                      images: ImageFactory) -> None:
    url = http_server.publish(images.get("qcow2").path, "disk.qcow2")
    dv = kube.create(kit.DVS, kit.datavolume(
        "disk", {"http": {"url": url}},
        storage={"storageClassName": "local-immediate"}), ns)
    status = kit.wait_dv(kube, ns, "disk", ("Succeeded", "Failed"))
    assert status["phase"] == "Succeeded", str(status["conditions"])
    assert status["progress"] == "100.0%" and status["claimName"] == "disk"
    assert kit.condition(status, "Ready")["status"] == "True"
    assert kit.condition(status, "Bound")["reason"] == "Bound"
    claim = kube.get(resources.PVCS, "disk", ns)
    # sized for the class's measured overhead (0.03) on top of the 64 MiB asked for
    assert claim["spec"]["resources"]["requests"]["storage"] == str(-(-64 * MiB * 103 // 100))
    assert claim["metadata"]["ownerReferences"][0]["uid"] == dv["metadata"]["uid"]
    assert compare(images.get("raw").path, kit.volume_path(kube, claim))
    uid = dv["metadata"]["uid"]
    wait_for(lambda: "ImportSucceeded" in [e["reason"] for e in kit.events_for(kube, ns, uid)],
             timeout=30, what="ImportSucceeded event")
    reasons = [e["reason"] for e in kit.events_for(kube, ns, uid)]
    assert reasons.count("ImportSucceeded") == 1 and "ImportScheduled" in reasons
    # the Events of PVC' and the importer pod, copied onto the target claim (the
    # operator's RBAC lets it list them)
    copied = [e for e in kit.events_for(kube, ns, claim["metadata"]["uid"])
              if e["message"].startswith(("[prime-", "[importer-prime-"))]
    assert {"ProvisioningSucceeded", "Started"} <= {e["reason"] for e in copied}, copied
    # the VolumeImportSource, PVC' and the importer pod are gone once it succeeded
    wait_for(lambda: kit.leftovers(kube, ns) == ["persistentvolumeclaims/disk"], timeout=60,
             what="only the target claim left")


IMPORTER_TREE_PEAK = 100 * MiB
"""The importer's promise for a qcow2 import: its process tree's peak RSS (README)."""


def importer_pod_uid(kube: Client, ns: str) -> str | None:
    pods = kube.list(resources.PODS, ns, labelSelector="app=containerized-data-importer")
    return pods[0]["metadata"]["uid"] if pods else None


def test_importer_pod_memory_stays_bounded(kube: Client, ns: str, http_server: HttpServer,
                                           tmp_path) -> None:
    """The importer pod's whole process tree (sandbox, importer, nbdkit, qemu-img) stays
    within the importer's 100 MiB for a qcow2 of 128 MiB of data: sampled on the host
    while the pod runs, as the pod's memory would be counted (page cache excluded)."""
    raw, qcow2 = tmp_path / "big.raw", tmp_path / "big.qcow2"
    build_patterned_raw(raw, size=256 * MiB, data_ratio=0.5)
    convert(raw, "raw", qcow2, ["-O", "qcow2"])
    url = http_server.publish(qcow2, "big.qcow2")
    with PodMemory(lambda: importer_pod_uid(kube, ns)) as memory:
        kube.create(kit.DVS, kit.datavolume(
            "big", {"http": {"url": url}}, size="256Mi",
            storage={"storageClassName": "local-immediate"}), ns)
        status = kit.wait_dv(kube, ns, "big", ("Succeeded", "Failed"), timeout=300)
    assert status["phase"] == "Succeeded", str(status["conditions"])
    claim = kube.get(resources.PVCS, "big", ns)
    assert compare(raw, kit.volume_path(kube, claim))
    report = memory.report()
    # it measured the importer pod itself: its program and the converter it drives
    assert memory.samples >= 3 and "qemu-img" in memory.names, report
    assert any(name.startswith("python") for name in memory.names), report
    assert memory.peak_rss <= IMPORTER_TREE_PEAK, report
    # and no spike between two samples: the high-water marks of the processes alive
    # together, summed as if all had peaked at once
    assert memory.peak_hwm <= IMPORTER_TREE_PEAK, report
    print(report)


def test_progress_moves_and_wait_dv_follows(cluster: Cluster, kube: Client, ns: str,
                                            http_server: HttpServer,
                                            images: ImageFactory) -> None:
    """A paced raw image: progress between 0 and 100 is seen, `rootdisk wait dv` exits 0."""
    url = http_server.publish(images.get("raw").path, "slow.img")
    http_server.set_faults("slow.img", Faults(rate=2 * MiB))
    kube.create(kit.DVS, kit.datavolume("slow", {"http": {"url": url}},
                                        storage={"storageClassName": "local-immediate"}), ns)
    seen: set[str] = set()
    stop = threading.Event()

    def watch() -> None:
        while not stop.wait(0.3):
            seen.add(str(kit.dv_status(kube, ns, "slow").get("progress")))

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        done = wait_cli(cluster, ns, "slow")
    finally:
        stop.set()
        watcher.join(timeout=10)
    assert done.returncode == 0, done.stderr
    assert f"DataVolume {ns}/slow Succeeded" in done.stdout
    middle = [p for p in seen if p.endswith("%") and 0 < float(p[:-1]) < 100]
    assert middle, seen
    claim = kube.get(resources.PVCS, "slow", ns)
    assert compare(images.get("raw").path, kit.volume_path(kube, claim))


def test_not_found_fails_with_reason(cluster: Cluster, kube: Client, ns: str,
                                     http_server: HttpServer) -> None:
    kube.create(kit.DVS, kit.datavolume("missing", {"http": {"url": http_server.url_for(
        "no-such-image.qcow2")}}, storage={"storageClassName": "local-immediate"}), ns)
    status = kit.wait_dv(kube, ns, "missing", ("Succeeded", "Failed"))
    assert status["phase"] == "Failed"
    running = kit.condition(status, "Running")
    assert running["status"] == "False" and running["reason"] == "NotFound", running
    assert kit.condition(status, "Ready")["reason"] == "NotFound"
    done = wait_cli(cluster, ns, "missing")
    assert done.returncode == 1 and "Failed: NotFound" in done.stderr, done.stderr


def test_raw_xz_spec_pvc_waits_for_first_consumer(kube: Client, ns: str, http_server: HttpServer,
                                                   images: ImageFactory) -> None:
    url = http_server.publish(images.get("raw.xz").path, "disk.img.xz")
    pvc = {"storageClassName": "local", "accessModes": ["ReadWriteOnce"],
           "volumeMode": "Filesystem", "resources": {"requests": {"storage": "64Mi"}}}
    kube.create(kit.DVS, kit.datavolume("wffc", {"http": {"url": url}}, pvc=pvc), ns)
    kit.wait_dv(kube, ns, "wffc", ("PendingPopulation",), timeout=60)
    assert not http_server.requests_for("disk.img.xz")  # nothing fetched before a consumer
    kube.create(resources.PODS, kit.consumer_pod("consumer", "wffc"), ns)
    status = kit.wait_dv(kube, ns, "wffc", ("Succeeded", "Failed"))
    assert status["phase"] == "Succeeded", str(status["conditions"])
    claim = kube.get(resources.PVCS, "wffc", ns)
    assert claim["spec"]["resources"]["requests"]["storage"] == "64Mi"  # verbatim
    assert compare(images.get("raw").path, kit.volume_path(kube, claim))


def test_blank_block(kube: Client, ns: str) -> None:
    kube.create(kit.DVS, kit.datavolume(
        "blank", {"blank": {}}, size="32Mi",
        storage={"storageClassName": "local-immediate", "volumeMode": "Block"}), ns)
    status = kit.wait_dv(kube, ns, "blank", ("Succeeded", "Failed"))
    assert status["phase"] == "Succeeded", str(status["conditions"])
    claim = kube.get(resources.PVCS, "blank", ns)
    assert claim["spec"]["volumeMode"] == "Block"
    assert claim["spec"]["resources"]["requests"]["storage"] == "32Mi"  # Block: no overhead
    with open(kit.volume_path(kube, claim), "rb") as dev:
        assert dev.read(4 * MiB) == bytes(4 * MiB)


@pytest.mark.parametrize(("spec_change", "field"), [
    ({"source": {"http": {"url": "ftp://127.0.0.1/disk.img"}}},
     "spec.source.HTTP.url: spec.source Invalid source URL scheme"),
    ({"source": {"http": {"url": "http://127.0.0.1/d", "secretRef": "absent"}}},
     "spec.source.http.secretRef: Secret 'absent' not found"),
    ({"source": {"http": {"url": "http://127.0.0.1/d", "checksum": "sha256:12"}}},
     "spec.source.HTTP.checksum: Invalid checksum format"),
    ({"source": {"http": {"url": "http://127.0.0.1/d"}, "blank": {}}},
     "spec.source: Multiple Data volume sources"),
    ({"pvc": {"accessModes": ["ReadWriteOnce"],
              "resources": {"requests": {"storage": "1Gi"}}}}, "Duplicate storage definition"),
    ({"storage": {}}, "spec.Storage.resources.requests.size: Storage size is missing"),
])
def test_webhook_rejects(kube: Client, ns: str, spec_change: dict, field: str) -> None:
    body = kit.datavolume("bad", {"blank": {}})
    body["spec"].update(spec_change)
    with pytest.raises(KubeError) as err:
        kube.create(kit.DVS, body, ns)
    assert err.value.status in (400, 422), err.value
    assert field in str(err.value), err.value
    assert kube.get_or_none(kit.DVS, "bad", ns) is None


def test_claim_adoption(kube: Client, ns: str) -> None:
    kube.create(resources.PVCS, {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
                              "metadata": {"name": "existing"},
                              "spec": {"accessModes": ["ReadWriteOnce"],
                                       "storageClassName": "local-immediate",
                                       "resources": {"requests": {"storage": "16Mi"}}}}, ns)
    wait_for(lambda: (kube.get(resources.PVCS, "existing", ns).get("status") or {}).get("phase")
             == "Bound", timeout=60, what="claim bound")
    # without the annotation the DataVolume is refused at admission, as upstream
    with pytest.raises(KubeError) as err:
        kube.create(kit.DVS, kit.datavolume("existing", {"blank": {}}, size="16Mi"), ns)
    assert err.value.status == 422, err.value
    assert f"Destination PVC {ns}/existing already exists" in str(err.value), err.value
    assert kube.get_or_none(kit.DVS, "existing", ns) is None
    assert kube.get_or_none(resources.PVCS, "existing", ns) is not None  # not ours: left alone
    dv = kube.create(kit.DVS, kit.datavolume(
        "existing", {"blank": {}}, size="16Mi",
        annotations={"cdi.kubevirt.io/allowClaimAdoption": "true"}), ns)
    status = kit.wait_dv(kube, ns, "existing", ("Succeeded", "Failed"))
    assert status["phase"] == "Succeeded"
    claim = kube.get(resources.PVCS, "existing", ns)
    assert dv["metadata"]["uid"] in [r["uid"] for r in claim["metadata"]["ownerReferences"]]
    assert "dataSourceRef" not in claim["spec"]  # adopted, not re-imported
    assert not kube.list(resources.PODS, ns)


def test_claim_adoption_by_the_feature_gate(kube: Client, ns: str) -> None:
    """CDIConfig's DataVolumeClaimAdoption gate lets a DataVolume without the annotation
    adopt its claim, at admission and in the controller; the annotation "false" still
    refuses, as upstream."""
    kube.create(resources.PVCS, {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
                              "metadata": {"name": "gated"},
                              "spec": {"accessModes": ["ReadWriteOnce"],
                                       "storageClassName": "local-immediate",
                                       "resources": {"requests": {"storage": "16Mi"}}}}, ns)
    kube.patch(kit.CDICONFIGS, "config",
               {"spec": {"featureGates": ["DataVolumeClaimAdoption"]}})
    try:
        with pytest.raises(KubeError) as err:
            kube.create(kit.DVS, kit.datavolume(
                "gated", {"blank": {}}, size="16Mi",
                annotations={"cdi.kubevirt.io/allowClaimAdoption": "false"}), ns)
        assert err.value.status == 422, err.value
        dv = kube.create(kit.DVS, kit.datavolume("gated", {"blank": {}}, size="16Mi"), ns)
        status = kit.wait_dv(kube, ns, "gated", ("Succeeded", "Failed"))
    finally:
        kube.patch(kit.CDICONFIGS, "config", {"spec": {"featureGates": None}})
    assert status["phase"] == "Succeeded", status
    claim = kube.get(resources.PVCS, "gated", ns)
    assert dv["metadata"]["uid"] in [r["uid"] for r in claim["metadata"]["ownerReferences"]]
    assert "dataSourceRef" not in claim["spec"]  # adopted, not imported


def test_delete_mid_import_leaves_nothing(kube: Client, ns: str, http_server: HttpServer,
                                          images: ImageFactory) -> None:
    url = http_server.publish(images.get("raw").path, "crawl.img")
    http_server.set_faults("crawl.img", Faults(rate=256 * 1024))
    kube.create(kit.DVS, kit.datavolume("gone", {"http": {"url": url}},
                                        storage={"storageClassName": "local-immediate"}), ns)
    kit.wait_dv(kube, ns, "gone", ("ImportInProgress",), timeout=120)
    assert any(p["metadata"]["name"].startswith("importer-") for p in
               kube.list(resources.PODS, ns))
    kube.delete(kit.DVS, "gone", ns)
    wait_for(lambda: not kit.leftovers(kube, ns), timeout=120,
             what="claims, PVC', importer pod and VolumeImportSource gone")


def test_profiles_and_config_follow_the_classes(kube: Client) -> None:
    classes = [c["metadata"]["name"] for c in
               kube.list(resources.STORAGECLASSES)]
    for name in classes:
        profile = kube.get(kit.PROFILES, name)
        assert profile["status"]["provisioner"] == "local.localcluster.rootdisk.io"
        assert {"accessModes": ["ReadWriteOnce"], "volumeMode": "Filesystem"} in (
            profile["status"]["claimPropertySets"])
    config = kube.get(kit.CDICONFIGS, "config")
    assert config["status"]["filesystemOverhead"]["storageClass"] == {
        name: "0.03" for name in classes}  # the classes' own annotation
    assert config["status"]["defaultPodResourceRequirements"]["limits"]["cpu"] == "750m"
    # the CRD refuses an overhead upstream's pattern refuses
    config["spec"] = {"filesystemOverhead": {"global": "1.5"}}
    with pytest.raises(KubeError, match=r"spec\.filesystemOverhead\.global"):
        kube.replace(kit.CDICONFIGS, config)
    # CDIConfig's per-class value wins over the class annotation
    config = kube.get(kit.CDICONFIGS, "config")
    config["spec"] = {"filesystemOverhead": {"global": "0.1",
                                             "storageClass": {"local": "0.2"}}}
    kube.replace(kit.CDICONFIGS, config)
    try:
        wait_for(lambda: kube.get(kit.CDICONFIGS, "config")["status"]["filesystemOverhead"]
                 .get("storageClass", {}).get("local") == "0.2", timeout=60,
                 what="CDIConfig status updated")
        status = kube.get(kit.CDICONFIGS, "config")["status"]["filesystemOverhead"]
        assert status["global"] == "0.1"
        assert status["storageClass"]["local-immediate"] == "0.03"
    finally:
        config = kube.get(kit.CDICONFIGS, "config")
        config["spec"] = {}
        kube.replace(kit.CDICONFIGS, config)
        wait_for(lambda: kube.get(kit.CDICONFIGS, "config")["status"]["filesystemOverhead"]
                 ["storageClass"].get("local") == "0.03", timeout=60, what="config reset")


def test_many_datavolumes_at_once(kube: Client, ns: str, http_server: HttpServer,
                                  images: ImageFactory) -> None:
    url = http_server.publish(images.get("qcow2").path, "many.qcow2")
    names = [f"many-{i}" for i in range(8)]
    for i, name in enumerate(names):
        source = {"http": {"url": url}} if i % 2 else {"blank": {}}
        kube.create(kit.DVS, kit.datavolume(name, source, size="32Mi",
                                            storage={"storageClassName": "local-immediate"}),
                    ns)
    for name in names:
        status = kit.wait_dv(kube, ns, name, ("Succeeded", "Failed"), timeout=300)
        assert status["phase"] == "Succeeded", (name, status.get("conditions"))
    for i, name in enumerate(names):
        if i % 2:
            claim = kube.get(resources.PVCS, name, ns)
            assert compare(images.get("raw").path, kit.volume_path(kube, claim))


def test_webhook_trust_restored_after_reapply(kube: Client, ns: str) -> None:
    """Re-applying manifests/ empties the caBundle; the operator puts it back."""


    with open(os.path.join(kit.MANIFESTS, "deploy", "cdi-operator.yaml")) as fh:
        fresh = next(d for d in yaml.safe_load_all(fh)
                     if d and d["kind"] == "ValidatingWebhookConfiguration")
    current = kube.get(kit.WEBHOOKS, "rootdisk-cdi")
    fresh["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
    kube.replace(kit.WEBHOOKS, fresh)
    assert not kube.get(kit.WEBHOOKS, "rootdisk-cdi")["webhooks"][0]["clientConfig"].get(
        "caBundle")
    wait_for(lambda: kube.get(kit.WEBHOOKS, "rootdisk-cdi")["webhooks"][0]["clientConfig"]
             .get("caBundle"), timeout=90, what="caBundle restored")
    kube.create(kit.DVS, kit.datavolume("trusted", {"blank": {}}, size="8Mi",
                                        storage={"storageClassName": "local-immediate"}), ns)
    assert kit.wait_dv(kube, ns, "trusted", ("Succeeded", "Failed"))["phase"] == "Succeeded"


def test_http_qcow2_into_block(kube: Client, ns: str, http_server: HttpServer,
                               images: ImageFactory) -> None:
    url = http_server.publish(images.get("qcow2").path, "block.qcow2")
    kube.create(kit.DVS, kit.datavolume(
        "block", {"http": {"url": url}},
        storage={"storageClassName": "local-immediate", "volumeMode": "Block"}), ns)
    status = kit.wait_dv(kube, ns, "block", ("Succeeded", "Failed"))
    assert status["phase"] == "Succeeded", str(status["conditions"])
    claim = kube.get(resources.PVCS, "block", ns)
    assert claim["spec"]["resources"]["requests"]["storage"] == "64Mi"  # Block: no overhead
    assert "alerts.k8s.io/KubePersistentVolumeFillingUp" not in claim["metadata"]["labels"]
    assert compare(images.get("raw").path, kit.volume_path(kube, claim))


def test_checksums(kube: Client, ns: str, http_server: HttpServer,
                   images: ImageFactory) -> None:
    image = images.get("qcow2")
    url = http_server.publish(image.path, "summed.qcow2")
    wrong = "sha256:" + ("0" * 64)
    for name, checksum in (("right", image.checksum("sha256")), ("wrong", wrong)):
        kube.create(kit.DVS, kit.datavolume(
            name, {"http": {"url": url, "checksum": checksum}},
            storage={"storageClassName": "local-immediate"}), ns)
    assert kit.wait_dv(kube, ns, "right", ("Succeeded", "Failed"))["phase"] == "Succeeded"
    status = kit.wait_dv(kube, ns, "wrong", ("Succeeded", "Failed"))
    assert status["phase"] == "Failed"
    assert kit.condition(status, "Running")["reason"] == "ChecksumMismatch"
    assert status["restartCount"] == 0
    uid = kube.get(kit.DVS, "wrong", ns)["metadata"]["uid"]
    # the Event follows the status write that carries the phase
    wait_for(lambda: "ImportFailed" in [e["reason"] for e in kit.events_for(kube, ns, uid)],
             timeout=30, what="ImportFailed event")
    reasons = [e["reason"] for e in kit.events_for(kube, ns, uid)]
    assert reasons.count("ImportFailed") == 1


def test_import_into_a_namespace_enforcing_restricted(kube: Client, http_server: HttpServer,
                                                       images: ImageFactory) -> None:
    """The importer pod is admissible where PodSecurity enforces "restricted", as
    upstream's (issue 24), while a privileged pod there is refused."""
    ns = kit.namespace(kube, prefix="restricted")
    kube.patch(resources.NAMESPACES, ns, {"metadata": {"labels": {
        "pod-security.kubernetes.io/enforce": "restricted"}}})
    with pytest.raises(KubeError) as refused:
        kube.create(resources.PODS, {"apiVersion": "v1", "kind": "Pod",
                                  "metadata": {"name": "root"},
                                  "spec": {"containers": [{"name": "c", "image": "x",
                                           "securityContext": {"privileged": True}}]}}, ns)
    assert refused.value.status == 403
    assert 'violates PodSecurity "restricted:latest": privileged' in str(refused.value)
    url = http_server.publish(images.get("qcow2").path, "restricted.qcow2")
    kube.create(kit.DVS, kit.datavolume("disk", {"http": {"url": url}},
                                        storage={"storageClassName": "local-immediate"}), ns)
    status = kit.wait_dv(kube, ns, "disk", ("Succeeded", "Failed"))
    assert status["phase"] == "Succeeded", str(status["conditions"])
    assert compare(images.get("raw").path,
                   kit.volume_path(kube, kube.get(resources.PVCS, "disk", ns)))


def test_cdi_object_is_available(cluster: Cluster) -> None:
    """`rootdisk up` installs the CDI object; the CDI controller marks it Available once
    the install's Deployments are ready, so upstream's readiness check works unchanged."""
    proc = subprocess.run(
        ["kubectl", "--kubeconfig", cluster.kubeconfig, "wait", "cdi", "cdi",
         "--for=condition=Available", "--timeout=120s"],
        capture_output=True, text=True, timeout=180, check=False)
    assert proc.returncode == 0, proc.stderr
    assert "cdi.cdi.kubevirt.io/cdi condition met" in proc.stdout
    proc = subprocess.run(
        ["kubectl", "--kubeconfig", cluster.kubeconfig, "get", "cdi", "cdi",
         "-o", "jsonpath={.status.phase}"],
        capture_output=True, text=True, timeout=60, check=False)
    assert proc.stdout == "Deployed", (proc.stdout, proc.stderr)
