"""Clone DataVolumes on `rootdisk up` (the operator as a pod from manifests/): a golden
image imported once, then cloned by csi-clone (reflink) and by the host-assisted copy,
within and across namespaces, with the size rules, the authorisation check, a source in
use, DataSources, deletion mid-clone, and many clones at once."""

from __future__ import annotations

import contextlib
import json
import os
import time
import uuid
from collections.abc import Iterator
from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest

import kubeclient
from kubeclient import Client, KubeError, resources
from sizes import required_space, usable_space
from tests.e2e import kit, vmkit
from tests.fixtures.httpserver import HttpServer
from tests.fixtures.images import ImageFactory, allocated_bytes, compare
from tests.localcluster.clusterkit import event_reasons, needs_root, wait_for, wait_reasons

pytestmark = [needs_root, pytest.mark.slow, pytest.mark.e2e, pytest.mark.timeout(1200)]

MiB = 2**20
DATASOURCES = kubeclient.Resource("cdi.kubevirt.io", "v1beta1", "datasources")
VCS = kubeclient.Resource("cdi.kubevirt.io", "v1beta1", "volumeclonesources")
ROLES = kubeclient.Resource("rbac.authorization.k8s.io", "v1", "roles")
ROLEBINDINGS = kubeclient.Resource("rbac.authorization.k8s.io", "v1", "rolebindings")
VOLUMESNAPSHOTS = kubeclient.Resource("snapshot.storage.k8s.io", "v1", "volumesnapshots")
VOLUMESNAPSHOTCONTENTS = kubeclient.Resource("snapshot.storage.k8s.io", "v1",
                                         "volumesnapshotcontents", namespaced=False)
A = "cdi.kubevirt.io/"
TIMEOUT = 240
PROGRESS = "storage.populator.progress"


@pytest.fixture(scope="module")
def golden(kube: Client, images: ImageFactory, tmp_path_factory: pytest.TempPathFactory,
           ) -> Iterator[tuple[str, Path]]:
    """Namespace and reference image of a golden PVC ``golden`` (64Mi on local-reflink,
    a 16 MiB raw image inside)."""
    root = tmp_path_factory.mktemp("www")
    ns = kit.namespace(kube, "golden")
    with HttpServer(root) as server:
        url = server.publish(images.get("raw").path, "golden.img")
        kube.create(kit.DVS, kit.datavolume("golden", {"http": {"url": url}},
                                            storage={"storageClassName": "local-reflink"}), ns)
        status = kit.wait_dv(kube, ns, "golden", ("Succeeded", "Failed"), timeout=TIMEOUT)
    assert status["phase"] == "Succeeded", status
    yield ns, images.get("raw").path


def clone_dv(name: str, src_ns: str, *, src: str = "golden", size: str | None = None,
             storage: dict[str, Any] | None = None,
             annotations: dict[str, str] | None = None) -> dict[str, Any]:
    st: dict[str, Any] = dict(storage or {})
    if size is not None:
        st["resources"] = {"requests": {"storage": size}}
    return {"apiVersion": "cdi.kubevirt.io/v1beta1", "kind": "DataVolume",
            "metadata": {"name": name, "annotations": annotations or {}},
            "spec": {"source": {"pvc": {"namespace": src_ns, "name": src}}, "storage": st}}


def claim_of(kube: Client, ns: str, name: str) -> dict[str, Any]:
    return kube.get(resources.PVCS, name, ns)


def create_as(kube: Client, user: str, res: kubeclient.Resource, obj: dict[str, Any],
              ns: str) -> dict[str, Any]:
    """Create ``obj`` impersonating ``user`` (kubectl --as)."""
    headers = {"Accept": "application/json", "Content-Type": "application/json",
               "Impersonate-User": user}
    resp = kube.api.call_api(res.path(ns), "POST", header_params=headers, body=obj,
                             auth_settings=["BearerToken"], _preload_content=False,
                             _request_timeout=30)
    raw = resp[0].data if isinstance(resp, tuple) else resp.data
    return dict(json.loads(raw))


def grant(kube: Client, ns: str, user: str, rules: list[dict[str, Any]]) -> None:
    name = f"r-{uuid.uuid4().hex[:6]}"
    kube.create(ROLES, {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
                        "metadata": {"name": name}, "rules": rules}, ns)
    kube.create(ROLEBINDINGS, {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
        "metadata": {"name": name},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User",
                      "name": user}]}, ns)


DV_RULES = [{"apiGroups": ["cdi.kubevirt.io"], "resources": ["datavolumes"],
             "verbs": ["create", "get", "list"]}]



# -- csi-clone -----------------------------------------------------------------------------


def test_same_namespace_csi_clone_without_size(kube: Client, golden: tuple[str, Path]) -> None:
    src_ns, reference = golden
    dv = kube.create(kit.DVS, clone_dv("copy1", src_ns,
                                       storage={"storageClassName": "local-reflink"}), src_ns)
    status = kit.wait_dv(kube, src_ns, "copy1", ("Succeeded", "Failed"), timeout=TIMEOUT)
    assert status["phase"] == "Succeeded", status
    claim = claim_of(kube, src_ns, "copy1")
    source = claim_of(kube, src_ns, "golden")
    assert claim["spec"]["resources"]["requests"]["storage"] == \
        source["spec"]["resources"]["requests"]["storage"]
    anns = claim["metadata"]["annotations"]
    assert anns[A + "clone.strategy"] == "csi-clone" and A + "cloneFallbackReason" not in anns
    produced = kit.volume_path(kube, claim)
    assert compare(reference, Path(produced))
    golden_img = kit.volume_path(kube, source)
    assert os.path.getsize(produced) == os.path.getsize(golden_img)
    wait_reasons(kube, src_ns, dv["metadata"]["uid"], "CloneSucceeded")
    assert "ImportSucceeded" not in event_reasons(kube, src_ns, dv["metadata"]["uid"])
    wait_clean(kube, src_ns, {"golden", "copy1"})
    kube.delete(kit.DVS, "copy1", src_ns)


def source_ns_clean_but(kube: Client, ns: str, keep: set[str]) -> bool:
    """Nothing a clone made is left in ``ns`` (PVC', pod, VolumeCloneSource): only the
    claims in ``keep`` (those of DataVolumes still being deleted aside)."""
    claims = {c["metadata"]["name"] for c in kube.list(resources.PVCS, ns)
              if not c["metadata"].get("deletionTimestamp")}
    pods = kube.list(resources.PODS, ns)
    return claims <= keep | _dv_claims(kube, ns) and not [
        c for c in claims if c.startswith("prime-")] and not pods and not kube.list(
        VCS, ns)


def wait_clean(kube: Client, ns: str, keep: set[str]) -> None:
    try:
        wait_for(lambda: source_ns_clean_but(kube, ns, keep), timeout=TIMEOUT,
                 what=f"nothing but {sorted(keep)} left in {ns}")
    except AssertionError as err:
        left = [f"{r.plural}/{o['metadata']['name']}" for r in (resources.PVCS, resources.PODS, VCS)
                for o in kube.list(r, ns)]
        raise AssertionError(f"{err}: {left}\n{kit.diagnose(kube, ns)}") from None


def _dv_claims(kube: Client, ns: str) -> set[str]:
    return {d["metadata"]["name"] for d in kube.list(kit.DVS, ns)}


# -- host-assisted copy ----------------------------------------------------------------------


