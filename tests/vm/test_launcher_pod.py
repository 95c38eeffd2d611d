"""Launcher pod rendering, memory overhead, claims readiness."""

from __future__ import annotations

import json

import pytest

from localcluster.apiserver.admission import podsecurity_checks as psa
from vm.vmi.claims import ClaimView, DiskClaim, disk_claims, readiness
from vm.vmi.overhead import Mi, ResourceError, memory_overhead, pod_resources
from vm.vmi.pod import LauncherConfig, binding_pod, launcher_pod

Gi = 1024 * Mi


def spec(memory: str = "2Gi", **domain: object) -> dict:
    d: dict = {"resources": {"requests": {"memory": memory}}, "devices": {"disks": []}}
    d.update(domain)
    return {"domain": d, "volumes": [
        {"name": "root", "dataVolume": {"name": "root-dv"}},
        {"name": "data", "persistentVolumeClaim": {"claimName": "data-pvc", "readOnly": True}},
        {"name": "ci", "cloudInitNoCloud": {"userData": "#cloud-config"}},
    ]}


def vmi(**kw: object) -> dict:
    return {"metadata": {"name": "vm1", "namespace": "ns", "uid": "uid-1",
                         "labels": {"app": "x"}},
            "spec": spec(**kw)}  # type: ignore[arg-type]


@pytest.mark.parametrize(("domain", "want_mi"), [
    ({}, 292),  # upstream's worked example: 2Gi, 1 vCPU
    ({"cpu": {"cores": 2, "sockets": 2}}, 292 + 3 * 8),
    ({"devices": {"autoattachGraphicsDevice": False}}, 292 - 32),
    ({"cpu": {"dedicatedCpuPlacement": True}}, 392),
    ({"devices": {"tpm": {}}}, 292 + 53),
])
def test_overhead(domain: dict, want_mi: int) -> None:
    assert memory_overhead(spec(**domain)) == want_mi * Mi


def test_overhead_ratio_and_bad_values_name_the_field() -> None:
    # 292Mi + ceil(292Mi / 1000) kB (upstream's MultiplyMemory rounding)
    assert memory_overhead(spec(), ratio="2") == 292 * Mi + 306185 * 1000
    with pytest.raises(ResourceError, match="additionalGuestMemoryOverheadRatio"):
        memory_overhead(spec(), ratio="0.5")
    with pytest.raises(ResourceError, match=r"spec\.domain\.resources\.requests\.memory"):
        memory_overhead(spec(memory="lots"))


def test_resources_kvm_only_without_emulation() -> None:
    emu = pod_resources(spec(), ratio=None, kvm=False)
    assert emu.requests == {"memory": str(2 * Gi + 292 * Mi), "cpu": "100m"}
    assert "devices.kubevirt.io/kvm" not in emu.limits
    assert pod_resources(spec(), ratio=None, kvm=True).limits == {
        "devices.kubevirt.io/kvm": "1"}


def test_claims_of_volumes() -> None:
    assert disk_claims(spec()) == [DiskClaim("root", "root-dv", from_dv=True),
                                   DiskClaim("data", "data-pvc", read_only=True)]


@pytest.mark.parametrize(("views", "verdict", "text"), [
    ({"root-dv": ClaimView(True, "Bound", dv_phase="Succeeded"),
      "data-pvc": ClaimView(True, "Bound")}, "ready", ""),
    ({"root-dv": ClaimView(True, "Bound", dv_phase="Succeeded")}, "missing",
     "PVC ns/data-pvc does not exist"),
    ({"root-dv": ClaimView(True, "Pending", dv_phase="ImportInProgress"),
      "data-pvc": ClaimView(True, "Bound")}, "wait", "ns/root-dv"),
    ({"root-dv": ClaimView(True, "Pending", dv_phase="WaitForFirstConsumer"),
      "data-pvc": ClaimView(True, "Bound")}, "bind", "first consumer"),
    ({"root-dv": ClaimView(False, dv_phase="Failed")}, "failed", "DataVolume ns/root-dv failed"),
])
def test_readiness(views: dict, verdict: str, text: str) -> None:
    r = readiness(claims=disk_claims(spec()), views=views, namespace="ns")
    assert r.verdict == verdict and text in r.message


