"""Uploads on `rootdisk up` (the CDI operator, the cdi-apiserver and the upload proxy as
pods from manifests/): `rootdisk image-upload` of a qcow2 and a raw image (content
identical, target sparse), tokens refused (forged, expired, garbage: nothing written), a
target too small (the command fails with TooSmall, the DataVolume waits for another
upload), deletion mid-upload leaving nothing, and the CLI's
failure exits."""

from __future__ import annotations

import base64
import json
import threading
import time
from collections.abc import Iterator
from typing import Any

import jwt
import pytest
import requests

import kubeclient
from cdi import uploadtoken
from kubeclient import Client, resources
from localcluster.cluster import Cluster
from rootdisk.cli import main as cli
from tests.e2e import kit
from tests.fixtures.images import ImageFactory, allocated_bytes, compare
from tests.localcluster.clusterkit import needs_root, wait_for, wait_reasons

pytestmark = [needs_root, pytest.mark.slow, pytest.mark.e2e, pytest.mark.timeout(900)]

SERVICES = kubeclient.Resource("", "v1", "services")
VUS = kubeclient.Resource("cdi.kubevirt.io", "v1beta1", "volumeuploadsources")
ENDPOINTS = kubeclient.Resource("", "v1", "endpoints")
A = "cdi.kubevirt.io/"
TIMEOUT = 240


def upload(cluster: Cluster, *args: str) -> int:
    return cli(["image-upload", *args, "--kubeconfig", cluster.kubeconfig, "--timeout", "240",
                "--force-bind"])


def leftovers(kube: Client, ns: str, keep: tuple[str, ...] = ()) -> list[str]:
    out = []
    for res in (resources.PVCS, resources.PODS, SERVICES, resources.SECRETS, VUS):
        out += [f"{res.plural}/{o['metadata']['name']}" for o in kube.list(res, ns)
                if o["metadata"]["name"] not in keep
                and not o["metadata"]["name"].startswith("default-token")]
    return out


def proxy_url(kube: Client) -> str:
    def address() -> str | None:
        ep = kube.get_or_none(ENDPOINTS, "cdi-uploadproxy", kit.OPERATOR_NS) or {}
        for subset in ep.get("subsets") or []:
            for a in subset.get("addresses") or []:
                return f"https://{a['ip']}:{subset['ports'][0]['port']}"
        return None
    return str(wait_for(address, timeout=TIMEOUT, what="upload proxy endpoint"))


PROXY_CA: dict[str, str] = {}


@pytest.fixture(scope="module")
def ready_proxy(kube: Client, tmp_path_factory: pytest.TempPathFactory) -> str:
    """The proxy's address; its CA (ConfigMap cdi-uploadproxy-ca) trusted by _post."""
    url = proxy_url(kube)
    cm = wait_for(lambda: kube.get_or_none(resources.CONFIGMAPS, "cdi-uploadproxy-ca",
                                           kit.OPERATOR_NS), timeout=TIMEOUT, what="proxy CA")
    ca = tmp_path_factory.mktemp("proxy-ca") / "ca.crt"
    ca.write_text(cm["data"]["ca.crt"])
    PROXY_CA["path"] = str(ca)
    return url


def ready_dv(kube: Client, ns: str, name: str, size: str = "64Mi",
             **annotations: str) -> dict[str, Any]:
    kube.create(kit.DVS, kit.datavolume(name, {"upload": {}}, size=size, annotations={
        A + "storage.bind.immediate.requested": "", **annotations}), ns)
    return kit.wait_dv(kube, ns, name, ("UploadReady", "Failed"), timeout=TIMEOUT)