@pytest.fixture
def copy_strategy(kube: Client) -> Iterator[None]:
    """CDIConfig's cloneStrategyOverride: copy (the storage could clone these itself)."""
    kube.patch(kit.CDICONFIGS, "config", {"spec": {"cloneStrategyOverride": "copy"}})
    try:
        yield
    finally:
        kube.patch(kit.CDICONFIGS, "config", {"spec": {"cloneStrategyOverride": None}})


def secrets_of(kube: Client, ns: str, uid: str) -> list[str]:
    return [s["metadata"]["name"] for s in kube.list(resources.SECRETS, ns)
            if uid in s["metadata"]["name"]]


def copied(kube: Client, ns: str, dv: dict[str, Any], reference: Path) -> dict[str, Any]:
    """The claim of the copy clone DataVolume ``dv`` once it Succeeded: cloned by the
    host-assisted copy, identical to ``reference`` and as sparse (plus filesystem slack),
    its DataVolume with upstream's CloneSucceeded event."""
    name = dv["metadata"]["name"]
    status = kit.wait_dv(kube, ns, name, ("Succeeded", "Failed"), timeout=TIMEOUT)
    assert status["phase"] == "Succeeded", status
    claim = claim_of(kube, ns, name)
    assert claim["metadata"]["annotations"][A + "clone.strategy"] == "copy"
    produced = Path(kit.volume_path(kube, claim))
    assert compare(reference, produced)
    assert allocated_bytes(produced) <= allocated_bytes(reference) + 4 * MiB
    wait_reasons(kube, ns, dv["metadata"]["uid"], "CloneSucceeded")
    return claim


def pod_events(kube: Client, ns: str, name: str | None = None) -> list[dict[str, Any]]:
    """The Events of ``ns`` about pods (named ``name``): what ran there, even once gone."""
    return [e for e in kube.list(resources.EVENTS, ns)
            if (e.get("involvedObject") or {}).get("kind") == "Pod"
            and name in (None, (e.get("involvedObject") or {}).get("name"))]


def target_ns_empty(kube: Client, ns: str, uid: str) -> bool:
    return not kube.list(resources.PODS, ns) and not kube.list(resources.PVCS, ns) \
        and not secrets_of(kube, ns, uid)


def test_copy_across_namespaces_is_one_pod_in_the_source_namespace(
        kube: Client, ns: str, golden: tuple[str, Path], copy_strategy: None) -> None:
    """Cross-namespace, pods kept (retainAfterCompletion) to be looked at: PVC' is made
    beside the golden claim, in its namespace, so one pod there mounts the golden claim
    read-only beside PVC' and copies; PVC''s volume is then rebound to the target, as a
    csi-clone's. No source pod, no TLS Secret, nothing ran in the target's namespace; the
    target has the bytes, upstream's CloneSucceeded and the pod's own Events; deleting the
    DataVolume leaves nothing in either namespace."""
    src_ns, reference = golden
    dv = kube.create(kit.DVS, clone_dv(
        "xns", src_ns, storage={"storageClassName": "local-immediate"},
        annotations={A + "storage.pod.retainAfterCompletion": "true"}), ns)
    claim = copied(kube, ns, dv, reference)
    uid = claim["metadata"]["uid"]
    tpod = kube.get(resources.PODS, f"cloner-prime-{uid}", src_ns)
    assert tpod["status"]["phase"] == "Succeeded"
    vols = {v["name"]: v for v in tpod["spec"]["volumes"]}
    assert vols["cdi-clone-source"]["persistentVolumeClaim"] == {"claimName": "golden",
                                                                "readOnly": True}
    assert vols["cdi-data-vol"]["persistentVolumeClaim"]["claimName"] == f"prime-{uid}"
    assert "clone-tls" not in vols
    # retained: PVC' (Lost: its volume is the target's now) beside it, none in the target's
    assert kube.get_or_none(resources.PVCS, f"prime-{uid}", src_ns) is not None
    assert kube.get_or_none(resources.PVCS, f"prime-{uid}", ns) is None
    ref = kube.get(resources.PVS, claim["spec"]["volumeName"])["spec"]["claimRef"]
    assert (ref["namespace"], ref["name"], ref["uid"]) == (ns, "xns", uid)
    # no pod ever ran in the target's namespace, no source pod in the source's, no Secret
    assert not kube.list(resources.PODS, ns) and not pod_events(kube, ns)
    assert kube.get_or_none(resources.PODS, f"{uid}-source-pod", src_ns) is None
    assert not pod_events(kube, src_ns, f"{uid}-source-pod")
    assert not secrets_of(kube, ns, uid) and not secrets_of(kube, src_ns, uid)
    # the pod's own Events told on the target, as when it ran beside it
    wait_for(lambda: [e for e in kit.events_for(kube, ns, uid) if e["reason"] == "Started"
                      and e["message"].startswith(f"[cloner-prime-{uid}]")],
             timeout=60, what="the pod's Started Event copied onto the target")
    kube.delete(kit.DVS, "xns", ns)
    wait_for(lambda: target_ns_empty(kube, ns, uid), timeout=TIMEOUT,
             what="the target namespace empty")
    wait_clean(kube, src_ns, {"golden"})


