"""An upload server's certificate is renewed as upstream's: the server pod ends at its
deadline (half its certificate's lifetime; shortened here to seconds through the
operator's ``UPLOAD_SERVER_CERT_LIFETIME``), the populator makes a new pod with a fresh
certificate, and the volume is never taken for uploaded meanwhile; the new server then
takes the upload."""

from __future__ import annotations

import base64
import datetime as dt
import ssl
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

from kubeclient import Client, resources
from kubeclient.resources import UPLOAD_SOURCES as VUS
from localcluster.cluster import Cluster
from pki import certs, rotation
from tests.fixtures.images import ImageFactory, compare
from tests.fixtures.tls import signed_by
from tests.localcluster.clusterkit import needs_root, running, wait_for, wait_phase
from tests.populators import kit

pytestmark = [needs_root, pytest.mark.slow, pytest.mark.e2e]

A = "cdi.kubevirt.io/"
LIFETIME = 24  # seconds: the first server ends after 12


@pytest.fixture
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with running(str(tmp_path_factory.mktemp("renew"))) as c:
        assert c.kube is not None
        kit.install_crds(c.kube)
        crd = kit.project_crds()["volumeuploadsources.cdi.kubevirt.io"]
        c.kube.create(kit.CRDS, crd)
        wait_for(lambda: kit._served(c.kube, VUS), what="volumeuploadsources served")  # type: ignore[arg-type]
        yield c


def upload_target(kube: Client, ns: str) -> str:
    """A VolumeUploadSource ``up`` and the claim ``disk`` it fills; returns PVC''s name."""
    kube.create(VUS, {"apiVersion": "cdi.kubevirt.io/v1beta1", "kind": "VolumeUploadSource",
                      "metadata": {"name": "up"}, "spec": {"contentType": "kubevirt"}}, ns)
    target = kube.create(resources.PVCS, {
        "apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "disk"},
        "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": "local-immediate",
                 "resources": {"requests": {"storage": "64Mi"}},
                 "dataSourceRef": {"apiGroup": "cdi.kubevirt.io",
                                   "kind": "VolumeUploadSource", "name": "up"}}}, ns)
    return f"prime-{target['metadata']['uid']}"


def server_state(kube: Client, ns: str, prime: str) -> tuple[str, bytes] | None:
    """(the server pod's UID, its certificate) once the server is ready for uploads."""
    target = kit.annotations(kube, ns, "disk")
    pod = kube.get_or_none(resources.PODS, f"cdi-upload-{prime}", ns)
    secret = kube.get_or_none(resources.SECRETS, f"cdi-upload-{prime}", ns)
    if target.get(A + "storage.pod.ready") != "true" or pod is None or secret is None:
        return None
    return pod["metadata"]["uid"], base64.b64decode(secret["data"]["tls.crt"])


def test_the_server_is_replaced_at_its_deadline_with_a_fresh_certificate(
        cluster: Cluster, images: ImageFactory) -> None:
    kube: Client = cluster.kube  # type: ignore[assignment]
    ns = kit.namespace(kube)
    prime = upload_target(kube, ns)
    phases: list[str] = []

    def watched_state() -> tuple[str, bytes] | None:
        phases.append(kit.annotations(kube, ns, "disk").get(A + "storage.pod.phase", ""))
        return server_state(kube, ns, prime)

    with kit.operator(cluster.kubeconfig, UPLOAD_SERVER_CERT_LIFETIME=str(LIFETIME),
                      POD_NAMESPACE=ns):
        first_uid, first_cert = wait_for(watched_state, timeout=120, what="the first server")
        pod = kube.get(resources.PODS, f"cdi-upload-{prime}", ns)
        env = {e["name"]: e.get("value") for e in pod["spec"]["containers"][0]["env"]}
        deadline = dt.datetime.fromisoformat(env["DEADLINE"].replace("Z", "+00:00"))
        left = certs.not_after(first_cert) - deadline
        assert dt.timedelta(seconds=LIFETIME / 2 - 2) <= left <= dt.timedelta(
            seconds=LIFETIME / 2 + 2)  # the deadline: half the certificate's lifetime

        def renewed() -> tuple[str, bytes] | None:
            found = watched_state()
            return found if found is not None and found[0] != first_uid else None

        second_uid, second_cert = wait_for(renewed, timeout=120, what="a renewed server")
        assert second_cert != first_cert
        assert certs.not_after(second_cert) > certs.not_after(first_cert)
        assert "Succeeded" not in phases  # never taken for an upload that happened
        assert kube.get(resources.PVCS, "disk", ns)["status"]["phase"] == "Pending"

        # the new server takes an upload from the proxy's client certificate
        image = images.get("qcow2")
        server = kube.get(resources.PODS, f"cdi-upload-{prime}", ns)
        assert server["metadata"]["uid"] == second_uid
        answer = upload(kube, ns, server, image.path.read_bytes(), prime)
        assert answer.status_code == 200, answer.text
        claim = wait_phase(kube, resources.PVCS, "disk", "Bound", ns=ns, timeout=120)
    pv = kube.get(resources.PVS, claim["spec"]["volumeName"])
    assert compare(image.expected, Path(pv["spec"]["local"]["path"]) / "disk.img")


