"""Cloud-init data and the new disks in the domain: meta-data JSON as upstream's, the
ISO's file layout, parsing of the volumes, and both renderers' spelling of the qcow2
images (an overlay's backing) and the read-only ISO."""

from __future__ import annotations

import base64
import gzip
import json
import xml.etree.ElementTree as ET
from typing import Any

import pytest

from vm.domain import cloudinit, render_libvirt, render_qemu
from vm.domain.builder import build
from vm.domain.errors import DomainError, UnsupportedError
from vm.domain.model import Backing
from vm.domain.options import BuildOptions, PreparedDisk
from vm.domain.vmi import parse_vmi

UID = "6a1c2b9e-8d4e-4c1f-9a57-3f0e5b7c1d22"


def test_nocloud_meta_data_is_upstreams_json() -> None:
    meta = cloudinit.meta_data(source="noCloud", name="vm1", namespace="ns", uuid=UID,
                               host="vm1", itype="", keys=[])
    assert meta == b'{"instance-id":"' + UID.encode() + b'","local-hostname":"vm1"}'
    keys = [f"ssh-ed25519 K{i}" for i in range(11)]
    full = json.loads(cloudinit.meta_data(source="noCloud", name="vm1", namespace="ns",
                                          uuid=UID, host="h", itype="u1.small", keys=keys))
    assert list(full) == ["instance-type", "instance-id", "local-hostname", "public-keys"]
    assert full["public-keys"]["10"] == "ssh-ed25519 K10"
    # Go's encoding/json sorts map keys as strings
    assert list(full["public-keys"])[:3] == ["0", "1", "10"]


def test_configdrive_meta_data_is_upstreams_json() -> None:
    meta = json.loads(cloudinit.meta_data(source="configDrive", name="vm1", namespace="ns",
                                          uuid=UID, host="vm1", itype="", keys=["k"]))
    assert meta == {"instance_id": "vm1.ns", "hostname": "vm1", "uuid": UID,
                    "public_keys": {"0": "k"}}


def test_hostname_is_spec_hostname_else_the_name_to_its_first_dot() -> None:
    assert cloudinit.hostname("web.example", None) == "web"
    assert cloudinit.hostname("x" * 70, None) == "x" * 63
    assert cloudinit.hostname("web.example", "given") == "given"


def source(kind: str, **body: Any) -> cloudinit.CloudInitSpec:
    return cloudinit.parse_source("ci", kind, body, "spec.volumes[1]." + kind)


def test_files_nocloud_always_has_user_data() -> None:
    spec = source("cloudInitNoCloud", networkData="version: 2\n")
    assert cloudinit.files(spec, b"{}") == {"meta-data": b"{}", "user-data": b"",
                                            "network-config": b"version: 2\n"}


def test_binary_user_data_is_kept_as_bytes() -> None:
    """cloud-init takes gzipped user data: base64 of any bytes is fine."""
    data = gzip.compress(b"#cloud-config\n")
    spec = source("cloudInitNoCloud", userDataBase64=base64.b64encode(data).decode())
    assert cloudinit.files(spec, b"{}")["user-data"] == data


def test_files_configdrive_layout() -> None:
    b64 = base64.b64encode(b"#cloud-config\n").decode()
    spec = source("cloudInitConfigDrive", userDataBase64=b64)
    assert cloudinit.files(spec, b"{}") == {"openstack/latest/meta_data.json": b"{}",
                                            "openstack/latest/user_data": b"#cloud-config\n"}


def test_secret_data_is_merged_and_never_in_repr() -> None:
    spec = source("cloudInitNoCloud", secretRef={"name": "s"})
    assert spec.user_data is None and spec.user_data_secret
    resolved = cloudinit.resolve(spec, user_data=b"SECRET-ud", network_data=b"SECRET-nd")
    assert resolved.user_data == b"SECRET-ud"
    assert resolved.network_data is None  # no networkDataSecretRef: not taken
    assert "SECRET" not in repr(resolved)