def test_launcher_pod() -> None:
    v = vmi()
    v["spec"]["terminationGracePeriodSeconds"] = 10
    views = {"root-dv": ClaimView(True, "Bound", "Block", "Succeeded"),
             "data-pvc": ClaimView(True, "Bound", "Filesystem")}
    pod = launcher_pod(vmi=v, claims=disk_claims(v["spec"]), views=views,
                       config=LauncherConfig(driver="libvirt", emulation=True))
    meta, ps = pod["metadata"], pod["spec"]
    assert meta["generateName"] == "virt-launcher-vm1-"
    assert meta["labels"] == {"app": "x", "kubevirt.io": "virt-launcher",
                              "kubevirt.io/created-by": "uid-1", "vm.kubevirt.io/name": "vm1",
                              "vmi.kubevirt.io/id": "vm1"}
    assert meta["ownerReferences"][0]["uid"] == "uid-1"
    assert ps["restartPolicy"] == "Never" and ps["terminationGracePeriodSeconds"] == 40
    assert ps["securityContext"]["fsGroup"] == 107 and ps["automountServiceAccountToken"] is False
    compute, console = ps["containers"]
    # PodSecurity (issue 24): upstream's launcher sets a seccomp profile only when KubeVirt
    # is configured with one, so it is not "restricted" either; this one also mounts its
    # socket directory from the node (hostPath), which "baseline" refuses: a VM needs a
    # namespace whose enforce level is privileged (or unlabelled).
    assert psa.evaluate(psa.BASELINE, None, meta, ps) == [
        ("hostPath volumes", 'volume "sockets"')]
    assert [r for r, _ in psa.evaluate(psa.RESTRICTED, None, meta, ps)] == [
        "restricted volume types", "seccompProfile"]
    assert compute["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    assert compute["securityContext"]["runAsUser"] == 107
    assert compute["securityContext"]["allowPrivilegeEscalation"] is False
    env = {e["name"]: e.get("value") or e["valueFrom"] for e in compute["env"]}
    assert env["POD_IP"] == {"fieldRef": {"fieldPath": "status.podIP"}}
    assert env["LAUNCHER_DRIVER"] == "libvirt" and env["USE_EMULATION"] == "true"
    sent = json.loads(env["VMI"])
    assert sent["metadata"] == {"name": "vm1", "namespace": "ns", "uid": "uid-1"}
    assert sent["spec"]["volumes"][0]["name"] == "root"
    assert compute["volumeDevices"] == [{"name": "root", "devicePath": "/dev/root"}]
    mounts = {m["mountPath"]: m for m in compute["volumeMounts"]}
    assert mounts["/var/run/kubevirt-private/vmi-disks/data"]["readOnly"] is True
    for path in ("/var/run/kubevirt-private", "/var/run/kubevirt", "/var/run/libvirt",
                 "/var/run/kubevirt/sockets"):
        assert path in mounts
    vols = {v["name"]: v for v in ps["volumes"]}
    assert vols["private"] == {"name": "private", "emptyDir": {}}
    assert vols["vmi-disks"] == {"name": "vmi-disks", "emptyDir": {}}
    assert mounts["/var/run/kubevirt-private/vmi-disks"]["name"] == "vmi-disks"
    assert vols["root"]["persistentVolumeClaim"]["claimName"] == "root-dv"
    assert vols["sockets"]["hostPath"] == {"path": "/var/run/kubevirt/sockets/uid-1",
                                           "type": "Directory"}
    assert "ci" not in vols  # not a claim: the launcher reads it from the VMI
    assert "devices.kubevirt.io/kvm" not in compute["resources"].get("limits", {})
    assert console["name"] == "guest-console-log"
    assert console["command"] == ["python", "-m", "vm.launcher.console_log",
                                  "/var/run/kubevirt-private/console.log"]


def test_launcher_pod_mounts_only_its_own_socket_directory() -> None:
    """The only node path in a launcher pod is its VMI's socket directory, never the
    node's socket directory that holds every VMI's; each container sees it (or none)."""
    config = LauncherConfig(host_sockets="/var/run/kubevirt/sockets")
    for uid in ("uid-1", "0b7e6c1a-5d4f-4e2b-9a8c-7d6e5f4a3b21"):
        v = vmi()
        v["metadata"]["uid"] = uid
        pod = launcher_pod(vmi=v, claims=[], views={}, config=config)
        host = {vol["name"]: vol["hostPath"] for vol in pod["spec"]["volumes"]
                if "hostPath" in vol}
        assert host == {"sockets": {"path": f"/var/run/kubevirt/sockets/{uid}",
                                    "type": "Directory"}}
        mounted = [(c["name"], m["mountPath"]) for c in pod["spec"]["containers"]
                   for m in c.get("volumeMounts") or [] if m["name"] == "sockets"]
        assert mounted == [("compute", "/var/run/kubevirt/sockets")]
        assert not any("subPath" in m or "subPathExpr" in m
                       for c in pod["spec"]["containers"] for m in c["volumeMounts"])


def test_launcher_pod_with_kvm_and_default_grace() -> None:
    v = vmi()
    pod = launcher_pod(vmi=v, claims=[], views={}, config=LauncherConfig(emulation=False))
    compute = pod["spec"]["containers"][0]
    assert compute["resources"]["limits"]["devices.kubevirt.io/kvm"] == "1"
    assert pod["spec"]["terminationGracePeriodSeconds"] == 60


def test_binding_pod() -> None:
    v = vmi()
    pod = binding_pod(vmi=v, claims=disk_claims(v["spec"]))
    assert pod["metadata"]["annotations"] == {"kubevirt.io/ephemeral-provisioning": "true"}
    assert [x["persistentVolumeClaim"]["claimName"] for x in pod["spec"]["volumes"]] == [
        "root-dv", "data-pvc"]
    assert pod["spec"]["containers"][0]["command"][-1] == "echo bound PVCs"


def test_vmi_id_label_is_the_name_or_a_hashed_prefix_when_too_long() -> None:
    from vocab.kubevirt import vmi_id_label
    assert vmi_id_label("vm1") == "vm1"
    long = "a" * 70
    got = vmi_id_label(long)
    assert len(got) == 63 and got.startswith("a" * 54 + "-") and got != vmi_id_label("a" * 71)


def test_container_disks_are_image_volumes() -> None:
    """As upstream's ImageVolume feature gate renders them: an ``image`` volume per
    containerDisk, mounted read-only at /var/run/kubevirt-image-volume/disk_<index>, its
    imagePullSecret among the pod's imagePullSecrets."""
    v = vmi()
    v["spec"]["volumes"] = [
        {"name": "ci", "cloudInitNoCloud": {"userData": "#cloud-config\n"}},
        {"name": "root", "containerDisk": {"image": "quay.io/containerdisks/fedora:41",
                                           "imagePullPolicy": "IfNotPresent",
                                           "imagePullSecret": "pull"}},
        {"name": "data", "containerDisk": {"image": "r/x@sha256:" + "a" * 64,
                                           "imagePullSecret": "pull"}}]
    pod = launcher_pod(vmi=v, claims=[], views={}, config=LauncherConfig())
    volumes = {vol["name"]: vol for vol in pod["spec"]["volumes"]}
    assert volumes["root"] == {"name": "root", "image": {
        "reference": "quay.io/containerdisks/fedora:41", "pullPolicy": "IfNotPresent"}}
    assert volumes["data"] == {"name": "data", "image": {"reference": "r/x@sha256:" + "a" * 64}}
    [compute] = [c for c in pod["spec"]["containers"] if c["name"] == "compute"]
    mounts = {m["name"]: m for m in compute["volumeMounts"]}
    assert mounts["root"] == {"name": "root", "readOnly": True,
                              "mountPath": "/var/run/kubevirt-image-volume/disk_1"}
    assert mounts["data"]["mountPath"] == "/var/run/kubevirt-image-volume/disk_2"
    assert pod["spec"]["imagePullSecrets"] == [{"name": "pull"}]
