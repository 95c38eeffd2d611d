"""VMI admission of configuration volumes, emptyDisk, ephemeral and access credentials:
upstream's cases (vmi-create-admitter_test.go) with upstream's messages word for word, and
the refusals of what rootdisk's runtime cannot run."""

from __future__ import annotations

import base64
from typing import Any

import pytest

from vm.webhooks.review import respond
from vm.webhooks.vmi_rules import validate_vmi_spec

NC = "spec.volumes[1].cloudInitNoCloud"
CD = "spec.volumes[1].cloudInitConfigDrive"


def spec(volume: dict[str, Any] | None = None, *, creds: list[Any] | None = None,
         disks: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    s: dict[str, Any] = {
        "domain": {"resources": {"requests": {"memory": "64Mi"}},
                   "devices": {"disks": disks if disks is not None else
                               [{"name": "root", "disk": {"bus": "virtio"}}]}},
        "volumes": [{"name": "root", "persistentVolumeClaim": {"claimName": "pvc"}}],
    }
    if volume is not None:
        s["volumes"].append({"name": "ci", **volume})
    if creds is not None:
        s["accessCredentials"] = creds
    return s


def messages(s: dict[str, Any]) -> list[str]:
    return [str(p) for p in validate_vmi_spec(s)]


B64 = base64.b64encode(b"#cloud-config\n").decode()
BIG = "x" * 2049
BIG64 = base64.b64encode(b"x" * 2049).decode()

ACCEPTED = [
    ("nocloud-userdata", {"cloudInitNoCloud": {"userData": "#cloud-config\n"}}),
    ("nocloud-userdata-2048", {"cloudInitNoCloud": {"userData": "x" * 2048}}),
    ("nocloud-base64", {"cloudInitNoCloud": {"userDataBase64": B64}}),
    ("nocloud-secret", {"cloudInitNoCloud": {"secretRef": {"name": "s"}}}),
    ("nocloud-network-only", {"cloudInitNoCloud": {"networkData": "version: 2\n"}}),
    ("nocloud-network-secret", {"cloudInitNoCloud": {"networkDataSecretRef": {"name": "n"}}}),
    ("nocloud-both", {"cloudInitNoCloud": {"userData": "a", "networkDataBase64": B64}}),
    ("configdrive-userdata", {"cloudInitConfigDrive": {"userData": "#cloud-config\n"}}),
    ("configdrive-secret", {"cloudInitConfigDrive": {"secretRef": {"name": "s"},
                                                     "networkDataSecretRef": {"name": "s"}}}),
    ("emptydisk", {"emptyDisk": {"capacity": "1Gi"}}),
    ("emptydisk-1mi", {"emptyDisk": {"capacity": "1Mi"}}),
    ("ephemeral", {"ephemeral": {"persistentVolumeClaim": {"claimName": "golden"}}}),
]


@pytest.mark.parametrize("volume", [c[1] for c in ACCEPTED], ids=[c[0] for c in ACCEPTED])
def test_accepted(volume: dict[str, Any]) -> None:
    assert messages(spec(volume)) == []


REFUSED = [
    ("two-userdata", {"cloudInitNoCloud": {"userData": "a", "userDataBase64": B64}},
     f"{NC} must have only one userdatasource set."),
    ("userdata-and-secret", {"cloudInitConfigDrive": {"userData": "a",
                                                      "secretRef": {"name": "s"}}},
     f"{CD} must have only one userdatasource set."),
    ("two-networkdata", {"cloudInitNoCloud": {"networkData": "a",
                                              "networkDataSecretRef": {"name": "s"}}},
     f"{NC} must have only one networkdata source set."),
    ("none", {"cloudInitNoCloud": {}},
     f"{NC} must have at least one userdatasource or one networkdatasource set."),
    ("none-configdrive", {"cloudInitConfigDrive": {"userData": ""}},
     f"{CD} must have at least one userdatasource or one networkdatasource set."),
    ("userdata-too-big", {"cloudInitNoCloud": {"userData": BIG}},
     f"{NC} userdata exceeds 2048 byte limit. Should use UserDataSecretRef for larger data."),
    ("userdata-base64-too-big", {"cloudInitConfigDrive": {"userDataBase64": BIG64}},
     f"{CD} userdata exceeds 2048 byte limit. Should use UserDataSecretRef for larger data."),
    ("userdata-multibyte-too-big", {"cloudInitNoCloud": {"userData": "é" * 1025}},
     f"{NC} userdata exceeds 2048 byte limit. Should use UserDataSecretRef for larger data."),
    ("networkdata-too-big", {"cloudInitNoCloud": {"networkData": BIG}},
     f"{NC} networkdata exceeds 2048 byte limit. Should use NetworkDataSecretRef for larger "
     "data."),
    ("bad-base64", {"cloudInitNoCloud": {"userDataBase64": "!!!"}},
     f"{NC}.userDataBase64.cloudInitNoCloud.userDataBase64 is not a valid base64 value."),
    ("secret-without-name", {"cloudInitNoCloud": {"userData": "a",
                                                  "networkDataSecretRef": {}}},
     f"{NC}.networkDataSecretRef.name: required"),
    ("emptydisk-too-small", {"emptyDisk": {"capacity": "1000Ki"}},
     "spec.volumes[1].emptyDisk.capacity: the size for volume ci is too low"),
    ("emptydisk-no-capacity", {"emptyDisk": {}},
     "spec.volumes[1].emptyDisk.capacity: required"),
    ("ephemeral-no-claim", {"ephemeral": {}},
     "spec.volumes[1].ephemeral.persistentVolumeClaim: required"),
    ("ephemeral-no-claim-name", {"ephemeral": {"persistentVolumeClaim": {}}},
     "spec.volumes[1].ephemeral.persistentVolumeClaim.claimName: required"),
    ("datavolume-no-name", {"dataVolume": {}}, "DataVolume 'name' must be set"),
]


@pytest.mark.parametrize(("volume", "message"), [c[1:] for c in REFUSED],
                         ids=[c[0] for c in REFUSED])
def test_refused_with_upstream_message(volume: dict[str, Any], message: str) -> None:
    assert message in messages(spec(volume))


UNSUPPORTED = ["hostDisk", "configMap", "secret", "serviceAccount",
               "downwardAPI", "downwardMetrics", "sysprep", "memoryDump", "containerPath"]


@pytest.mark.parametrize("source", UNSUPPORTED)
def test_sources_the_runtime_cannot_run_are_refused(source: str) -> None:
    [msg] = messages(spec({source: {"name": "x"}}))
    assert msg.startswith(f"spec.volumes[1].{source}: this volume source is not supported")


@pytest.mark.parametrize(("body", "expected"), [
    ({"image": "quay.io/containerdisks/fedora:41"}, []),
    ({"image": "r/x", "path": "/disk/x.qcow2", "imagePullPolicy": "Always"}, []),
    ({"image": "r/x", "path": "/disk/x/"}, []),
    ({}, ["spec.volumes[1].containerDisk.image: required"]),
    ({"image": "r/x", "path": "/"},
     ["spec.volumes[1].containerDisk must not point to root"]),
    ({"image": "r/x", "path": "disk/x"},
     ["spec.volumes[1].containerDisk must be an absolute path to a file without relative"
      " components"]),
    ({"image": "r/x", "path": "/disk/../etc/shadow"},
     ["spec.volumes[1].containerDisk must be an absolute path to a file without relative"
      " components"]),
    ({"image": "r/x", "imagePullPolicy": "Sometimes"},
     ["spec.volumes[1].containerDisk.imagePullPolicy: Unsupported value: 'Sometimes':"
      " supported values: 'Always', 'IfNotPresent', 'Never'"]),
])
def test_container_disks(body: dict[str, Any], expected: list[str]) -> None:
    """Upstream's ValidateContainerDisks (the path, word for word) and the API's rules."""
    assert messages(spec({"containerDisk": body})) == expected


def test_devices_the_runtime_cannot_run_are_refused() -> None:
    lun = messages(spec(disks=[{"name": "root", "lun": {}}]))
    assert lun == ["spec.domain.devices.disks[0].lun: LUN pass-through is not supported by "
                   "rootdisk's VM runtime (use disk or cdrom)"]
    usb = messages(spec(disks=[{"name": "root", "disk": {"bus": "usb"}}]))
    assert usb == ["spec.domain.devices.disks[0].disk.bus: 'usb' is not one of virtio, sata, "
                   "scsi"]
    cache = messages(spec(disks=[{"name": "root", "cache": "unsafe"}]))
    assert cache == ["spec.domain.devices.disks[0].cache: 'unsafe' is not one of none, "
                     "writethrough, writeback"]


def test_sata_ports_count_disks_left_on_the_default_bus_and_volumes_without_disk() -> None:
    s = spec()
    for i in range(5):
        s["volumes"].append({"name": f"e{i}", "emptyDisk": {"capacity": "1Mi"}})
    s["domain"]["devices"]["disks"] = [{"name": "root"}, {"name": "e0", "cdrom": {}}]
    assert messages(s) == []  # root, e0 (declared) and e1..e4 (no disk): six
    s["volumes"].append({"name": "e5", "emptyDisk": {"capacity": "1Mi"}})
    assert messages(s) == ["spec.domain.devices.disks: 7 disks on the sata bus (the default), "
                           "at most 6 fit on q35's controller"]


def test_a_second_cloud_init_volume_is_refused() -> None:
    s = spec({"cloudInitNoCloud": {"userData": "a"}})
    s["volumes"].append({"name": "ci2", "cloudInitConfigDrive": {"userData": "b"}})
    assert messages(s) == ["spec.volumes[2]: a second cloud-init volume (the first is 'ci'): "
                           "the runtime builds one cloud-init disk"]


def ssh(method: dict[str, Any], secret: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"sshPublicKey": {"source": {"secret": secret or {"secretName": "keys"}},
                             "propagationMethod": method}}


AC = "spec.accessCredentials[0]"
CREDS = [
    ("nocloud-ok", {"cloudInitNoCloud": {"userData": "a"}}, ssh({"noCloud": {}}), None),
    ("configdrive-ok", {"cloudInitConfigDrive": {"userData": "a"}},
     ssh({"configDrive": {}}), None),
    ("nocloud-missing", {"cloudInitConfigDrive": {"userData": "a"}}, ssh({"noCloud": {}}),
     f"{AC} requires a noCloud volume to exist when the noCloud propagationMethod is in use."),
    ("configdrive-missing", {"cloudInitNoCloud": {"userData": "a"}},
     ssh({"configDrive": {}}),
     f"{AC} requires a configDrive volume to exist when the configDrive propagationMethod "
     "is in use."),
    ("two-methods", {"cloudInitNoCloud": {"userData": "a"}},
     ssh({"noCloud": {}, "qemuGuestAgent": {"users": ["u"]}}),
     f"{AC} must have exactly one propagationMethod set"),
    ("no-method", {"cloudInitNoCloud": {"userData": "a"}}, ssh({}),
     f"{AC} must have exactly one propagationMethod set"),
    ("no-source", {"cloudInitNoCloud": {"userData": "a"}},
     {"sshPublicKey": {"source": {}, "propagationMethod": {"noCloud": {}}}},
     f"{AC} must have exactly one source set"),
    ("agent-no-users", None, ssh({"qemuGuestAgent": {}}),
     f"{AC} requires at least one user to be present in the users list"),
    ("agent", None, ssh({"qemuGuestAgent": {"users": ["u"]}}),
     f"{AC}.sshPublicKey.propagationMethod.qemuGuestAgent: not supported by rootdisk's VM "
     "runtime (it has no guest agent channel): use the noCloud or configDrive "
     "propagationMethod"),
    ("user-password", None,
     {"userPassword": {"source": {"secret": {"secretName": "p"}},
                       "propagationMethod": {"qemuGuestAgent": {}}}},
     f"{AC}.userPassword: not supported by rootdisk's VM runtime (it needs the "
     "qemuGuestAgent propagationMethod, and the runtime has no guest agent channel)"),
    ("no-type", None, {}, f"{AC} must have exactly one access credential type set"),
    ("secret-name-not-a-volume-name", {"cloudInitNoCloud": {"userData": "a"}},
     ssh({"noCloud": {}}, {"secretName": "a.b"}),
     f"{AC}.sshPublicKey.source.secret.secretName: the launcher pod mounts this Secret as "
     "volume 'a.b-access-cred': 'a.b-access-cred' is not a valid volume name: a lowercase "
     "RFC 1123 label must consist of lower case alphanumeric characters or '-', and must "
     "start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex "
     "used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')"),
]


@pytest.mark.parametrize(("volume", "cred", "message"), [c[1:] for c in CREDS],
                         ids=[c[0] for c in CREDS])
def test_access_credentials(volume: dict[str, Any] | None, cred: dict[str, Any],
                            message: str | None) -> None:
    got = messages(spec(volume, creds=[cred]))
    if message is None:
        assert got == []
    else:
        assert message in got


def test_review_message_is_upstreams_text() -> None:
    review = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": "u", "operation": "CREATE", "namespace": "ns",
        "object": {"metadata": {"name": "x"}, "spec": spec({"cloudInitNoCloud": {}})},
        "resource": {"group": "kubevirt.io", "version": "v1",
                     "resource": "virtualmachineinstances"}}}
    out = respond(review)["response"]
    assert out["allowed"] is False
    assert out["status"]["message"] == (
        f"{NC} must have at least one userdatasource or one networkdatasource set.")


