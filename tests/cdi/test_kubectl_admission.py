"""kubectl 1.32 against CDI's admission and aggregated API, on a real localcluster API
server: the DataVolume webhooks (``rootdisk.operator.server`` serving ``cdi.admission``,
registered from manifests/deploy/cdi-operator.yaml) refuse a bad DataVolume and kubectl
prints why, naming the field; ``kubectl create -f`` of an UploadTokenRequest (the real
cdi-apiserver, ``cdi.uploadapi``, behind its APIService) works with validation on, and a
kind that group does not have gives kubectl's "no matches for kind"."""

from __future__ import annotations

import asyncio
import base64
import json
import ssl
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from aiohttp import web

from apiservice import frontproxy
from cdi import kube as cdi_kube
from cdi import uploadapi
from kubeclient import Client
from kubeclient.resources import CONFIGMAPS, CRDS, ENDPOINTS, NAMESPACES, SERVICES
from kubeclient.resources import MUTATING_WEBHOOKS as MUTATING
from kubeclient.resources import VALIDATING_WEBHOOKS as VALIDATING
from localcluster.apiserver.threaded import ServerThread
from localcluster.apiserver.tls import ensure_tls
from pki import certs
from rootdisk.operator import registry
from rootdisk.operator.server import Server
from tests.fixtures.appthread import AppThread
from tests.fixtures.ports import free_port
from tests.localcluster.apiserver.kubectl_tool import Run, needs_kubectl, runner
from tests.vm.conftest import kube_for, wait_served

pytestmark = needs_kubectl
ROOT = Path(__file__).resolve().parents[2]
NS = "rootdisk"


def _service(c: Client, name: str, port: int) -> None:
    """A Service ``name`` in NS whose Endpoints point at 127.0.0.1:``port``."""
    meta = {"name": name, "namespace": NS}
    c.create(SERVICES, {"apiVersion": "v1", "kind": "Service", "metadata": meta,
                        "spec": {"ports": [{"name": "https", "port": 443,
                                            "targetPort": port}]}})
    c.create(ENDPOINTS, {"apiVersion": "v1", "kind": "Endpoints", "metadata": meta,
                         "subsets": [{"addresses": [{"ip": "127.0.0.1"}],
                                      "ports": [{"name": "https", "port": port}]}]})


def _manifests(name: str) -> list[dict[str, Any]]:
    return list(yaml.safe_load_all((ROOT / "manifests" / "deploy" / name).read_text()))


def _webhooks(c: Client, tmp: Path) -> Server:
    """The operator's webhook server, as ``rootdisk.operator.main`` wires it, behind the
    Service and webhook configurations of the manifests."""
    tls = ensure_tls(tmp / "webhook-pki", dns_names=(f"rootdisk-cdi-webhook.{NS}.svc",))
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(tls.server_cert, tls.server_key)
    port = free_port()
    server = Server(host="127.0.0.1", health_port=free_port(), webhook_port=port,
                    webhooks=registry.webhooks(registry.resolve(["cdi"])),
                    exists=lambda kind, name, ns: cdi_kube.exists(c, kind, name, ns),
                    tls=context)
    server.start()
    _service(c, "rootdisk-cdi-webhook", port)
    bundle = base64.b64encode(tls.ca_cert.read_bytes()).decode()
    for doc in _manifests("cdi-operator.yaml"):
        if doc["kind"] in ("ValidatingWebhookConfiguration", "MutatingWebhookConfiguration"):
            for hook in doc["webhooks"]:
                hook["clientConfig"]["caBundle"] = bundle
            c.create(VALIDATING if doc["kind"].startswith("Validating") else MUTATING, doc)
    return server


def _upload_api(c: Client, tmp: Path) -> AppThread:
    """cdi-apiserver as ``python -m cdi.uploadapi`` runs it, behind its APIService."""
    apiservice = next(d for d in _manifests("cdi-upload.yaml") if d["kind"] == "APIService")
    c.create(uploadapi.APISERVICES, apiservice)
    key = uploadapi.ensure_signing_key(c, NS)

    async def build() -> tuple[web.Application, ssl.SSLContext]:
        issued = await asyncio.to_thread(uploadapi.issue_serving, c, NS)
        cm = c.get_or_none(CONFIGMAPS, frontproxy.CONFIGMAP_NAME, frontproxy.CONFIGMAP_NAMESPACE)
        assert cm is not None
        proxy = frontproxy.FrontProxyConfig.from_configmap_data(cm.get("data") or {})
        directory = tmp / "cdi-api-tls"
        directory.mkdir(mode=0o700)
        cert, keyfile = certs.write_pair(str(directory), issued.pair.cert_pem,
                                         issued.pair.key_pem)
        try:
            ctx = frontproxy.server_ssl_context(proxy, cert_file=cert, key_file=keyfile)
        finally:
            Path(cert).unlink()
            Path(keyfile).unlink()
        return uploadapi.TokenAPI(c, proxy, key).app(), ctx

    thread = AppThread(build, name="cdi-apiserver", startup_timeout=30)
    thread.start()
    _service(c, uploadapi.SERVICE, thread.port)
    return thread


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Any, Client]]:
    tmp = tmp_path_factory.mktemp("cdi-kubectl")
    thread = ServerThread(tmp / "api", aggregation_check_interval=0.3)
    server = thread.start()
    c = Client(kube_for(server).configuration)
    hooks: Server | None = None
    upload: AppThread | None = None
    try:
        c.create(CRDS, yaml.safe_load((ROOT / "manifests/crds/datavolumes.yaml").read_text()))
        wait_served(kube_for(server), "/apis/cdi.kubevirt.io/v1beta1/datavolumes")
        c.create(NAMESPACES, {"apiVersion": "v1", "kind": "Namespace",
                              "metadata": {"name": NS}})
        hooks = _webhooks(c, tmp)
        upload = _upload_api(c, tmp)
        wait_served(kube_for(server), uploadapi.BASE)
        yield server, c
    finally:
        if upload is not None:
            upload.stop()
        if hooks is not None:
            hooks.stop()
        c.close()
        thread.stop()