def upload(kube: Client, ns: str, server: dict[str, Any], data: bytes,
           prime: str) -> requests.Response:
    client_secret = kube.get(resources.SECRETS, "cdi-uploadproxy-client", ns)
    files = {k: base64.b64decode(v) for k, v in client_secret["data"].items()}
    with tempfile.TemporaryDirectory() as tmp:
        cert, key = certs.write_pair(tmp, files["tls.crt"], files["tls.key"])
        ca = Path(tmp) / "ca.crt"
        ca.write_bytes(files["ca.crt"])
        session = requests.Session()
        # the server's certificate names its Service; the pod is reached at its IP
        adapter = _NamedAdapter(f"cdi-upload-{prime}.{ns}.svc")
        session.mount("https://", adapter)
        return session.post(f"https://{server['status']['podIP']}:8443/v1beta1/upload",
                            data=data, cert=(cert, key), verify=str(ca), timeout=120)


class _NamedAdapter(requests.adapters.HTTPAdapter):
    """Checks the server's certificate for ``name`` whatever address is dialled."""

    def __init__(self, name: str) -> None:
        self.name = name
        super().__init__()

    def init_poolmanager(self, *args: Any, **kwargs: Any) -> None:
        kwargs["server_hostname"] = self.name
        kwargs["ssl_context"] = ssl.create_default_context()
        super().init_poolmanager(*args, **kwargs)


def secret_files(kube: Client, ns: str, name: str) -> dict[str, bytes]:
    found = kube.get_or_none(resources.SECRETS, name, ns)
    return {} if found is None else {k: base64.b64decode(v) for k, v in found["data"].items()}


def test_the_upload_ca_rotates_and_the_proxy_client_certificate_follows(
        cluster: Cluster, images: ImageFactory) -> None:
    """Upstream's CA rotation shortened to seconds (CA 48 s, certificates 24 s): the next
    CA, trusted from the start, takes over at half the CA's life; the proxy's client
    certificate is issued again by it, with the new bundle; a server made after the
    rotation takes an upload from that certificate."""
    kube: Client = cluster.kube  # type: ignore[assignment]
    ns = kit.namespace(kube)
    prime = upload_target(kube, ns)
    with kit.operator(cluster.kubeconfig, UPLOAD_SERVER_CERT_LIFETIME="24",
                      UPLOAD_CA_CERT_LIFETIME="48", POD_NAMESPACE=ns):
        wait_for(lambda: server_state(kube, ns, prime), timeout=120, what="the first server")
        ca0 = secret_files(kube, ns, "cdi-uploadserver-ca")
        client0 = secret_files(kube, ns, "cdi-uploadproxy-client")
        assert len(rotation.split_bundle(ca0["bundle.crt"])) == 2
        assert client0["ca.crt"] == ca0["bundle.crt"]
        assert signed_by(client0["tls.crt"], ca0["ca.crt"])
        assert certs.not_after(client0["tls.crt"]) - certs.not_after(ca0["ca.crt"]) <= \
            dt.timedelta(seconds=-20)  # the client certificate ends well before its CA

        def rotated() -> dict[str, bytes] | None:
            now = secret_files(kube, ns, "cdi-uploadserver-ca")
            return now if now.get("ca.crt") not in (None, ca0["ca.crt"]) else None

        ca1 = wait_for(rotated, timeout=120, what="the upload CA's rotation")
        assert ca1["ca.crt"] == ca0["next.crt"]  # the successor everyone trusted already
        assert set(rotation.split_bundle(ca0["bundle.crt"])) <= set(
            rotation.split_bundle(ca1["bundle.crt"]))
        # the populator writes the CA, then the client certificate it issues from it: two
        # writes, which a read in between sees apart. The client certificate (24 s) may
        # also have been renewed by the old CA before the rotation: that one is not it.
        def followed() -> dict[str, bytes] | None:
            now = secret_files(kube, ns, "cdi-uploadproxy-client")
            return now if "tls.crt" in now and signed_by(now["tls.crt"], ca1["ca.crt"]) \
                else None

        client1 = wait_for(followed, timeout=20,
                           what="the client certificate issued again by the new CA")
        assert client1["ca.crt"] == ca1["bundle.crt"]

        def new_server() -> dict[str, Any] | None:
            if server_state(kube, ns, prime) is None:
                return None
            files = secret_files(kube, ns, f"cdi-upload-{prime}")
            if files.get("ca.crt") != ca1["bundle.crt"]:
                return None
            return kube.get(resources.PODS, f"cdi-upload-{prime}", ns)  # type: ignore[no-any-return]

        server = wait_for(new_server, timeout=120, what="a server made after the rotation")
        assert signed_by(secret_files(kube, ns, f"cdi-upload-{prime}")["tls.crt"],
                         ca1["ca.crt"])
        image = images.get("qcow2")
        answer = upload(kube, ns, server, image.path.read_bytes(), prime)
        assert answer.status_code == 200, answer.text
        claim = wait_phase(kube, resources.PVCS, "disk", "Bound", ns=ns, timeout=120)
    pv = kube.get(resources.PVS, claim["spec"]["volumeName"])
    assert compare(image.expected, Path(pv["spec"]["local"]["path"]) / "disk.img")