@pytest.mark.parametrize(("body", "field"), [
    ({}, "spec.volumes[1].cloudInitNoCloud"),
    ({"userDataBase64": "!!"}, "spec.volumes[1].cloudInitNoCloud.userDataBase64"),
    ({"userData": 3}, "spec.volumes[1].cloudInitNoCloud.userData"),
])
def test_bad_sources_name_the_field(body: dict[str, Any], field: str) -> None:
    with pytest.raises(DomainError) as err:
        source("cloudInitNoCloud", **body)
    assert err.value.field == field


def vmi(volumes: list[dict[str, Any]], disks: list[dict[str, Any]],
        **spec: Any) -> dict[str, Any]:
    return {"metadata": {"name": "vm1", "namespace": "ns1", "uid": UID},
            "spec": {"domain": {"resources": {"requests": {"memory": "64Mi"}},
                                "devices": {"disks": disks}},
                     "volumes": volumes, **spec}}


VOLUMES = [
    {"name": "root", "ephemeral": {"persistentVolumeClaim": {"claimName": "golden"}}},
    {"name": "scratch", "emptyDisk": {"capacity": "10Mi"}},
    {"name": "ci", "cloudInitNoCloud": {"userData": "#cloud-config\n"}},
]


def test_parse_volumes_and_default_disks() -> None:
    spec = parse_vmi(vmi([*VOLUMES, {"name": "data", "emptyDisk": {"capacity": "1500Ki"}}],
                         [{"name": "root", "disk": {"bus": "virtio"}}]))
    kinds = {v.name: (v.kind, v.claim_name, v.capacity) for v in spec.volumes}
    assert kinds == {"root": ("ephemeral", "golden", 0), "scratch": ("emptyDisk", "", 10 << 20),
                     "ci": ("cloudInit", "", 0), "data": ("emptyDisk", "", 1 << 20)}
    # volumes without a disk are attached as disks on the default bus (sata)
    assert [(d.name, d.kind, d.bus) for d in spec.disks] == [
        ("root", "disk", "virtio"), ("scratch", "disk", "sata"), ("ci", "disk", "sata"),
        ("data", "disk", "sata")]


def test_launcher_refuses_what_it_cannot_run() -> None:
    with pytest.raises(DomainError, match="the size for volume e is too low"):
        parse_vmi(vmi([{"name": "e", "emptyDisk": {"capacity": "1000Ki"}}], []))
    with pytest.raises(UnsupportedError, match="only noCloud and configDrive"):
        parse_vmi(vmi(VOLUMES, [], accessCredentials=[{"sshPublicKey": {
            "source": {"secret": {"secretName": "k"}},
            "propagationMethod": {"qemuGuestAgent": {"users": ["u"]}}}}]))
    with pytest.raises(UnsupportedError, match="this volume source is not supported"):
        parse_vmi(vmi([{"name": "c", "hostDisk": {"path": "/x"}}], []))


PREPARED = (
    PreparedDisk("root", "/e/disk-data/root/disk.qcow2", "qcow2",
                 Backing("/p/vmi-disks/root/disk.img")),
    PreparedDisk("scratch", "/r/empty-disks/scratch.qcow2", "qcow2"),
    PreparedDisk("ci", "/e/cloud-init-data/ns1/vm1/noCloud.iso", "raw"),
)


def domain(disks: list[dict[str, Any]], backing_block: bool = False) -> Any:
    prepared = PREPARED
    if backing_block:
        prepared = (PreparedDisk("root", PREPARED[0].path, "qcow2",
                                 Backing("/dev/root", "block")), *PREPARED[1:])
    return build(vmi=vmi(VOLUMES, disks), options=BuildOptions(
        private_dir="/p", prepared=prepared, direct_io=frozenset({"root", "scratch"})))


