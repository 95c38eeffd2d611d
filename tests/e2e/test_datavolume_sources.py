"""More sources and failures on `rootdisk up`: S3 with credentials, a registry with TLS
and auth or listed insecure, HTTPS with a CA, basic auth and headers, a transient fault
healing by a pod restart, a too-small volume, an operator restart mid-import, two operator
replicas."""

from __future__ import annotations

import base64
import secrets
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import kubeclient
from kubeclient import Client, KubeError, resources
from localcluster.cluster import Cluster
from tests.e2e import kit
from tests.fixtures.httpserver import Faults, HttpServer
from tests.fixtures.images import ImageFactory, compare
from tests.fixtures.registry import RegistryServer, push_disk
from tests.fixtures.s3server import S3Server
from tests.fixtures.tls import TlsMaterial
from tests.localcluster.clusterkit import logs, needs_root, wait_for

pytestmark = [needs_root, pytest.mark.slow, pytest.mark.e2e]

MiB = 2**20
DEPLOYMENTS = kubeclient.Resource("apps", "v1", "deployments")
LEASES = kubeclient.Resource("coordination.k8s.io", "v1", "leases")
#: the importer's in-pod retries, short, so that a transient fault costs a pod restart
TUNING = [{"name": "IMPORTER_RETRY_ATTEMPTS", "value": "2"},
          {"name": "IMPORTER_RETRY_DELAY", "value": "0.2"}]


def update_deployment(kube: Client, change: Callable[[dict[str, Any]], None]) -> None:
    """Read, change, replace; again on a conflict with the Deployment controller."""
    for _ in range(20):
        deploy = kube.get(DEPLOYMENTS, "rootdisk-cdi-operator", kit.OPERATOR_NS)
        change(deploy)
        try:
            kube.replace(DEPLOYMENTS, deploy)
            return
        except KubeError as err:
            if err.status != 409:
                raise
            time.sleep(0.2)
    raise AssertionError("the operator Deployment kept changing under us")


def operator_env(kube: Client, env: list[dict[str, str]]) -> None:
    def change(deploy: dict[str, Any]) -> None:
        container = deploy["spec"]["template"]["spec"]["containers"][0]
        container["env"] = [e for e in container["env"] if e["name"] not in
                            {x["name"] for x in env}] + env
    update_deployment(kube, change)


def replicas(kube: Client, n: int) -> None:
    update_deployment(kube, lambda d: d["spec"].__setitem__("replicas", n))


def lease_holder(kube: Client) -> str | None:
    lease = kube.get_or_none(LEASES, "rootdisk-cdi", kit.OPERATOR_NS) or {}
    return (lease.get("spec") or {}).get("holderIdentity")


def ready_operators(kube: Client) -> list[str]:
    return [p["metadata"]["name"] for p in kit.operator_pods(kube)
            if not p["metadata"].get("deletionTimestamp") and any(
                c["type"] == "Ready" and c["status"] == "True"
                for c in (p.get("status") or {}).get("conditions") or [])]


@pytest.fixture(scope="module", autouse=True)
def tuned(cluster: Cluster) -> Iterator[None]:
    """The operator rolled out with the short importer retries (a real rollout: the old
    replica hands the Lease over to the new one)."""
    kube = kit.cluster_kube(cluster)
    before = set(ready_operators(kube))
    operator_env(kube, TUNING)
    wait_for(lambda: ready_operators(kube) and not set(ready_operators(kube)) & before
             and lease_holder(kube) in ready_operators(kube), timeout=180,
             what="operator rolled out and leading")
    yield


def test_s3_with_credentials(kube: Client, ns: str, s3_server: S3Server, s3_bucket: str,
                             images: ImageFactory) -> None:
    s3_server.put_file(s3_bucket, "disk.qcow2", images.get("qcow2").path)
    kit.secret(kube, ns, "s3-creds", {"accessKeyId": s3_server.access_key,
                                      "secretKey": s3_server.secret_key})
    kube.create(kit.DVS, kit.datavolume(
        "from-s3", {"s3": {"url": s3_server.http_url(s3_bucket, "disk.qcow2"),
                           "secretRef": "s3-creds"}},
        storage={"storageClassName": "local-immediate"}), ns)
    status = kit.wait_dv(kube, ns, "from-s3", ("Succeeded", "Failed"))
    assert status["phase"] == "Succeeded", str(status["conditions"])
    assert compare(images.get("raw").path,
                   kit.volume_path(kube, kube.get(resources.PVCS, "from-s3", ns)))
    # the credentials reached the importer only through the Secret, never the pod spec
    for pod_event in kit.events_for(kube, ns, kube.get(kit.DVS, "from-s3", ns)["metadata"]
                                    ["uid"]):
        assert s3_server.secret_key not in pod_event.get("message", "")


