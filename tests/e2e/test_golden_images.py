"""Golden images that keep themselves fresh, on `rootdisk up`: a DataImportCron over a
registry image (TLS, Basic auth) imports it on creation and points its DataSource at it;
a new push is imported at the next poll (forced by writing nextCronTime in the past, as
the schedule would), the DataSource flips, importsToKeep deletes the oldest; a VM made
from the DataSource by sourceRef boots the new image; a deleted cron with
retentionPolicy None takes what it made."""

from __future__ import annotations

import base64
import datetime as dt
import json
import shutil
from pathlib import Path
from typing import Any

import pytest

import kubeclient
from cdi.importcron import dv_name
from kubeclient import Client, resources
from localcluster.cluster import Cluster
from tests.e2e import kit, vmkit
from tests.fixtures.guests import write_boot_sector_disk
from tests.fixtures.images import ImageFactory, compare
from tests.fixtures.registry import RegistryServer, push_disk
from tests.localcluster.clusterkit import needs_root, wait_for

pytestmark = [needs_root, pytest.mark.slow, pytest.mark.e2e]

CRONS = kubeclient.Resource("cdi.kubevirt.io", "v1beta1", "dataimportcrons")
DATASOURCES = kubeclient.Resource("cdi.kubevirt.io", "v1beta1", "datasources")
A = "cdi.kubevirt.io/storage.import."


@pytest.fixture(scope="module", autouse=True)
def vm_side(kube: Client) -> None:
    vmkit.wait_vm_side_ready(kube)


def _cron(registry: RegistryServer, **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "cdi.kubevirt.io/v1beta1", "kind": "DataImportCron",
            "metadata": {"name": "golden-cron"},
            "spec": {"schedule": "0 0 1 1 *",  # yearly: the test forces each poll
                     "managedDataSource": "golden",
                     "template": {"spec": {
                         "source": {"registry": {"url": registry.url("golden/disk", "latest"),
                                                 "secretRef": "pull",
                                                 "certConfigMap": "registry-ca"}},
                         "storage": {"resources": {"requests": {"storage": "64Mi"}},
                                     "storageClassName": "local-immediate"}}},
                     **spec}}


def _source_claim(kube: Client, ns: str) -> str | None:
    ds = kube.get_or_none(DATASOURCES, "golden", ns) or {}
    ready = next((c for c in (ds.get("status") or {}).get("conditions") or []
                  if c.get("type") == "Ready"), {})
    pvc = ((ds.get("spec") or {}).get("source") or {}).get("pvc") or {}
    return str(pvc.get("name")) if ready.get("status") == "True" and pvc else None


def _condition(kube: Client, ns: str, ctype: str) -> dict[str, Any]:
    cron = kube.get(CRONS, "golden-cron", ns)
    return next((c for c in (cron.get("status") or {}).get("conditions") or []
                 if c.get("type") == ctype), {})