def test_upload_qcow2_into_a_datavolume(cluster: Cluster, kube: Client, ns: str,
                                        images: ImageFactory, ready_proxy: str) -> None:
    image = images.get("qcow2")
    assert upload(cluster, "dv", "up", "--image-path", str(image.path), "--size", "64Mi",
                  "-n", ns) == 0
    status = kit.dv_status(kube, ns, "up")
    assert status["phase"] == "Succeeded", status
    claim = kube.get(resources.PVCS, "up", ns)
    path = kit.volume_path(kube, claim)
    assert compare(image.expected, path)
    assert allocated_bytes(path) < image.virtual_size  # holes stay holes
    dv = kube.get(kit.DVS, "up", ns)
    wait_reasons(kube, ns, dv["metadata"]["uid"], "UploadScheduled", "UploadReady",
                 "UploadSucceeded")
    # PVC', the upload server pod, its Service and Secret, the VolumeUploadSource: gone
    wait_for(lambda: leftovers(kube, ns, keep=("up",)) == [], timeout=TIMEOUT,
             what=f"nothing but the target left: {leftovers(kube, ns, keep=('up',))}")


def test_upload_raw_into_a_pvc(cluster: Cluster, kube: Client, ns: str, images: ImageFactory,
                               ready_proxy: str) -> None:
    image = images.get("raw")
    assert upload(cluster, "pvc", "rawpvc", "--image-path", str(image.path), "--size", "64Mi",
                  "-n", ns) == 0
    claim = kube.get(resources.PVCS, "rawpvc", ns)
    assert claim["status"]["phase"] == "Bound"
    path = kit.volume_path(kube, claim)
    assert compare(image.expected, path)
    assert allocated_bytes(path) < 64 * 2**20


def test_upload_qcow2_into_a_block_volume(cluster: Cluster, kube: Client, ns: str,
                                          images: ImageFactory, ready_proxy: str) -> None:
    image = images.get("qcow2")
    assert upload(cluster, "dv", "blk", "--image-path", str(image.path), "--size", "64Mi",
                  "--block-volume", "-n", ns) == 0
    claim = kube.get(resources.PVCS, "blk", ns)
    assert claim["spec"]["volumeMode"] == "Block"
    assert compare(image.expected, kit.volume_path(kube, claim))


def _post(url: str, token: str, data: bytes) -> requests.Response:
    return requests.post(f"{url}/v1beta1/upload", data=data, verify=PROXY_CA["path"],
                         headers={"Authorization": f"Bearer {token}"}, timeout=60)


def test_bad_tokens_are_refused_and_nothing_is_written(
        kube: Client, ns: str, images: ImageFactory, ready_proxy: str) -> None:
    ready_dv(kube, ns, "guarded")
    data = images.get("raw").path.read_bytes()
    now = int(time.time())
    forged_key, _ = uploadtoken.make_key()
    forged = uploadtoken.issue(key_pem=forged_key, namespace=ns, name="guarded", now=now)
    secret = kube.get(resources.SECRETS, "cdi-upload-signing-key", kit.OPERATOR_NS)
    real_key = base64.b64decode(secret["data"]["private.pem"])
    expired = uploadtoken.issue(key_pem=real_key, namespace=ns, name="guarded",
                                now=now - 3600)
    wrong_op = jwt.encode({"iss": uploadtoken.ISSUER, "iat": now, "exp": now + 300,
                           "operation": "Clone", "namespace": ns, "name": "guarded",
                           "resource": uploadtoken.RESOURCE}, real_key, algorithm="ES256")
    for token in (forged, expired, wrong_op):
        assert _post(ready_proxy, token, data).status_code == 401
    assert _post(ready_proxy, "not a token at all", data).status_code == 400
    # a good token for a claim that is not an upload target: refused, nothing forwarded
    other = uploadtoken.issue(key_pem=real_key, namespace=ns, name="no-such-claim", now=now)
    assert _post(ready_proxy, other, data).status_code == 503
    status = kit.dv_status(kube, ns, "guarded")
    assert status["phase"] == "UploadReady", status
    prime = kube.get(resources.PVCS, "guarded", ns)["metadata"]["annotations"][
        A + "storage.populator.pvcPrime"]
    prime_claim = kube.get(resources.PVCS, prime, ns)
    path = kit.volume_path(kube, prime_claim)
    assert not __import__("os").path.exists(path) or allocated_bytes(path) == 0
    # the real token still works after all that
    good = uploadtoken.issue(key_pem=real_key, namespace=ns, name="guarded", now=now)
    assert _post(ready_proxy, good, data).status_code == 200
    assert kit.wait_dv(kube, ns, "guarded", ("Succeeded", "Failed"),
                       timeout=TIMEOUT)["phase"] == "Succeeded"