@pytest.fixture
def kubectl(cluster: tuple[Any, Client], tmp_path: Path) -> Run:
    return runner(cluster[0].kubeconfig_path, tmp_path)


def _dv(name: str, source: dict[str, Any]) -> str:
    return yaml.safe_dump({
        "apiVersion": "cdi.kubevirt.io/v1beta1", "kind": "DataVolume",
        "metadata": {"name": name, "namespace": NS},
        "spec": {"source": source,
                 "storage": {"resources": {"requests": {"storage": "1Gi"}}}}})


@pytest.mark.parametrize(("source", "why"), [
    ({"http": {"url": "ftp://example.com/disk.img"}},
     "spec.source.HTTP.url: spec.source Invalid source URL scheme: ftp://example.com/disk.img"),
    ({"http": {"url": "https://example.com/d.img"}, "blank": {}},
     "spec.source: Multiple Data volume sources"),
    ({"http": {"url": "https://example.com/d.img", "secretRef": "absent"}},
     "spec.source.http.secretRef: Secret 'absent' not found"),
])
def test_a_refused_datavolume_prints_the_webhooks_cause(kubectl: Run, tmp_path: Path,
                                                        source: dict[str, Any],
                                                        why: str) -> None:
    manifest = tmp_path / "dv.yaml"
    manifest.write_text(_dv("refused", source))
    proc = kubectl("create", "-f", str(manifest))
    assert proc.returncode != 0
    # CDI's refusal has no reason: kubectl prints its message, each cause after a space
    assert (f'Error from server: error when creating "{manifest}": admission webhook '
            f'"datavolume-validate.cdi.kubevirt.io" denied the request:  {why}') \
        in proc.stderr, proc.stderr
    assert kubectl("get", "datavolume", "refused", "-n", NS).returncode != 0


def test_an_accepted_datavolume_is_created(kubectl: Run, tmp_path: Path) -> None:
    manifest = tmp_path / "dv.yaml"
    manifest.write_text(_dv("accepted", {"http": {"url": "https://example.com/d.img"}}))
    proc = kubectl("create", "-f", str(manifest))
    assert proc.returncode == 0, proc.stderr
    assert "datavolume.cdi.kubevirt.io/accepted created" in proc.stdout


def test_an_upload_token_request_is_created_with_validation_on(kubectl: Run,
                                                               tmp_path: Path) -> None:
    manifest = tmp_path / "utr.yaml"
    manifest.write_text(yaml.safe_dump({
        "apiVersion": "upload.cdi.kubevirt.io/v1beta1", "kind": "UploadTokenRequest",
        "metadata": {"name": "t", "namespace": NS}, "spec": {"pvcName": "disk"}}))
    proc = kubectl("create", "-f", str(manifest), "--validate=strict", "-o", "json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["status"]["token"]


def test_an_unknown_kind_of_an_aggregated_group_is_no_match(kubectl: Run,
                                                           tmp_path: Path) -> None:
    manifest = tmp_path / "nope.yaml"
    manifest.write_text(yaml.safe_dump({
        "apiVersion": "upload.cdi.kubevirt.io/v1beta1", "kind": "DownloadTokenRequest",
        "metadata": {"name": "t", "namespace": NS}, "spec": {"pvcName": "disk"}}))
    proc = kubectl("create", "-f", str(manifest))
    assert proc.returncode != 0
    assert 'no matches for kind "DownloadTokenRequest" in version ' \
           '"upload.cdi.kubevirt.io/v1beta1"' in proc.stderr, proc.stderr
    assert "openapi" not in proc.stderr.lower()


def test_the_openapi_documents_describe_the_aggregated_group(cluster: tuple[Any, Client],
                                                            kubectl: Run) -> None:
    c = cluster[1]
    gv = f"apis/{uploadapi.GROUP}/{uploadapi.VERSION}"
    index = c.request("GET", "/openapi/v3")["paths"]
    assert gv in index
    doc = c.request("GET", index[gv]["serverRelativeURL"])
    post = doc["paths"][f"/{gv}/namespaces/{{namespace}}/uploadtokenrequests"]["post"]
    assert post["x-kubernetes-group-version-kind"] == {
        "group": uploadapi.GROUP, "version": uploadapi.VERSION, "kind": "UploadTokenRequest"}
    v2 = c.request("GET", "/openapi/v2")
    assert f"/{gv}/namespaces/{{namespace}}/uploadtokenrequests" in v2["paths"]
    proc = kubectl("explain", "uploadtokenrequests")
    assert proc.returncode == 0, proc.stderr
    assert "KIND:       UploadTokenRequest" in proc.stdout
    proc = kubectl("explain", "uploadtokenrequests", "--output=plaintext-openapiv2")
    assert proc.returncode == 0, proc.stderr
    assert "UploadTokenRequest" in proc.stdout