def test_configurator_uses_the_prepared_images() -> None:
    d = domain([{"name": "root", "disk": {"bus": "virtio"}}, {"name": "scratch"},
                {"name": "ci", "cdrom": {"bus": "sata"}}])
    by = {x.alias: x for x in d.disks}
    assert (by["ua-root"].format, by["ua-root"].path, by["ua-root"].backing) == (
        "qcow2", "/e/disk-data/root/disk.qcow2", Backing("/p/vmi-disks/root/disk.img"))
    assert (by["ua-scratch"].format, by["ua-scratch"].cache) == ("qcow2", "none")
    ci = by["ua-ci"]
    assert (ci.format, ci.device, ci.read_only, ci.discard, ci.cache) == (
        "raw", "cdrom", True, None, "writethrough")
    # a cloud-init disk on virtio is read-only; on sata (ide-hd cannot be) it is not
    virtio = domain([{"name": "ci", "disk": {"bus": "virtio"}}])
    assert {x.alias: x.read_only for x in virtio.disks}["ua-ci"] is True
    sata = domain([{"name": "ci", "disk": {}}])
    assert {x.alias: x.read_only for x in sata.disks}["ua-ci"] is False


def test_qemu_spells_the_overlay_backing_and_the_iso() -> None:
    argv = render_qemu.render(domain([{"name": "root", "disk": {"bus": "virtio"}},
                                      {"name": "ci", "cdrom": {}}], backing_block=True),
                              qmp_socket="/q")
    drives = [argv[i + 1] for i, a in enumerate(argv) if a == "-drive"]
    root = next(d for d in drives if "id=drive-ua-root" in d)
    assert "file.filename=/e/disk-data/root/disk.qcow2,format=qcow2,backing.driver=raw," \
           "backing.file.driver=host_device,backing.file.filename=/dev/root," in root
    iso = next(d for d in drives if "id=drive-ua-ci" in d)
    assert "format=raw" in iso and "readonly=on" in iso
    scratch = next(d for d in drives if "id=drive-ua-scratch" in d)
    assert "format=qcow2" in scratch and "backing" not in scratch


def test_libvirt_spells_the_overlay_backing_store() -> None:
    root = ET.fromstring(render_libvirt.to_xml(domain([{"name": "root",  # noqa: S314
                                                         "disk": {"bus": "virtio"}}])))
    disks = {d.find("alias").get("name"): d for d in root.iter("disk")}  # type: ignore[union-attr]
    r = disks["ua-root"]
    assert r.find("driver").get("type") == "qcow2"  # type: ignore[union-attr]
    store = r.find("backingStore")
    assert store is not None and store.get("type") == "file"
    assert store.find("format").get("type") == "raw"  # type: ignore[union-attr]
    assert store.find("source").get("file") == "/p/vmi-disks/root/disk.img"  # type: ignore[union-attr]
    ci = disks["ua-ci"]
    assert ci.find("driver").get("type") == "raw"  # type: ignore[union-attr]
    assert ci.find("backingStore") is None


def test_a_read_only_claim_is_attached_read_only() -> None:
    raw = vmi([{"name": "root", "persistentVolumeClaim": {"claimName": "c", "readOnly": True}}],
              [{"name": "root", "disk": {"bus": "virtio"}}])
    d = build(vmi=raw, options=BuildOptions(private_dir="/p"))
    assert d.disks[0].read_only is True
    raw["spec"]["domain"]["devices"]["disks"][0]["disk"]["bus"] = "sata"
    with pytest.raises(DomainError, match="a SATA disk cannot be read-only"):
        build(vmi=raw, options=BuildOptions(private_dir="/p"))


@pytest.mark.parametrize("name", ["../../etc", "a/b", "UPPER", ".."])
def test_an_ssh_key_secret_name_must_be_a_subdomain(name: str) -> None:
    """It becomes a directory name in the launcher (webhook bypassed or not)."""
    with pytest.raises(DomainError, match="is not a DNS-1123 subdomain"):
        parse_vmi(vmi(VOLUMES, [], accessCredentials=[{"sshPublicKey": {
            "source": {"secret": {"secretName": name}},
            "propagationMethod": {"noCloud": {}}}}]))