@pytest.mark.timeout(900)
def test_a_cron_imports_each_new_digest_and_the_data_source_follows(
        cluster: Cluster, kube: Client, ns: str, registry_server: RegistryServer,
        tmp_path: Path) -> None:
    v1 = write_boot_sector_disk(tmp_path / "v1.img", marker="GOLDEN-IMAGE-V1")
    first = push_disk(registry_server, "golden/disk", "latest", v1, tmp_path / "w")
    creds = registry_server.credentials
    assert creds is not None
    kit.secret(kube, ns, "pull", {"accessKeyId": creds.username, "secretKey": creds.password})
    kube.create(resources.CONFIGMAPS, {
        "apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "registry-ca"},
        "data": {"ca.pem": Path(str(registry_server.verify)).read_text()}}, ns)
    kube.create(CRONS, _cron(registry_server, importsToKeep=1, retentionPolicy="None"), ns)

    # on creation: polled, imported, the DataSource made and pointed at the import
    first_name = dv_name("golden", first.digest)
    try:
        wait_for(lambda: _source_claim(kube, ns) == first_name, timeout=240,
                 what="the DataSource on the first import")
    except AssertionError:
        raise AssertionError(kit.diagnose(kube, ns)) from None
    # the cron's own record is written after the DataSource (as upstream's Update comes
    # after updateDataSource): wait for it
    cron = wait_for(lambda: (c := kube.get(CRONS, "golden-cron", ns)).get(
        "status", {}).get("lastImportedPVC") and c, timeout=30, what="lastImportedPVC")
    assert cron["metadata"]["annotations"][A + "sourceDesiredDigest"] == first.digest
    assert cron["status"]["lastImportedPVC"] == {"namespace": ns, "name": first_name}
    wait_for(lambda: _condition(kube, ns, "UpToDate").get("reason") == "UpToDate",
             timeout=30, what="UpToDate")
    dv = kube.get(kit.DVS, first_name, ns)
    assert dv["spec"]["source"]["registry"]["url"] == \
        f"docker://{registry_server.host}/golden/disk@{first.digest}"
    disk = Path(kit.volume_path(kube, kube.get(resources.PVCS, first_name, ns)))
    assert disk.read_bytes()[:512] == v1.read_bytes()[:512]

    # a new push, then the schedule's tick (nextCronTime in the past): the new digest
    v2 = write_boot_sector_disk(tmp_path / "v2.img", marker="GOLDEN-IMAGE-V2")
    second = push_disk(registry_server, "golden/disk", "latest", v2, tmp_path / "w")
    second_name = dv_name("golden", second.digest)
    past = (dt.datetime.now(dt.UTC) - dt.timedelta(minutes=1)).strftime("%Y-%m-%dT%H:%M:%SZ")
    kube.patch(CRONS, "golden-cron", {"metadata": {"annotations": {A + "nextCronTime": past}}},
               ns)
    try:
        wait_for(lambda: _source_claim(kube, ns) == second_name, timeout=240,
                 what="the DataSource on the second import")
        # importsToKeep: 1, the first import goes
        wait_for(lambda: kube.get_or_none(resources.PVCS, first_name, ns) is None, timeout=120,
                 what="the first import garbage-collected")
    except AssertionError:
        raise AssertionError(kit.diagnose(kube, ns)) from None
    assert kube.get_or_none(kit.DVS, first_name, ns) is None
    next_year = f"{dt.datetime.now(dt.UTC).year + 1}-01-01T00:00:00"
    wait_for(lambda: kube.get(CRONS, "golden-cron", ns)["metadata"]["annotations"][
        A + "nextCronTime"].startswith(next_year), timeout=30, what="the next poll time")

    # a VM from the DataSource by sourceRef boots the new image
    vm = vmkit.vm("fresh", "http://unused.invalid/x")
    vm["spec"]["dataVolumeTemplates"][0]["spec"] = {
        "sourceRef": {"kind": "DataSource", "name": "golden"},
        "storage": {"resources": {"requests": {"storage": "64Mi"}}}}
    kube.create(vmkit.VMS, vm, ns)
    try:
        vmkit.wait_printable(kube, ns, "fresh", "Running", timeout=300)
        wait_for(lambda: "GOLDEN-IMAGE-V2" in vmkit.cli(cluster, "console", "fresh", "-n", ns,
                                                        "--log").stdout,
                 timeout=120, what="the new image's marker on the VM's console")
    except AssertionError:
        raise AssertionError(vmkit.diagnose(kube, ns)) from None
    assert "GOLDEN-IMAGE-V1" not in vmkit.cli(cluster, "console", "fresh", "-n", ns,
                                              "--log").stdout
    kube.delete(vmkit.VMS, "fresh", ns)

    # retentionPolicy None: the cron's DataSource, DataVolumes and claims go with it
    kube.delete(CRONS, "golden-cron", ns)
    try:
        wait_for(lambda: kube.get_or_none(DATASOURCES, "golden", ns) is None
                 and kube.get_or_none(resources.PVCS, second_name, ns) is None, timeout=120,
                 what="what the cron made deleted with it")
    except AssertionError:
        raise AssertionError(kit.diagnose(kube, ns)) from None


def test_a_cron_refused_and_a_poll_that_fails(kube: Client, ns: str,
                                              registry_server: RegistryServer) -> None:
    with pytest.raises(kubeclient.KubeError) as refused:  # the Secret it names is missing
        kube.create(CRONS, _cron(registry_server), ns)
    assert refused.value.status == 422 and "Secret 'pull' not found" in str(refused.value)
    # wrong credentials: a Warning Event names the failure, nothing is imported
    kit.secret(kube, ns, "pull", {"accessKeyId": "rootdisk", "secretKey": "wrong-password"})
    kube.create(resources.CONFIGMAPS, {
        "apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "registry-ca"},
        "data": {"ca.pem": Path(str(registry_server.verify)).read_text()}}, ns)
    with pytest.raises(kubeclient.KubeError) as refused:
        kube.create(CRONS, _cron(registry_server, schedule="61 * * * *"), ns)
    assert refused.value.status == 422 and "Illegal cron schedule" in str(refused.value)
    kube.create(CRONS, _cron(registry_server), ns)

    def failed() -> list[dict[str, Any]]:
        return [e for e in kube.list(resources.EVENTS, ns)
                if e.get("reason") == "DigestPollFailed"]
    events = wait_for(failed, timeout=120, what="the DigestPollFailed Event")
    assert "invalid username/password" in events[0]["message"]
    assert "wrong-password" not in str(kube.list(resources.EVENTS, ns))
    wait_for(lambda: _condition(kube, ns, "UpToDate").get("reason") == "NoDigest",
             timeout=30, what="UpToDate NoDigest")
    assert not [d for d in kube.list(kit.DVS, ns)]