def test_registry_with_tls_and_credentials(kube: Client, ns: str,
                                           registry_server: RegistryServer,
                                           images: ImageFactory, tmp_path: Path) -> None:
    """A containerDisk image (qcow2 in a gzip layer) behind TLS from a private CA and
    Basic auth: the DataVolume names the Secret and the CA ConfigMap, as upstream."""
    push_disk(registry_server, "golden/cirros", "v1", images.get("qcow2").path,
              tmp_path / "work", name="cirros.qcow2")
    creds = registry_server.credentials
    assert creds is not None
    kit.secret(kube, ns, "pull", {"accessKeyId": creds.username, "secretKey": creds.password})
    kube.create(resources.CONFIGMAPS, {
        "apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "registry-ca"},
        "data": {"ca.pem": Path(str(registry_server.verify)).read_text()}}, ns)
    kube.create(kit.DVS, kit.datavolume(
        "golden", {"registry": {"url": registry_server.url("golden/cirros", "v1"),
                                "secretRef": "pull", "certConfigMap": "registry-ca"}},
        storage={"storageClassName": "local-immediate"}), ns)
    status = kit.wait_dv(kube, ns, "golden", ("Succeeded", "Failed"))
    assert status["phase"] == "Succeeded", str(status["conditions"])
    assert compare(images.get("raw").path,
                   kit.volume_path(kube, kube.get(resources.PVCS, "golden", ns)))
    seen = [kube.list(res, ns) for res in (resources.PODS, resources.PVCS, resources.EVENTS,
                                                      kit.DVS)]
    assert registry_server.password not in str(seen)


def test_registry_listed_insecure_over_plain_http(kube: Client, ns: str,
                                                  plain_registry: RegistryServer,
                                                  images: ImageFactory,
                                                  tmp_path: Path) -> None:
    """Plain HTTP works only for a host in CDIConfig ``insecureRegistries``."""
    push_disk(plain_registry, "golden/raw", "v1", images.get("raw").path, tmp_path / "work",
              compression="zstd")
    source = {"registry": {"url": plain_registry.url("golden/raw", "v1")}}
    kube.create(kit.DVS, kit.datavolume("refused", source,
                                        storage={"storageClassName": "local-immediate"}), ns)
    refused = kit.wait_dv(kube, ns, "refused", ("Succeeded", "Failed"))
    assert refused["phase"] == "Failed", refused
    assert "SSL" in kit.condition(refused, "Running")["message"]  # HTTPS tried, not HTTP
    kube.patch(kit.CDICONFIGS, "config", {"spec": {"insecureRegistries": [plain_registry.host]}})
    try:
        kube.create(kit.DVS, kit.datavolume(
            "allowed", source, storage={"storageClassName": "local-immediate"}), ns)
        status = kit.wait_dv(kube, ns, "allowed", ("Succeeded", "Failed"))
    finally:
        kube.patch(kit.CDICONFIGS, "config", {"spec": {"insecureRegistries": None}})
    assert status["phase"] == "Succeeded", str(status["conditions"])
    assert compare(images.get("raw").path,
                   kit.volume_path(kube, kube.get(resources.PVCS, "allowed", ns)))