def test_qcow2_through_the_proxy_is_spooled_then_converted(
        kube: Client, ns: str, images: ImageFactory, ready_proxy: str) -> None:
    """The proxy passes the length on, so the server keeps the qcow2 whole in scratch as
    it arrives and qemu-img converts that file (route scratch-convert, from the kept
    pod's termination message)."""
    ready_dv(kube, ns, "kept", **{A + "storage.pod.retainAfterCompletion": "true"})
    secret = kube.get(resources.SECRETS, "cdi-upload-signing-key", kit.OPERATOR_NS)
    key = base64.b64decode(secret["data"]["private.pem"])
    token = uploadtoken.issue(key_pem=key, namespace=ns, name="kept", now=int(time.time()))
    image = images.get("qcow2")
    assert _post(ready_proxy, token, image.path.read_bytes()).status_code == 200
    assert kit.wait_dv(kube, ns, "kept", ("Succeeded", "Failed"),
                       timeout=TIMEOUT)["phase"] == "Succeeded"
    claim = kube.get(resources.PVCS, "kept", ns)
    assert compare(image.expected, kit.volume_path(kube, claim))
    prime = claim["metadata"]["annotations"].get(A + "storage.populator.pvcPrime") or \
        f"prime-{claim['metadata']['uid']}"
    pod = kube.get(resources.PODS, f"cdi-upload-{prime}", ns)
    [state] = pod["status"]["containerStatuses"]
    term = json.loads(state["state"]["terminated"]["message"])
    assert term["reason"] == "Completed"
    assert term["route"] == "scratch-convert", term
    assert "kept whole in scratch" in term["why"], term


def test_too_small_is_refused_and_the_datavolume_waits_for_another_upload(
        cluster: Cluster, kube: Client, ns: str, images: ImageFactory, ready_proxy: str,
        capsys: pytest.CaptureFixture[str]) -> None:
    """As upstream: the refused upload fails the command with the reason, not the
    DataVolume; it stays UploadReady and the next upload (a fitting image) succeeds."""
    image = images.oversized_qcow2(1 << 30)
    assert upload(cluster, "dv", "small", "--image-path", str(image.path), "--size", "64Mi",
                  "-n", ns) == 1
    err = capsys.readouterr().err
    assert "TooSmall" in err and "virtual size 1073741824" in err
    time.sleep(2)  # the controllers had their chance to see a failure
    status = kit.dv_status(kube, ns, "small")
    assert status["phase"] == "UploadReady", status
    fitting = images.get("qcow2")
    assert upload(cluster, "dv", "small", "--no-create", "--image-path", str(fitting.path),
                  "-n", ns) == 0
    assert kit.dv_status(kube, ns, "small")["phase"] == "Succeeded"
    claim = kube.get(resources.PVCS, "small", ns)
    assert compare(fitting.expected, kit.volume_path(kube, claim))
    wait_for(lambda: leftovers(kube, ns, keep=("small",)) == [], timeout=TIMEOUT,
             what="PVC' and the upload server removed")