PROFILES = kubeclient.Resource("cdi.kubevirt.io", "v1beta1", "storageprofiles", namespaced=False)
SNAPSHOTS = kubeclient.Resource("snapshot.storage.k8s.io", "v1", "volumesnapshots")


@pytest.mark.timeout(600)
def test_snapshot_format_keeps_the_golden_image_as_a_snapshot(
        kube: Client, ns: str, registry_server: RegistryServer, tmp_path: Path) -> None:
    """StorageProfile ``dataImportCronSourceFormat: snapshot``: the import is snapshotted,
    its claim dropped, the DataSource names the snapshot, and a DataVolume by sourceRef
    restores it."""
    image = write_boot_sector_disk(tmp_path / "s.img", marker="GOLDEN-SNAPSHOT")
    pushed = push_disk(registry_server, "golden/disk", "latest", image, tmp_path / "w")
    name = dv_name("golden", pushed.digest)
    creds = registry_server.credentials
    assert creds is not None
    kit.secret(kube, ns, "pull", {"accessKeyId": creds.username, "secretKey": creds.password})
    kube.create(resources.CONFIGMAPS, {
        "apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "registry-ca"},
        "data": {"ca.pem": Path(str(registry_server.verify)).read_text()}}, ns)
    kube.patch(PROFILES, "local-immediate", {"spec": {"dataImportCronSourceFormat": "snapshot"}})
    try:
        wait_for(lambda: (kube.get(PROFILES, "local-immediate").get("status") or {}).get(
            "dataImportCronSourceFormat") == "snapshot", timeout=60, what="the profile's status")
        kube.create(CRONS, _cron(registry_server), ns)

        def snapshot_source() -> bool:
            ds = kube.get_or_none(DATASOURCES, "golden", ns) or {}
            ready = any(c.get("type") == "Ready" and c.get("status") == "True"
                        for c in (ds.get("status") or {}).get("conditions") or [])
            return ready and ((ds.get("spec") or {}).get("source") or {}).get(
                "snapshot") == {"namespace": ns, "name": name}
        try:
            wait_for(snapshot_source, timeout=240, what="the DataSource on the snapshot")
            wait_for(lambda: kube.get_or_none(resources.PVCS, name, ns) is None, timeout=120,
                     what="the import's claim dropped once the snapshot is ready")
        except AssertionError:
            raise AssertionError(kit.diagnose(kube, ns)) from None
        wait_for(lambda: _condition(kube, ns, "UpToDate").get("reason") == "UpToDate",
                 timeout=30, what="UpToDate")
        assert kube.get(CRONS, "golden-cron", ns)["status"]["sourceFormat"] == "snapshot"
        assert kube.get(SNAPSHOTS, name, ns)["metadata"]["labels"][
            "cdi.kubevirt.io/dataImportCron"] == "golden-cron"
    finally:
        kube.patch(PROFILES, "local-immediate", {"spec": {"dataImportCronSourceFormat": None}})
    kube.create(kit.DVS, {"apiVersion": "cdi.kubevirt.io/v1beta1", "kind": "DataVolume",
                          "metadata": {"name": "from-golden"},
                          "spec": {"sourceRef": {"kind": "DataSource", "name": "golden"},
                                   "storage": {"resources": {"requests": {"storage": "64Mi"}},
                                               "storageClassName": "local-immediate"}}}, ns)
    status = kit.wait_dv(kube, ns, "from-golden", ("Succeeded", "Failed"))
    assert status["phase"] == "Succeeded", status
    disk = Path(kit.volume_path(kube, kube.get(resources.PVCS, "from-golden", ns)))
    assert disk.read_bytes()[:512] == image.read_bytes()[:512]


def _blob_gets(registry: RegistryServer, repository: str) -> int:
    """Blob downloads the registry logged for ``repository`` (its access log)."""
    text = registry.log_path.read_text(errors="replace")
    return sum(1 for line in text.splitlines()
               if f"GET /v2/{repository}/blobs/" in line and "HEAD" not in line)


def _container_disk_vm(name: str, image: str) -> dict[str, Any]:
    return vmkit.root_vm(name, {"containerDisk": {"image": image, "imagePullSecret": "pull"}})