def test_copy_streams_between_two_pods_where_no_node_reaches_both_volumes(
        kube: Client, ns: str, golden: tuple[str, Path], copy_strategy: None) -> None:
    """Cross-namespace from a claim whose volume is on "another node" (kit.volume_apart):
    no pod can mount both claims, so upstream's two pods, both in the source namespace
    beside the claims they mount: the source pod reads the claim read-only and streams to
    the target pod beside PVC' over mutual TLS, each with its own half of one per-clone
    CA, never in the pod spec. Nothing but the target in the target's namespace. Pods kept
    (retainAfterCompletion) to be looked at."""
    from cryptography import x509
    from cryptography.x509.oid import ExtendedKeyUsageOID

    src_ns, reference = golden
    kube.create(kit.DVS, clone_dv("apart", src_ns,
                                  storage={"storageClassName": "local-reflink"}), src_ns)
    assert kit.wait_dv(kube, src_ns, "apart", ("Succeeded", "Failed"),
                       timeout=TIMEOUT)["phase"] == "Succeeded"
    kit.volume_apart(kube, src_ns, "apart")
    dv = kube.create(kit.DVS, clone_dv(
        "tls", src_ns, src="apart", storage={"storageClassName": "local-immediate"},
        annotations={A + "storage.pod.retainAfterCompletion": "true"}), ns)
    target_uid = wait_for(lambda: (kube.get_or_none(resources.PVCS, "tls", ns) or {}).get(
        "metadata", {}).get("uid"), timeout=TIMEOUT, what="target claim")
    spod = wait_for(lambda: kube.get_or_none(resources.PODS, f"{target_uid}-source-pod",
                                             src_ns), timeout=TIMEOUT, what="source pod")
    ssec = kube.get(resources.SECRETS, f"clone-source-tls-{target_uid}", src_ns)
    uid = copied(kube, ns, dv, reference)["metadata"]["uid"]
    # retained: both pods, both Secrets and PVC' in the source namespace
    assert kube.get(resources.PODS, f"{uid}-source-pod", src_ns)["status"]["phase"] == "Succeeded"
    assert sorted(secrets_of(kube, src_ns, uid)) == [f"clone-source-tls-{uid}",
                                                     f"clone-target-tls-{uid}"]
    assert kube.get_or_none(resources.PVCS, f"prime-{uid}", src_ns) is not None
    assert kube.get_or_none(resources.PVCS, f"prime-{uid}", ns) is None
    assert not kube.list(resources.PODS, ns) and not pod_events(kube, ns)
    assert not secrets_of(kube, ns, uid)
    tpod = kube.get(resources.PODS, f"cloner-prime-{uid}", src_ns)
    assert tpod["status"]["phase"] == "Succeeded"
    assert spod["metadata"]["ownerReferences"][0]["kind"] == "VolumeCloneSource"
    tvols = {v["name"]: v for v in tpod["spec"]["volumes"]}
    svols = {v["name"]: v for v in spod["spec"]["volumes"]}
    assert svols["cdi-clone-source"]["persistentVolumeClaim"] == {"claimName": "apart",
                                                                  "readOnly": True}
    assert not [v for v in tvols.values()
                if (v.get("persistentVolumeClaim") or {}).get("claimName") == "apart"]
    senv = {e["name"]: e.get("value") for e in spod["spec"]["containers"][0]["env"]}
    assert senv["CLONE_TARGET"] == f"{tpod['status']['podIP']}:8444"
    for pod in (tpod, spod):
        assert "PRIVATE KEY" not in json.dumps(pod)
    # one CA, two leaves: the target's serves, the source's logs in
    tsec = kube.get(resources.SECRETS, tvols["clone-tls"]["secret"]["secretName"], src_ns)
    assert svols["clone-tls"]["secret"]["secretName"] == ssec["metadata"]["name"]
    import base64
    tdata = {k: base64.b64decode(v) for k, v in tsec["data"].items()}
    sdata = {k: base64.b64decode(v) for k, v in ssec["data"].items()}
    assert tdata["ca.crt"] == sdata["ca.crt"] and tdata["tls.key"] != sdata["tls.key"]
    for data, usage in ((tdata, ExtendedKeyUsageOID.SERVER_AUTH),
                        (sdata, ExtendedKeyUsageOID.CLIENT_AUTH)):
        cert = x509.load_pem_x509_certificate(data["tls.crt"])
        eku = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
        assert list(eku) == [usage]
    # no key material in any Event of either namespace
    for n in (ns, src_ns):
        assert "PRIVATE KEY" not in json.dumps(kube.list(resources.EVENTS, n))
    # deleting the DataVolume takes all of it away, in both namespaces
    kube.delete(kit.DVS, "tls", ns)
    wait_for(lambda: target_ns_empty(kube, ns, uid) and not secrets_of(kube, src_ns, uid)
             and kube.get_or_none(resources.PODS, f"{uid}-source-pod", src_ns) is None
             and kube.get_or_none(resources.PODS, f"cloner-prime-{uid}", src_ns) is None
             and kube.get_or_none(resources.PVCS, f"prime-{uid}", src_ns) is None,
             timeout=TIMEOUT, what="clone pods, Secrets and PVC' gone")
    kube.delete(kit.DVS, "apart", src_ns)
    wait_clean(kube, src_ns, {"golden"})


def test_copy_within_a_namespace_is_one_pod_reading_both_claims(
        kube: Client, golden: tuple[str, Path], copy_strategy: None) -> None:
    """Within the golden image's namespace, on this one node, one pod copies: the target
    pod mounts the golden claim read-only beside PVC' and reads it itself. No source pod,
    no TLS Secrets, no clone port; the copy identical and as sparse as the source."""
    src_ns, reference = golden
    dv = kube.create(kit.DVS, clone_dv(
        "local", src_ns, storage={"storageClassName": "local-immediate"},
        annotations={A + "storage.pod.retainAfterCompletion": "true"}), src_ns)
    uid = copied(kube, src_ns, dv, reference)["metadata"]["uid"]
    tpod = kube.get(resources.PODS, f"cloner-prime-{uid}", src_ns)
    assert tpod["status"]["phase"] == "Succeeded"
    vols = {v["name"]: v for v in tpod["spec"]["volumes"]}
    assert vols["cdi-clone-source"]["persistentVolumeClaim"] == {"claimName": "golden",
                                                                "readOnly": True}
    assert "clone-tls" not in vols
    c = tpod["spec"]["containers"][0]
    assert {"name": "cdi-clone-source", "mountPath": "/source", "readOnly": True} in c[
        "volumeMounts"]
    assert [p["name"] for p in c["ports"]] == ["metrics"]
    assert kube.get_or_none(resources.PODS, f"{uid}-source-pod", src_ns) is None
    assert not secrets_of(kube, src_ns, uid)
    kube.delete(kit.DVS, "local", src_ns)
    wait_for(lambda: kube.get_or_none(resources.PODS, f"cloner-prime-{uid}", src_ns) is None
             and kube.get_or_none(resources.PVCS, f"prime-{uid}", src_ns) is None,
             timeout=TIMEOUT, what="the clone's pod and PVC' gone")


def _clone_target_pid(owner_uid: str) -> int | None:
    """The clone target program of the clone into the claim ``owner_uid`` (its pod's env
    names the target claim's UID), found among this host's processes."""
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
            if b"importer.clonetarget" not in argv:
                continue
            with open(f"/proc/{entry}/environ", "rb") as f:
                env = f.read().split(b"\0")
        except OSError:
            continue
        if f"OWNER_UID={owner_uid}".encode() in env:
            return int(entry)
    return None


@pytest.mark.parametrize("across", [False, True], ids=["one-pod", "two-pods"])
def test_a_target_killed_mid_copy_copies_again(kube: Client, ns: str, copy_strategy: None,
                                               across: bool) -> None:
    """The target program dies while the data comes in (SIGKILL): the kubelet restarts
    it and the clone ends whole. Within a namespace the one pod reads the source again
    (no source pod, ever); across namespaces from a volume on "another node"
    (kit.volume_apart: two pods, both in the source namespace) the populator replaces
    the source pod made for the target's first run (its annotation names the run it
    streams to)."""
    src_ns = kit.namespace(kube, "big") if across else ns
    kube.create(kit.DVS, kit.datavolume("big", {"blank": {}}, size="1Gi",
                                        storage={"storageClassName": "local-reflink"}), src_ns)
    assert kit.wait_dv(kube, src_ns, "big", ("Succeeded", "Failed"),
                       timeout=TIMEOUT)["phase"] == "Succeeded"
    if across:
        kit.volume_apart(kube, src_ns, "big")
    golden = Path(kit.volume_path(kube, claim_of(kube, src_ns, "big")))
    block = os.urandom(4 * MiB)
    fd = os.open(golden, os.O_WRONLY)
    try:  # 384 MiB of data spread over the disk: a copy that lasts a while
        for i in range(96):
            os.pwrite(fd, block[i:] + block[:i], i * 10 * MiB)
        os.fsync(fd)
    finally:
        os.close(fd)
    kube.create(kit.DVS, clone_dv("again", src_ns, src="big", annotations={
        A + "storage.pod.retainAfterCompletion": "true"},
        storage={"storageClassName": "local-immediate"}), ns)
    uid = wait_for(lambda: (kube.get_or_none(resources.PVCS, "again", ns) or {}).get(
        "metadata", {}).get("uid"), timeout=TIMEOUT, what="target claim")

    def copying() -> int | None:
        prime = kube.get_or_none(resources.PVCS, f"prime-{uid}", src_ns)  # beside the source
        if prime is None or not prime["spec"].get("volumeName"):
            return None
        written = Path(kit.volume_path(kube, prime))
        pid = _clone_target_pid(uid)
        if pid is None or not written.exists():
            return None
        size = written.stat().st_size
        # under way, not over: the target grows the file to its full size at the end
        return pid if 32 * MiB <= size < golden.stat().st_size - 64 * MiB else None

    pid = wait_for(copying, timeout=TIMEOUT, what="the copy into PVC' under way")
    first_source = (kube.get_or_none(resources.PODS, f"{uid}-source-pod", src_ns) or {}
                    ).get("metadata", {}).get("uid")
    assert (first_source is not None) == across
    os.kill(pid, 9)
    status = kit.wait_dv(kube, ns, "again", ("Succeeded", "Failed"), timeout=TIMEOUT)
    assert status["phase"] == "Succeeded", status
    tpod = kube.get(resources.PODS, f"cloner-prime-{uid}", src_ns)
    assert tpod["status"]["containerStatuses"][0]["restartCount"] >= 1
    # one pod: the target pod mounts the source claim itself
    assert ("cdi-clone-source" in {v["name"] for v in tpod["spec"]["volumes"]}) == (
        not across)
    # the source pod made for the first run was replaced (retained pods stay otherwise);
    # its successor, if the clone did not end before it was made, names the new run
    spod = kube.get_or_none(resources.PODS, f"{uid}-source-pod", src_ns)
    assert spod is None or spod["metadata"]["uid"] != first_source
    if spod is not None:
        assert across and int(spod["metadata"]["annotations"][
            "populators.rootdisk.io/clone-target-restarts"]) >= 1
    produced = Path(kit.volume_path(kube, claim_of(kube, ns, "again")))
    assert compare(golden, produced)
    kube.delete(kit.DVS, "again", ns)
    kube.delete(kit.DVS, "big", src_ns)