def test_https_ca_basic_auth_and_headers(kube: Client, ns: str, https_server: HttpServer,
                                         tls_material: TlsMaterial,
                                         images: ImageFactory) -> None:
    url = https_server.publish(images.get("qcow2").path, "private.qcow2")
    https_server.set_faults("private.qcow2", Faults(
        basic_auth=("reader", "s3cret"), required_headers=(("X-Token", "abc"),)))
    kit.secret(kube, ns, "auth", {"accessKeyId": "reader", "secretKey": "s3cret"})
    kube.create(resources.CONFIGMAPS, {"apiVersion": "v1", "kind": "ConfigMap",
                                    "metadata": {"name": "ca"},
                                    "data": {"ca.pem": tls_material.ca_cert.read_text()}}, ns)
    kube.create(kit.DVS, kit.datavolume(
        "private", {"http": {"url": url, "secretRef": "auth", "certConfigMap": "ca",
                             "extraHeaders": ["X-Token: abc"]}},
        storage={"storageClassName": "local-immediate"}), ns)
    status = kit.wait_dv(kube, ns, "private", ("Succeeded", "Failed"))
    assert status["phase"] == "Succeeded", str(status["conditions"])
    got = https_server.requests_for("private.qcow2")
    assert got and all(r.status < 400 for r in got)
    auth = base64.b64encode(b"reader:s3cret").decode()
    assert all(r.headers.get("Authorization") == f"Basic {auth}" for r in got)
    assert all(r.headers.get("X-Token") == "abc" for r in got)
    assert compare(images.get("raw").path,
                   kit.volume_path(kube, kube.get(resources.PVCS, "private", ns)))


def test_secret_extra_headers_reach_the_server_and_nowhere_else(
        kube: Client, ns: str, http_server: HttpServer, images: ImageFactory) -> None:
    """``secretExtraHeaders``: each Secret's keys are headers on every request (the
    direct nbdkit route included), and the values appear in no object of the namespace
    but the Secrets: not in the pod spec or its env, the claims, the DataVolume, the
    Events, the pod's log or its termination message (the pod is kept to look)."""
    token = "t0k-" + secrets.token_hex(8)
    url = http_server.publish(images.get("qcow2").path, "guarded.qcow2")
    http_server.set_faults("guarded.qcow2", Faults(
        required_headers=(("X-Secret-Token", token), ("X-Tenant", "blue"))))
    kit.secret(kube, ns, "token-header", {"token": f"X-Secret-Token: {token}\n"})
    kit.secret(kube, ns, "tenant-header", {"tenant": "X-Tenant: blue"})
    kube.create(kit.DVS, kit.datavolume(
        "guarded", {"http": {"url": url, "secretExtraHeaders": ["token-header",
                                                                 "tenant-header"]}},
        storage={"storageClassName": "local-immediate"},
        annotations={"cdi.kubevirt.io/storage.pod.retainAfterCompletion": "true"}), ns)
    status = kit.wait_dv(kube, ns, "guarded", ("Succeeded", "Failed"))
    assert status["phase"] == "Succeeded", str(status["conditions"])
    got = http_server.requests_for("guarded.qcow2")
    assert got and all(r.status < 400 for r in got)
    assert all(r.headers.get("X-Secret-Token") == token for r in got)
    assert compare(images.get("raw").path,
                   kit.volume_path(kube, kube.get(resources.PVCS, "guarded", ns)))
    pods = kube.list(resources.PODS, ns)
    assert pods, "the importer pod was kept (retainAfterCompletion)"
    seen = [kube.list(res, ns) for res in (resources.PODS, resources.PVCS, resources.EVENTS,
                                                      kit.DVS, kit.VIS)]
    assert token not in str(seen)
    for pod in pods:
        log = logs(kube, pod["metadata"]["name"], ns)
        assert "phase" in log and token not in log


def test_wrong_password_fails_unauthorized(kube: Client, ns: str, http_server: HttpServer,
                                           images: ImageFactory) -> None:
    url = http_server.publish(images.get("qcow2").path, "locked.qcow2")
    http_server.set_faults("locked.qcow2", Faults(basic_auth=("reader", "right")))
    kit.secret(kube, ns, "auth", {"accessKeyId": "reader", "secretKey": "wrong"})
    kube.create(kit.DVS, kit.datavolume(
        "locked", {"http": {"url": url, "secretRef": "auth"}},
        storage={"storageClassName": "local-immediate"}), ns)
    status = kit.wait_dv(kube, ns, "locked", ("Succeeded", "Failed"))
    assert status["phase"] == "Failed"
    assert kit.condition(status, "Running")["reason"] == "Unauthorized"
    assert status["restartCount"] == 0  # permanent: not retried