@pytest.mark.timeout(600)
def test_a_vm_boots_from_a_container_disk_pulled_once(
        cluster: Cluster, kube: Client, ns: str, registry_server: RegistryServer,
        tmp_path: Path) -> None:
    """A containerDisk: the node pulls the image once (an image volume, as upstream's
    ImageVolume feature gate renders it), the launcher boots its /disk file under a
    throw-away overlay; a second VM of the same image pulls nothing."""
    disk = write_boot_sector_disk(tmp_path / "cd.img", marker="CONTAINER-DISK-BOOTED")
    push_disk(registry_server, "golden/cdisk", "v1", disk, tmp_path / "w")
    certs = Path(cluster.data_dir, "certs.d", registry_server.host)
    certs.mkdir(parents=True, exist_ok=True)
    shutil.copy(str(registry_server.verify), certs / "ca.crt")
    creds = registry_server.credentials
    assert creds is not None
    auth = base64.b64encode(f"{creds.username}:{creds.password}".encode()).decode()
    kube.create(resources.SECRETS, {
        "apiVersion": "v1", "kind": "Secret", "metadata": {"name": "pull"},
        "type": "kubernetes.io/dockerconfigjson",
        "data": {".dockerconfigjson": base64.b64encode(json.dumps(
            {"auths": {registry_server.host: {"auth": auth}}}).encode()).decode()}}, ns)
    image = f"{registry_server.host}/golden/cdisk:v1"
    before = _blob_gets(registry_server, "golden/cdisk")
    for name in ("cd-one", "cd-two"):
        kube.create(vmkit.VMS, _container_disk_vm(name, image), ns)
        try:
            vmkit.wait_printable(kube, ns, name, "Running", timeout=300)
            wait_for(lambda n=name: "CONTAINER-DISK-BOOTED" in vmkit.cli(  # type: ignore[misc]
                cluster, "console", n, "-n", ns, "--log").stdout,
                timeout=120, what=f"{name} booted from the container disk")
        except AssertionError:
            events = [(e.get("reason"), e.get("message"))
                      for e in kube.list(resources.EVENTS, ns)]
            pods = [(p["metadata"]["name"], p.get("status"))
                    for p in kube.list(resources.PODS, ns)]
            pods += [(v["metadata"]["name"], v.get("status"))  # type: ignore[misc]
                     for v in kube.list(vmkit.VMIS, ns)]
            raise AssertionError(f"{vmkit.diagnose(kube, ns)}\nEVENTS {events}\n"
                                 f"PODS {pods}") from None
        if name == "cd-one":
            pulled = _blob_gets(registry_server, "golden/cdisk")
            assert pulled > before  # the config and the layer
    assert _blob_gets(registry_server, "golden/cdisk") == pulled  # cd-two: from the store
    assert registry_server.password not in str(kube.list(resources.PODS, ns))


def test_a_container_disk_that_cannot_be_pulled_says_why(
        kube: Client, ns: str, registry_server: RegistryServer) -> None:
    kube.create(vmkit.VMS, _container_disk_vm(
        "cd-missing", f"{registry_server.host}/golden/none:v1"), ns)

    def waiting() -> str | None:
        for pod in kube.list(resources.PODS, ns):
            for st in (pod.get("status") or {}).get("containerStatuses") or []:
                reason = ((st.get("state") or {}).get("waiting") or {}).get("reason")
                if reason:
                    return str(reason)
            for cond in (pod.get("status") or {}).get("conditions") or []:
                if "golden/none" in str(cond.get("message") or ""):
                    return str(cond["message"])
        return None
    wait_for(waiting, timeout=120, what="the launcher pod waiting on the image")
    assert vmkit.printable(kube, ns, "cd-missing") != "Running"


def test_pull_method_node_imports_from_the_image_the_node_mounted(
        cluster: Cluster, kube: Client, ns: str, tmp_path: Path,
        images: ImageFactory) -> None:
    """``pullMethod: node``: the node's kubelet pulls the image (its CA from the node's
    certs.d), the importer reads the qcow2 under /disk from the mount and converts it."""
    with RegistryServer(tmp_path / "node-registry", tls=True, auth=False) as registry:
        push_disk(registry, "golden/node", "v1", images.get("qcow2").path, tmp_path / "w",
                  name="disk.qcow2")
        certs = Path(cluster.data_dir, "certs.d", registry.host)
        certs.mkdir(parents=True, exist_ok=True)
        shutil.copy(str(registry.verify), certs / "ca.crt")
        kube.create(kit.DVS, kit.datavolume(
            "by-node", {"registry": {"url": registry.url("golden/node", "v1"),
                                     "pullMethod": "node"}},
            storage={"storageClassName": "local-immediate"}), ns)
        status = kit.wait_dv(kube, ns, "by-node", ("Succeeded", "Failed"))
    assert status["phase"] == "Succeeded", str(status.get("conditions"))
    assert compare(images.get("raw").path,
                   kit.volume_path(kube, kube.get(resources.PVCS, "by-node", ns)))