def test_copy_filesystem_to_block_and_back_is_identical_and_sparse(
        kube: Client, ns: str, golden: tuple[str, Path]) -> None:
    src_ns, reference = golden
    # Filesystem → Block: the modes differ, csi-clone falls back to copy with the reason
    dv = kube.create(kit.DVS, clone_dv(
        "blk", src_ns, storage={"storageClassName": "local-reflink", "volumeMode": "Block"}),
        src_ns)
    status = kit.wait_dv(kube, src_ns, "blk", ("Succeeded", "Failed"), timeout=TIMEOUT)
    assert status["phase"] == "Succeeded", status
    claim = claim_of(kube, src_ns, "blk")
    assert claim["metadata"]["annotations"][A + "clone.strategy"] == "copy"
    assert "volume mode" in claim["metadata"]["annotations"][A + "cloneFallbackReason"]
    wait_reasons(kube, src_ns, claim["metadata"]["uid"], "IncompatibleVolumeModes")
    device = kit.volume_path(kube, claim)
    assert compare(reference, Path(device))
    # Block → Filesystem, into another namespace: the block clone is the source now
    dv2 = kube.create(kit.DVS, clone_dv("back", src_ns, src="blk",
                                        storage={"storageClassName": "local-immediate"}), ns)
    back = copied(kube, ns, dv2, reference)  # identical and sparse
    wait_reasons(kube, src_ns, dv["metadata"]["uid"], "CloneSucceeded")
    # one pod beside the Block claim, in its namespace; not retained: it and PVC' went
    # with the clone, and no source pod or Secret was ever made
    buid = back["metadata"]["uid"]
    wait_for(lambda: kube.get_or_none(resources.PODS, f"cloner-prime-{buid}", src_ns) is None
             and kube.get_or_none(resources.PVCS, f"prime-{buid}", src_ns) is None,
             timeout=TIMEOUT, what="the clone's pod and PVC' gone after the clone")
    assert not pod_events(kube, src_ns, f"{buid}-source-pod")
    assert not secrets_of(kube, src_ns, buid) and not secrets_of(kube, ns, buid)
    assert pod_events(kube, src_ns, f"cloner-prime-{buid}") and not pod_events(kube, ns)
    # Block → Block by copy (asked for: the storage could clone it), device to device
    kube.patch(kit.CDICONFIGS, "config", {"spec": {"cloneStrategyOverride": "copy"}})
    try:
        kube.create(kit.DVS, clone_dv("blk2", src_ns, src="blk", storage={
            "storageClassName": "local-reflink", "volumeMode": "Block"}), ns)
        status = kit.wait_dv(kube, ns, "blk2", ("Succeeded", "Failed"), timeout=TIMEOUT)
    finally:
        kube.patch(kit.CDICONFIGS, "config", {"spec": {"cloneStrategyOverride": None}})
    assert status["phase"] == "Succeeded", status
    blk2 = claim_of(kube, ns, "blk2")
    assert blk2["metadata"]["annotations"][A + "clone.strategy"] == "copy"
    assert compare(reference, Path(kit.volume_path(kube, blk2)))
    kube.delete(kit.DVS, "blk2", ns)
    kube.delete(kit.DVS, "blk", src_ns)
    kube.delete(kit.DVS, "back", ns)


@contextlib.contextmanager
def snapshot_strategy(kube: Client) -> Iterator[None]:
    kube.patch(kit.CDICONFIGS, "config", {"spec": {"cloneStrategyOverride": "snapshot"}})
    try:
        yield
    finally:
        kube.patch(kit.CDICONFIGS, "config", {"spec": {"cloneStrategyOverride": None}})


def test_snapshot_clones_within_and_across_namespaces_then_drop_the_snapshot(
        kube: Client, ns: str, golden: tuple[str, Path]) -> None:
    """The snapshot strategy end to end: a VolumeSnapshot of the golden claim, PVC'
    restored from it by the storage, the volume rebound to the target; into a larger
    claim the disk image is grown; the temporary snapshot (and its content) is gone
    afterwards."""
    src_ns, reference = golden
    with snapshot_strategy(kube):
        same = kube.create(kit.DVS, clone_dv("snap", src_ns, storage={
            "storageClassName": "local-reflink"}), src_ns)
        across = kube.create(kit.DVS, clone_dv("snap-big", src_ns, size="128Mi", storage={
            "storageClassName": "local-reflink"}), ns)
        results = [kit.wait_dv(kube, n, name, ("Succeeded", "Failed"), timeout=TIMEOUT)
                   for n, name in ((src_ns, "snap"), (ns, "snap-big"))]
    assert [r["phase"] for r in results] == ["Succeeded", "Succeeded"], results
    for n, name, dv in ((src_ns, "snap", same), (ns, "snap-big", across)):
        claim = claim_of(kube, n, name)
        anns = claim["metadata"]["annotations"]
        assert anns[A + "clone.strategy"] == "snapshot"
        assert A + "cloneFallbackReason" not in anns
        assert compare(reference, Path(kit.volume_path(kube, claim)))
        wait_reasons(kube, n, dv["metadata"]["uid"], "CloneSucceeded")
        # upstream's phase and words while PVC' is restored (clonePhase SnapshotClone; the
        # snapshot step before it is table-tested: it may pass between two looks)
        said = {e["reason"]: e["message"] for e in kit.events_for(kube, n,
                                                                  dv["metadata"]["uid"])}
        assert said["CloneFromSnapshotSourceInProgress"] == (
            f"Creating PVC from snapshot source is in progress (for pvc {src_ns}/golden)")
        snap = kube.get_or_none(VOLUMESNAPSHOTS, f"tmp-snapshot-{claim['metadata']['uid']}",
                                src_ns)
        assert snap is None
    big = claim_of(kube, ns, "snap-big")
    fo = kube.get(kit.CDICONFIGS, "config")["status"]["filesystemOverhead"]
    overhead = Fraction((fo.get("storageClass") or {}).get("local-reflink") or fo["global"])
    # spec.storage: the claim is 128Mi plus the overhead; restored, then grown to it
    assert big["spec"]["resources"]["requests"]["storage"] == str(
        required_space(size=128 * MiB, overhead=overhead))
    assert os.path.getsize(kit.volume_path(kube, big)) == usable_space(
        capacity=required_space(size=128 * MiB, overhead=overhead), overhead=overhead)
    wait_for(lambda: not kube.list(VOLUMESNAPSHOTCONTENTS), timeout=60,
             what="the temporary snapshots' contents deleted")
    kube.delete(kit.DVS, "snap", src_ns)
    kube.delete(kit.DVS, "snap-big", ns)