def test_deletion_mid_upload_leaves_nothing(kube: Client, ns: str, images: ImageFactory,
                                            ready_proxy: str) -> None:
    ready_dv(kube, ns, "doomed")
    secret = kube.get(resources.SECRETS, "cdi-upload-signing-key", kit.OPERATOR_NS)
    key = base64.b64decode(secret["data"]["private.pem"])
    token = uploadtoken.issue(key_pem=key, namespace=ns, name="doomed", now=int(time.time()))
    data = images.get("raw").path.read_bytes()
    sent, checked = threading.Event(), threading.Event()

    def slow() -> Iterator[bytes]:
        # 0.5 s a chunk (32 s for the whole image) until the deletion's outcome has been
        # checked; the rest then goes at once, so the request ends as soon as it can
        for i in range(0, len(data), 256 * 1024):
            yield data[i:i + 256 * 1024]
            sent.set()
            checked.wait(0.5)

    outcome: list[Any] = []

    def go() -> None:
        try:
            outcome.append(requests.post(
                f"{ready_proxy}/v1beta1/upload", data=slow(), verify=PROXY_CA["path"],
                headers={"Authorization": f"Bearer {token}"}, timeout=120).status_code)
        except requests.RequestException as err:
            outcome.append(err)

    worker = threading.Thread(target=go)
    worker.start()
    assert sent.wait(60)
    time.sleep(1)
    kube.delete(kit.DVS, "doomed", ns)
    try:
        wait_for(lambda: leftovers(kube, ns) == [], timeout=TIMEOUT,
                 what=f"nothing left after deletion: {leftovers(kube, ns)}")
    finally:
        checked.set()
    worker.join(timeout=180)
    assert outcome and outcome[0] != 200, outcome


def test_cli_failures_exit_non_zero(cluster: Cluster, ns: str, tmp_path: Any,
                                    capsys: pytest.CaptureFixture[str]) -> None:
    assert upload(cluster, "dv", "x", "--image-path", str(tmp_path / "missing.img"),
                  "--size", "1Gi", "-n", ns) == 1
    assert "--image-path" in capsys.readouterr().err
    img = tmp_path / "a.img"
    img.write_bytes(b"\0" * 4096)
    assert upload(cluster, "dv", "x", "--image-path", str(img), "-n", ns) == 1
    assert "--size" in capsys.readouterr().err
    assert upload(cluster, "dv", "absent", "--image-path", str(img), "--no-create",
                  "-n", ns) == 1
    assert "not found" in capsys.readouterr().err
    # a WaitForFirstConsumer class (rootdisk up's default) without --force-bind: the
    # command watches the DataVolume, gives up at --timeout and says why
    started = time.monotonic()
    assert cli(["image-upload", "dv", "wffc", "--image-path", str(img), "--size", "64Mi",
                "-n", ns, "--kubeconfig", cluster.kubeconfig, "--timeout", "4"]) == 1
    err = capsys.readouterr().err
    assert "timed out waiting" in err and "use --force-bind" in err, err
    assert time.monotonic() - started < 60


INGRESSES = kubeclient.Resource("networking.k8s.io", "v1", "ingresses")


def test_an_ingress_to_the_proxy_sets_the_upload_proxy_url(kube: Client) -> None:
    """The operator watches Ingresses (its role lets it): one routing to cdi-uploadproxy
    in the CDI namespace sets CDIConfig status.uploadProxyURL; deleting it clears it."""
    def url() -> Any:
        config = kube.get(kit.CDICONFIGS, "config")
        return (config.get("status") or {}).get("uploadProxyURL")

    body = {"apiVersion": "networking.k8s.io/v1", "kind": "Ingress",
            "metadata": {"name": "uploads"},
            "spec": {"rules": [{"host": "uploads.example.test", "http": {"paths": [{
                "path": "/", "pathType": "Prefix", "backend": {"service": {
                    "name": "cdi-uploadproxy", "port": {"number": 443}}}}]}}]}}
    kube.create(INGRESSES, body, kit.OPERATOR_NS)
    try:
        wait_for(lambda: url() == "uploads.example.test", timeout=30,
                 what="uploadProxyURL from the Ingress")
    finally:
        kube.delete(INGRESSES, "uploads", kit.OPERATOR_NS)
    wait_for(lambda: url() is None, timeout=30, what="uploadProxyURL cleared")