def test_transient_fault_heals_with_a_restart(kube: Client, ns: str, http_server: HttpServer,
                                              images: ImageFactory) -> None:
    url = http_server.publish(images.get("qcow2").path, "flaky.qcow2")
    http_server.set_faults("flaky.qcow2", Faults(status=503, status_times=6))
    kube.create(kit.DVS, kit.datavolume("flaky", {"http": {"url": url}},
                                        storage={"storageClassName": "local-immediate"}), ns)
    status = kit.wait_dv(kube, ns, "flaky", ("Succeeded", "Failed"), timeout=240)
    assert status["phase"] == "Succeeded", str(status["conditions"])
    assert status["restartCount"] > 0
    assert compare(images.get("raw").path,
                   kit.volume_path(kube, kube.get(resources.PVCS, "flaky", ns)))


def test_too_small(kube: Client, ns: str, http_server: HttpServer,
                   images: ImageFactory) -> None:
    url = http_server.publish(images.get("qcow2").path, "big.qcow2")  # 16 MiB virtual
    pvc = {"storageClassName": "local-immediate", "accessModes": ["ReadWriteOnce"],
           "resources": {"requests": {"storage": "8Mi"}}}
    kube.create(kit.DVS, kit.datavolume("small", {"http": {"url": url}}, pvc=pvc), ns)
    status = kit.wait_dv(kube, ns, "small", ("Succeeded", "Failed"))
    assert status["phase"] == "Failed"
    running = kit.condition(status, "Running")
    assert running["reason"] == "TooSmall", running
    assert status["restartCount"] == 0


def test_operator_restart_mid_import(kube: Client, ns: str, http_server: HttpServer,
                                     images: ImageFactory) -> None:
    url = http_server.publish(images.get("raw").path, "paced.img")
    http_server.set_faults("paced.img", Faults(rate=1 * MiB))
    dv = kube.create(kit.DVS, kit.datavolume(
        "survivor", {"http": {"url": url}}, storage={"storageClassName": "local-immediate"}),
        ns)
    kit.wait_dv(kube, ns, "survivor", ("ImportInProgress",), timeout=120)
    importers = [p["metadata"]["uid"] for p in kube.list(resources.PODS, ns)]
    old = ready_operators(kube)
    for name in old:
        kube.delete(resources.PODS, name, kit.OPERATOR_NS)
    wait_for(lambda: set(ready_operators(kube)) - set(old) and lease_holder(kube)
             in ready_operators(kube), timeout=180, what="a new operator leading")
    status = kit.wait_dv(kube, ns, "survivor", ("Succeeded", "Failed"))
    assert status["phase"] == "Succeeded", str(status["conditions"])
    assert compare(images.get("raw").path,
                   kit.volume_path(kube, kube.get(resources.PVCS, "survivor", ns)))
    uid = dv["metadata"]["uid"]
    wait_for(lambda: "ImportSucceeded" in [e["reason"] for e in kit.events_for(kube, ns, uid)],
             timeout=30, what="ImportSucceeded event")
    reasons = [e["reason"] for e in kit.events_for(kube, ns, uid)]
    assert reasons.count("ImportScheduled") == 1 and reasons.count("ImportSucceeded") == 1
    # the import went on in the same importer pod: none was duplicated or restarted over
    assert len(importers) == 1
    assert status["restartCount"] == 0


def test_two_replicas_one_leader(kube: Client, ns: str) -> None:
    replicas(kube, 2)
    try:
        wait_for(lambda: len(ready_operators(kube)) == 2, timeout=180, what="two replicas")
        leader = lease_holder(kube)
        assert leader in ready_operators(kube)
        kube.delete(resources.PODS, str(leader), kit.OPERATOR_NS)
        wait_for(lambda: lease_holder(kube) not in (None, leader)
                 and lease_holder(kube) in ready_operators(kube), timeout=120,
                 what="the Lease handed over")
        kube.create(kit.DVS, kit.datavolume("after", {"blank": {}}, size="8Mi",
                                            storage={"storageClassName": "local-immediate"}),
                    ns)
        assert kit.wait_dv(kube, ns, "after", ("Succeeded", "Failed"))["phase"] == "Succeeded"
    finally:
        replicas(kube, 1)