def test_snapshot_without_a_usable_class_falls_back_to_copy(kube: Client, ns: str,
                                                          golden: tuple[str, Path]) -> None:
    """The StorageProfiles name a VolumeSnapshotClass that does not exist: upstream's
    NoVolumeSnapshotClass fallback to the host-assisted copy, reason recorded."""
    src_ns, reference = golden
    kube.patch(kit.PROFILES, "local-reflink", {"spec": {"snapshotClass": "nowhere"}})
    try:
        wait_for(lambda: (kube.get(kit.PROFILES, "local-reflink").get("status") or {})
                 .get("snapshotClass") == "nowhere", timeout=60, what="the profile's class")
        with snapshot_strategy(kube):
            kube.create(kit.DVS, clone_dv("nosnap", src_ns,
                                          storage={"storageClassName": "local-reflink"}),
                        src_ns)
            status = kit.wait_dv(kube, src_ns, "nosnap", ("Succeeded", "Failed"),
                                 timeout=TIMEOUT)
    finally:
        kube.patch(kit.PROFILES, "local-reflink", {"spec": {"snapshotClass": None}})
    assert status["phase"] == "Succeeded", status
    claim = claim_of(kube, src_ns, "nosnap")
    anns = claim["metadata"]["annotations"]
    assert anns[A + "clone.strategy"] == "copy"
    assert anns[A + "cloneFallbackReason"] == "No compatible volumesnapshotclass found"
    wait_reasons(kube, src_ns, claim["metadata"]["uid"], "NoVolumeSnapshotClass")
    assert compare(reference, Path(kit.volume_path(kube, claim)))
    assert not kube.list(VOLUMESNAPSHOTS, src_ns)
    kube.delete(kit.DVS, "nosnap", src_ns)


# -- sizes -----------------------------------------------------------------------------------


def test_smaller_target_is_refused_unless_permissive(kube: Client, ns: str,
                                                     golden: tuple[str, Path]) -> None:
    src_ns, reference = golden
    kube.create(kit.DVS, clone_dv("small", src_ns, size="32Mi",
                                  storage={"storageClassName": "local-reflink"}), src_ns)
    status = kit.wait_dv(kube, src_ns, "small", ("Succeeded", "Failed"), timeout=TIMEOUT)
    assert status["phase"] == "Failed"
    assert kit.condition(status, "Ready")["message"] == (
        "target resources requests storage size is smaller than the source")
    assert kube.get_or_none(resources.PVCS, "small", src_ns) is None
    # permissive: the 16 MiB of data fit in 32Mi; the clone goes ahead (by copy: the
    # storage cannot clone into a smaller volume)
    kube.create(kit.DVS, clone_dv("small-ok", src_ns, size="32Mi",
                                  storage={"storageClassName": "local-reflink"},
                                  annotations={A + "permissiveClone": "true"}), src_ns)
    status = kit.wait_dv(kube, src_ns, "small-ok", ("Succeeded", "Failed"), timeout=TIMEOUT)
    assert status["phase"] == "Succeeded", status
    claim = claim_of(kube, src_ns, "small-ok")
    assert claim["metadata"]["annotations"][A + "clone.strategy"] == "copy"
    assert compare(reference, Path(kit.volume_path(kube, claim)))
    # larger: the target is as asked, the content the same
    kube.create(kit.DVS, clone_dv("large", src_ns, size="128Mi",
                                  storage={"storageClassName": "local-reflink"}), src_ns)
    status = kit.wait_dv(kube, src_ns, "large", ("Succeeded", "Failed"), timeout=TIMEOUT)
    assert status["phase"] == "Succeeded", status
    claim = claim_of(kube, src_ns, "large")
    fo = kube.get(kit.CDICONFIGS, "config")["status"]["filesystemOverhead"]
    overhead = Fraction((fo.get("storageClass") or {}).get("local-reflink") or fo["global"])
    # spec.storage: what the guest gets; the claim carries the overhead on top, as upstream
    grown = required_space(size=128 * MiB, overhead=overhead)
    assert claim["spec"]["resources"]["requests"]["storage"] == str(grown)
    # a CSI clone (reflink) into more room: the storage grew the filesystem, the grow pod
    # grew disk.img to the claim's usable size, as an import would have sized it
    assert claim["metadata"]["annotations"][A + "clone.strategy"] == "csi-clone"
    large = Path(kit.volume_path(kube, claim))
    assert compare(reference, large)
    golden_img = Path(kit.volume_path(kube, claim_of(kube, src_ns, "golden")))
    assert large.stat().st_size > golden_img.stat().st_size
    assert large.stat().st_size == usable_space(capacity=grown, overhead=overhead)
    for name in ("small", "small-ok", "large"):
        kube.delete(kit.DVS, name, src_ns)


# -- authorisation ---------------------------------------------------------------------------


def test_cross_namespace_denied_reads_nothing(kube: Client, ns: str,
                                              golden: tuple[str, Path]) -> None:
    src_ns, _ = golden
    grant(kube, ns, "mallory", DV_RULES)
    dv = create_as(kube, "mallory", kit.DVS, clone_dv("steal", src_ns, size="64Mi"), ns)
    assert json.loads(dv["metadata"]["annotations"][A + "storage.clone.requester"])[
        "username"] == "mallory"
    status = kit.wait_dv(kube, ns, "steal", ("Succeeded", "Failed"), timeout=TIMEOUT)
    assert status["phase"] == "Failed"
    assert kit.condition(status, "Ready")["message"] == (
        f"User mallory has insufficient permissions in clone source namespace {src_ns}")
    # nothing was made for it in either namespace, so no pod read the source
    assert kube.get_or_none(resources.PVCS, "steal", ns) is None
    assert not [v for v in kube.list(VCS, src_ns)
                if v["metadata"]["labels"].get(A + "clone-for-datavolume")
                == dv["metadata"]["uid"]]
    assert not [c for c in kube.list(resources.PVCS, src_ns)
                if (c["metadata"].get("annotations") or {}).get(
                    "populators.rootdisk.io/target", "").startswith(f"{ns}/steal/")]
    assert not [p for p in kube.list(resources.PODS, src_ns)
                if any((v.get("persistentVolumeClaim") or {}).get("claimName") == "golden"
                       for v in p["spec"].get("volumes") or [])]