def test_secret_pod_volume_names_are_checked() -> None:
    s = spec({"cloudInitNoCloud": {"secretRef": {"name": "s"}}})
    s["volumes"].append({"name": "ci-udata", "emptyDisk": {"capacity": "1Mi"}})
    assert messages(s) == ["spec.volumes: volume 'ci-udata' collides with the launcher pod's "
                           "volume for a Secret of the same name"]
    long = spec()
    long["volumes"].append({"name": "v" * 60, "cloudInitNoCloud": {"secretRef": {"name": "s"}}})
    [msg] = messages(long)
    assert msg.startswith(f"spec.volumes: the launcher pod mounts a Secret as volume "
                          f"'{'v' * 60}-udata': ")


@pytest.mark.parametrize(("key", "value"), [
    ("watchdog", {"name": "w", "i6300esb": {}}), ("inputs", [{"name": "t", "type": "tablet"}]),
    ("gpus", [{"name": "g", "deviceName": "x"}]), ("hostDevices", [{"name": "h"}]),
    ("filesystems", [{"name": "f", "virtiofs": {}}]), ("downwardMetrics", {}),
    ("panicDevices", [{"model": "isa"}]), ("clientPassthrough", {}), ("sound", {"name": "s"}),
    ("tpm", {}),
])
def test_devices_the_launcher_does_not_build_are_refused(key: str, value: Any) -> None:
    s = spec()
    s["domain"]["devices"][key] = value
    assert messages(s) == [f"spec.domain.devices.{key}: this device is not supported by "
                           "rootdisk's VM runtime"]