def test_requester_cannot_be_forged_or_changed(kube: Client, ns: str,
                                               golden: tuple[str, Path]) -> None:
    src_ns, _ = golden
    grant(kube, ns, "mallory", [*DV_RULES, {"apiGroups": ["cdi.kubevirt.io"],
                                            "resources": ["datavolumes"],
                                            "verbs": ["update", "patch"]}])
    forged = json.dumps({"username": "system:admin", "groups": ["system:masters"]})
    dv = create_as(kube, "mallory", kit.DVS, clone_dv(
        "forged", src_ns, size="64Mi", annotations={A + "storage.clone.requester": forged}),
        ns)
    assert json.loads(dv["metadata"]["annotations"][A + "storage.clone.requester"])[
        "username"] == "mallory"
    status = kit.wait_dv(kube, ns, "forged", ("Succeeded", "Failed"), timeout=TIMEOUT)
    assert status["phase"] == "Failed"
    with pytest.raises(KubeError) as err:
        kube.patch(kit.DVS, "forged", {"metadata": {"annotations": {
            A + "storage.clone.requester": forged}}}, ns)
    assert err.value.status in (400, 422) and "storage.clone.requester" in str(err.value)


def test_cross_namespace_allowed_by_datavolumes_source(kube: Client, ns: str,
                                                       golden: tuple[str, Path]) -> None:
    src_ns, reference = golden
    grant(kube, ns, "alice", DV_RULES)
    grant(kube, src_ns, "alice", [{"apiGroups": ["cdi.kubevirt.io"],
                                   "resources": ["datavolumes/source"], "verbs": ["create"]}])
    create_as(kube, "alice", kit.DVS, clone_dv(
        "mine", src_ns, storage={"storageClassName": "local-immediate"}), ns)
    status = kit.wait_dv(kube, ns, "mine", ("Succeeded", "Failed"), timeout=TIMEOUT)
    assert status["phase"] == "Succeeded", status
    claim = claim_of(kube, ns, "mine")
    # across namespaces the storage clones too (same provisioner), as upstream: PVC' in
    # the source namespace, its volume rebound to the target
    anns = claim["metadata"]["annotations"]
    assert anns[A + "clone.strategy"] == "csi-clone" and A + "cloneFallbackReason" not in anns
    assert anns[A + "storage.populator.pvcPrime"].startswith("prime-")
    pv = kube.get(resources.PVS, claim["spec"]["volumeName"])
    assert pv["spec"]["claimRef"]["namespace"] == ns
    assert compare(reference, Path(kit.volume_path(kube, claim)))
    wait_clean(kube, src_ns, {"golden"})


def test_a_vm_clones_another_namespace_only_as_its_service_account(
        kube: Client, ns: str, golden: tuple[str, Path]) -> None:
    """The attack: the VM controller creates a VM's DataVolumes under its own identity,
    which may clone from anywhere. mallory, who may only create VMs in her namespace,
    asks for another namespace's golden image through a dataVolumeTemplate: no
    DataVolume, an UnauthorizedDataVolumeCreate Event, nothing made beside the source.
    Once the source namespace lets her namespace's ServiceAccount clone, the same VM
    gets its disk (on the manifests' RBAC: the controller may ask SubjectAccessReviews)."""
    src_ns, reference = golden
    grant(kube, ns, "mallory", [{"apiGroups": ["kubevirt.io"],
                                 "resources": ["virtualmachines"], "verbs": ["create", "get"]}])
    spec = vmkit.vm("thief", "http://unused.invalid/", strategy="Halted",
                    storage_class="local-reflink")
    template = spec["spec"]["dataVolumeTemplates"][0]["spec"]
    template["source"] = {"pvc": {"namespace": src_ns, "name": "golden"}}
    del template["storage"]["resources"]  # the size is the source's
    vm = create_as(kube, "mallory", vmkit.VMS, spec, ns)
    assert vm.get("kind") == "VirtualMachine", vm
    wait_reasons(kube, ns, vm["metadata"]["uid"], "UnauthorizedDataVolumeCreate", timeout=60)
    assert kube.get_or_none(kit.DVS, "thief-root", ns) is None
    assert kube.get_or_none(resources.PVCS, "thief-root", ns) is None
    kube.create(ROLES, {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
                        "metadata": {"name": "vm-cloner"},
                        "rules": [{"apiGroups": ["cdi.kubevirt.io"],
                                   "resources": ["datavolumes/source"],
                                   "verbs": ["create"]}]}, src_ns)
    kube.create(ROLEBINDINGS, {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
        "metadata": {"name": "vm-cloner"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                    "name": "vm-cloner"},
        "subjects": [{"kind": "ServiceAccount", "name": "default", "namespace": ns}]}, src_ns)
    kube.patch(vmkit.VMS, "thief", {"metadata": {"annotations": {"look": "again"}}}, ns)
    status = kit.wait_dv(kube, ns, "thief-root", ("Succeeded", "Failed"), timeout=TIMEOUT)
    dv = kube.get(kit.DVS, "thief-root", ns)
    assert status["phase"] == "Succeeded", json.dumps(dv["status"].get("conditions"))
    assert dv["spec"]["source"] == {"pvc": {"namespace": src_ns, "name": "golden"}}
    assert compare(reference, Path(kit.volume_path(kube, claim_of(kube, ns, "thief-root"))))
    kube.delete(vmkit.VMS, "thief", ns)
    kube.delete(ROLEBINDINGS, "vm-cloner", src_ns)
    kube.delete(ROLES, "vm-cloner", src_ns)
    wait_clean(kube, src_ns, {"golden"})


def test_a_claim_cannot_borrow_another_users_clone_source(kube: Client, ns: str,
                                                          golden: tuple[str, Path]) -> None:
    """The attack: alice's authorised cross-namespace clone leaves a VolumeCloneSource in
    the golden namespace (kept while the clone waits for a writer of the source); mallory,
    who may not read that namespace, points a claim of her own at it. Her claim fails with
    CrossNamespaceSourceDenied and nothing is made that could read the golden image."""
    src_ns, _ = golden
    writer = kit.consumer_pod("holder", "golden")
    kube.create(resources.PODS, writer, src_ns)
    wait_for(lambda: (kube.get(resources.PODS, "holder", src_ns).get("status") or {}).get(
        "phase") == "Running", timeout=120, what="holder running")
    grant(kube, ns, "alice", DV_RULES)
    grant(kube, src_ns, "alice", [{"apiGroups": ["cdi.kubevirt.io"],
                                   "resources": ["datavolumes/source"], "verbs": ["create"]}])
    legit = create_as(kube, "alice", kit.DVS, clone_dv(
        "legit", src_ns, storage={"storageClassName": "local-immediate"}), ns)
    vcs_name = f"volume-clone-source-{legit['metadata']['uid']}"
    wait_for(lambda: kube.get_or_none(VCS, vcs_name, src_ns) is not None, timeout=TIMEOUT,
             what="alice's VolumeCloneSource")
    theirs = kit.namespace(kube, "mallory")
    grant(kube, theirs, "mallory", [{"apiGroups": [""], "resources": ["persistentvolumeclaims"],
                                     "verbs": ["create", "get"]}])
    create_as(kube, "mallory", resources.PVCS, {
        "apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "loot"},
        "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": "local-immediate",
                 "resources": {"requests": {"storage": "64Mi"}},
                 "dataSourceRef": {"apiGroup": "cdi.kubevirt.io", "kind": "VolumeCloneSource",
                                   "name": vcs_name, "namespace": src_ns}}}, theirs)

    def denied() -> bool:
        ann = kube.get(resources.PVCS, "loot", theirs)["metadata"].get("annotations") or {}
        return ann.get(A + "storage.condition.running.reason") == "CrossNamespaceSourceDenied"

    wait_for(denied, timeout=TIMEOUT, what="mallory's claim denied")
    assert not [c for c in kube.list(resources.PVCS, src_ns)
                if (c["metadata"].get("annotations") or {}).get(
                    "populators.rootdisk.io/target", "").startswith(f"{theirs}/loot/")]
    assert [p["metadata"]["name"] for p in kube.list(resources.PODS, src_ns)
            if any((v.get("persistentVolumeClaim") or {}).get("claimName") == "golden"
                   for v in p["spec"].get("volumes") or [])] == ["holder"]
    assert kube.get(resources.PVCS, "loot", theirs)["status"].get("phase") != "Bound"
    # alice's clone goes ahead once the writer is gone
    kube.delete(resources.PODS, "holder", src_ns)
    status = kit.wait_dv(kube, ns, "legit", ("Succeeded", "Failed"), timeout=TIMEOUT)
    assert status["phase"] == "Succeeded", status
    kube.delete(resources.PVCS, "loot", theirs)
    kube.delete(kit.DVS, "legit", ns)
    wait_clean(kube, src_ns, {"golden"})


# -- source in use ---------------------------------------------------------------------------


def test_source_written_by_a_pod_waits_read_only_does_not(kube: Client, ns: str,
                                                          golden: tuple[str, Path]) -> None:
    src_ns, reference = golden
    writer = kit.consumer_pod("writer", "golden")
    kube.create(resources.PODS, writer, src_ns)
    wait_for(lambda: (kube.get(resources.PODS, "writer", src_ns).get("status") or {}).get(
        "phase") == "Running", timeout=120, what="writer running")
    dv = kube.create(kit.DVS, clone_dv("busy", src_ns,
                                       storage={"storageClassName": "local-reflink"}), src_ns)
    wait_for(lambda: "CloneSourceInUse" in event_reasons(
        kube, src_ns, (kube.get_or_none(resources.PVCS, "busy", src_ns) or {"metadata": {
            "uid": "-"}})["metadata"]["uid"]),
        timeout=TIMEOUT, what="CloneSourceInUse event")
    assert kit.dv_status(kube, src_ns, "busy").get("phase") != "Succeeded"
    kube.delete(resources.PODS, "writer", src_ns)
    status = kit.wait_dv(kube, src_ns, "busy", ("Succeeded", "Failed"), timeout=TIMEOUT)
    assert status["phase"] == "Succeeded", status
    assert dv["metadata"]["uid"]
    # a read-only user does not hold a clone back
    reader = kit.consumer_pod("reader", "golden")
    reader["spec"]["volumes"][0]["persistentVolumeClaim"]["readOnly"] = True
    reader["spec"]["containers"][0]["volumeMounts"][0]["readOnly"] = True
    kube.create(resources.PODS, reader, src_ns)
    kube.create(kit.DVS, clone_dv("shared", src_ns,
                                  storage={"storageClassName": "local-reflink"}), src_ns)
    status = kit.wait_dv(kube, src_ns, "shared", ("Succeeded", "Failed"), timeout=TIMEOUT)
    assert status["phase"] == "Succeeded", status
    assert "CloneSourceInUse" not in event_reasons(kube, src_ns,
                                             claim_of(kube, src_ns, "shared")["metadata"]["uid"])
    assert compare(reference, Path(kit.volume_path(kube, claim_of(kube, src_ns, "shared"))))
    kube.delete(resources.PODS, "reader", src_ns)
    for name in ("busy", "shared"):
        kube.delete(kit.DVS, name, src_ns)


# -- DataSource ------------------------------------------------------------------------------


def test_data_source_ready_follows_the_golden_claim(kube: Client, ns: str, images: ImageFactory,
                                                    golden: tuple[str, Path]) -> None:
    src_ns, reference = golden
    kube.create(kit.DVS, clone_dv("gold2", src_ns,
                                  storage={"storageClassName": "local-reflink"}), ns)
    kit.wait_dv(kube, ns, "gold2", ("Succeeded", "Failed"), timeout=TIMEOUT)
    kube.create(DATASOURCES, {"apiVersion": "cdi.kubevirt.io/v1beta1", "kind": "DataSource",
                              "metadata": {"name": "fedora"},
                              "spec": {"source": {"pvc": {"namespace": ns,
                                                          "name": "gold2"}}}}, ns)
    kube.create(DATASOURCES, {"apiVersion": "cdi.kubevirt.io/v1beta1", "kind": "DataSource",
                              "metadata": {"name": "latest"},
                              "spec": {"source": {"dataSource": {"name": "fedora"}}}}, ns)

    def ready(name: str) -> str:
        ds = kube.get(DATASOURCES, name, ns)
        return next((c["status"] for c in (ds.get("status") or {}).get("conditions") or []
                     if c["type"] == "Ready"), "")

    wait_for(lambda: ready("fedora") == "True" and ready("latest") == "True",
             timeout=TIMEOUT, what="DataSources Ready")
    dv = {"apiVersion": "cdi.kubevirt.io/v1beta1", "kind": "DataVolume",
          "metadata": {"name": "vm-disk"},
          "spec": {"sourceRef": {"kind": "DataSource", "name": "latest"},
                   "storage": {"storageClassName": "local-reflink"}}}
    kube.create(kit.DVS, dv, ns)
    status = kit.wait_dv(kube, ns, "vm-disk", ("Succeeded", "Failed"), timeout=TIMEOUT)
    assert status["phase"] == "Succeeded", status
    assert compare(reference, Path(kit.volume_path(kube, claim_of(kube, ns, "vm-disk"))))
    # the golden claim goes: Ready flips to False; a new one: back to True. The DataSource
    # naming that one follows on its status change, well before the operator's 10 s resync
    kube.delete(kit.DVS, "gold2", ns)
    wait_for(lambda: ready("fedora") == "False", timeout=TIMEOUT, what="Ready False")
    wait_for(lambda: ready("latest") == "False", timeout=3, what="latest follows")
    kube.create(kit.DVS, clone_dv("gold2", src_ns,
                                  storage={"storageClassName": "local-reflink"}), ns)
    wait_for(lambda: ready("fedora") == "True", timeout=TIMEOUT, what="Ready True again")
    wait_for(lambda: ready("latest") == "True", timeout=3, what="latest follows")


# -- deletion and many at once ---------------------------------------------------------------


def test_deletion_mid_clone_leaves_nothing(kube: Client, ns: str,
                                           golden: tuple[str, Path]) -> None:
    src_ns, _ = golden
    kube.create(kit.DVS, clone_dv("gone", src_ns,
                                  storage={"storageClassName": "local-immediate"}), ns)
    wait_for(lambda: kube.get_or_none(resources.PVCS, "gone", ns) is not None, timeout=TIMEOUT,
             what="target claim")
    kube.delete(kit.DVS, "gone", ns)
    wait_for(lambda: not kube.list(resources.PVCS, ns)
             and not kube.list(resources.PODS, ns), timeout=TIMEOUT,
             what="target namespace empty")
    wait_clean(kube, src_ns, {"golden"})