def test_device_switches() -> None:
    s = spec()
    s["domain"]["devices"].update(autoattachVSOCK=True, useVirtioTransitional=True,
                                  autoattachGraphicsDevice=False, inputs=[])
    assert messages(s) == [
        "spec.domain.devices.autoattachVSOCK: VSOCK is not supported by rootdisk's VM runtime",
        "spec.domain.devices.useVirtioTransitional: rootdisk's VM runtime attaches "
        "virtio-non-transitional devices only"]


def test_read_only_on_sata_is_refused_also_on_the_default_bus() -> None:
    assert messages(spec(disks=[{"name": "root", "disk": {"readonly": True}}])) == [
        "spec.domain.devices.disks[0].disk.readonly: a SATA disk cannot be read-only"]
    s = spec(disks=[{"name": "root", "disk": {}}])
    s["volumes"][0]["persistentVolumeClaim"]["readOnly"] = True
    assert messages(s) == [
        "spec.domain.devices.disks[0].disk.bus: volume 'root' is a read-only claim "
        "(persistentVolumeClaim.readOnly) and a SATA disk cannot be read-only: use the "
        "virtio or scsi bus, or a cdrom"]
    s["domain"]["devices"]["disks"][0]["disk"]["bus"] = "virtio"
    assert messages(s) == []