def big_golden(kube: Client, ns: str, name: str) -> Path:
    """A golden claim whose copy lasts a while: 384 MiB of random data spread over a
    1Gi blank DataVolume on local-reflink, written on the host; its disk.img."""
    kube.create(kit.DVS, kit.datavolume(name, {"blank": {}}, size="1Gi",
                                        storage={"storageClassName": "local-reflink"}),
                ns)  # (blank: an import, a clone strategy override does not apply)
    status = kit.wait_dv(kube, ns, name, ("Succeeded", "Failed"), timeout=TIMEOUT)
    assert status["phase"] == "Succeeded", status
    path = Path(kit.volume_path(kube, claim_of(kube, ns, name)))
    block = os.urandom(16 * MiB)
    fd = os.open(path, os.O_WRONLY)
    try:
        for i in range(24):
            os.pwrite(fd, block, i * 40 * MiB)
        os.fsync(fd)
    finally:
        os.close(fd)
    return path


def test_copy_progress_is_written_at_most_once_a_second(kube: Client, ns: str,
                                                        copy_strategy: None) -> None:
    """Every progress write on the target is a watch event that reconciles it again. Read
    on every reconcile, a copy's progress (which moves faster than a reconcile) kept the
    populator reconciling flat out, 10-15 writes a second and a core of CPU taken from
    the copy. The target's watch now sees at most one new value per PROGRESS_EVERY.
    From another namespace: the one pod runs in the source's, and its progress still
    reaches the target while it copies: a fortieth of a core makes the copy itself last
    several seconds, past the populator's 2 s tick (at a tenth, the program's start took
    most of its 3 s and the copy sometimes ended between two ticks)."""
    from populators.reconcile import PROGRESS_EVERY

    src_ns = kit.namespace(kube, "paced")
    path = big_golden(kube, src_ns, "big")
    kit.pod_resources(kube, {"limits": {"cpu": "25m", "memory": "600M"},
                             "requests": {"cpu": "25m", "memory": "60M"}})
    try:
        made = kube.create(kit.DVS, clone_dv(
            "paced", src_ns, src="big", storage={"storageClassName": "local-immediate"}), ns)
        writes = _progress_writes(kube, ns, made["metadata"]["resourceVersion"])
    finally:
        kit.pod_resources(kube, None)
    assert writes and writes[-1][1] == "100.0%", writes
    partial = [t for t, v in writes if v != "100.0%"]
    assert partial, writes  # read from the pod in the source namespace while it ran
    assert len(partial) - 1 <= (partial[-1] - partial[0]) / PROGRESS_EVERY + 1, writes
    status = kit.wait_dv(kube, ns, "paced", ("Succeeded", "Failed"), timeout=TIMEOUT)
    assert status["phase"] == "Succeeded", status
    assert compare(path, Path(kit.volume_path(kube, claim_of(kube, ns, "paced"))))
    uid = claim_of(kube, ns, "paced")["metadata"]["uid"]
    assert pod_events(kube, src_ns, f"cloner-prime-{uid}") and not pod_events(kube, ns)
    kube.delete(kit.DVS, "paced", ns)
    kube.delete(kit.DVS, "big", src_ns)


def _progress_writes(kube: Client, ns: str, since: str) -> list[tuple[float, str]]:
    """(when, value) of each new progress annotation on claim ``paced``, until 100%."""
    writes: list[tuple[float, str]] = []
    deadline = time.monotonic() + TIMEOUT
    while time.monotonic() < deadline and not (writes and writes[-1][1] == "100.0%"):
        for event in kube.watch(resources.PVCS, resource_version=since, namespace=ns,
                                timeout=30, field_selector="metadata.name=paced"):
            obj = event["object"]
            since = obj["metadata"]["resourceVersion"]
            value = (obj["metadata"].get("annotations") or {}).get(A + PROGRESS)
            if value and (not writes or writes[-1][1] != value):
                writes.append((time.monotonic(), value))
            if value == "100.0%":
                break
    return writes


@pytest.mark.parametrize("apart", [False, True], ids=["one-pod", "two-pods"])
def test_deletion_mid_copy_leaves_nothing(kube: Client, ns: str, golden: tuple[str, Path],
                                          copy_strategy: None, apart: bool) -> None:
    """A copy across namespaces of a golden image large enough to catch it running (384
    MiB of data in 1Gi, written on the host), by one pod, or by two from a volume on
    "another node" (kit.volume_apart), all in the source namespace: deleting the
    DataVolume then removes the pods, the Secrets (only made for two) and PVC', and
    nothing is left in either namespace."""
    src_ns, _ = golden
    big_golden(kube, src_ns, "big")
    if apart:
        kit.volume_apart(kube, src_ns, "big")
    kube.create(kit.DVS, clone_dv("half", src_ns, src="big",
                                  storage={"storageClassName": "local-immediate"}), ns)
    uid = wait_for(lambda: (kube.get_or_none(resources.PVCS, "half", ns) or {}).get(
        "metadata", {}).get("uid"), timeout=TIMEOUT, what="target claim")
    running = f"{uid}-source-pod" if apart else f"cloner-prime-{uid}"
    wait_for(lambda: ((kube.get_or_none(resources.PODS, running, src_ns) or {}
                       ).get("status") or {}).get("phase") == "Running", timeout=TIMEOUT,
             what=f"{running} running in the source namespace")
    assert kube.get_or_none(resources.PVCS, f"prime-{uid}", src_ns) is not None
    assert not kube.list(resources.PODS, ns) and not secrets_of(kube, ns, uid)
    assert len(secrets_of(kube, src_ns, uid)) == (2 if apart else 0)
    assert kit.dv_status(kube, ns, "half").get("phase") != "Succeeded"
    kube.delete(kit.DVS, "half", ns)
    try:
        wait_for(lambda: target_ns_empty(kube, ns, uid) and not secrets_of(kube, src_ns, uid)
                 and kube.get_or_none(resources.PODS, f"{uid}-source-pod", src_ns) is None
                 and kube.get_or_none(resources.PODS, f"cloner-prime-{uid}", src_ns) is None
                 and kube.get_or_none(resources.PVCS, f"prime-{uid}", src_ns) is None,
                 timeout=TIMEOUT, what="clone pods, Secrets and PVC' gone")
    finally:
        kube.delete(kit.DVS, "big", src_ns)
    wait_clean(kube, src_ns, {"golden"})


def test_many_clones_of_one_golden_image(kube: Client, ns: str,
                                         golden: tuple[str, Path]) -> None:
    src_ns, reference = golden
    names = [f"vm{i}" for i in range(20)]

    def by_copy(i: int) -> bool:
        return i % 4 == 3

    for i, name in enumerate(names):
        # 15 by reflink (same namespace), 5 by copy (another namespace, onto Block)
        target_ns = ns if by_copy(i) else src_ns
        storage = {"storageClassName": "local-reflink"}
        if by_copy(i):
            storage["volumeMode"] = "Block"
        kube.create(kit.DVS, clone_dv(name, src_ns, storage=storage), target_ns)
    for i, name in enumerate(names):
        target_ns = ns if by_copy(i) else src_ns
        status = kit.wait_dv(kube, target_ns, name, ("Succeeded", "Failed"),
                             timeout=TIMEOUT * 2)
        assert status["phase"] == "Succeeded", (name, status)
        claim = claim_of(kube, target_ns, name)
        assert claim["metadata"]["annotations"][A + "clone.strategy"] == (
            "copy" if by_copy(i) else "csi-clone")
        assert compare(reference, Path(kit.volume_path(kube, claim)))
    for i, name in enumerate(names):
        kube.delete(kit.DVS, name, ns if by_copy(i) else src_ns)
