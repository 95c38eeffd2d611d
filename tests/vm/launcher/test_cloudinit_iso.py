"""The cloud-init ISO built by the launcher with the real xorrisofs, read back with
xorriso: volume label, file names, meta-data JSON, Secret data and SSH keys; staged files
removed; bounded by a timeout."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from vm.domain.vmi import parse_vmi
from vm.launcher import cloudinit
from vm.launcher.cloudinit import CloudInitError

UID = "6a1c2b9e-8d4e-4c1f-9a57-3f0e5b7c1d22"
FW = "0b2a0a1e-1111-4c1f-9a57-3f0e5b7c1d22"

pytestmark = pytest.mark.skipif(not shutil.which("xorrisofs"), reason="needs xorriso")


def vmi(volume: dict[str, Any], **spec: Any) -> dict[str, Any]:
    return {"metadata": {"name": "web.example", "namespace": "ns1", "uid": UID,
                         "annotations": {"kubevirt.io/instancetype-name": "u1.small"}},
            "spec": {"domain": {"resources": {"requests": {"memory": "64Mi"}},
                                "firmware": {"uuid": FW},
                                "devices": {"disks": [{"name": "ci", "cdrom": {}}]}},
                     "volumes": [{"name": "ci", **volume}], **spec}}


def read_iso(iso: Path, out: Path) -> tuple[str, dict[str, bytes]]:
    """(volume id, {path: content}) of ``iso``, through xorriso."""
    info = subprocess.run(["xorriso", "-indev", str(iso), "-pvd_info"], capture_output=True,
                          text=True, check=True, timeout=30).stdout
    label = next(line.split(":", 1)[1].strip() for line in info.splitlines()
                 if line.startswith("Volume Id"))
    subprocess.run(["xorriso", "-osirrox", "on", "-indev", str(iso), "-extract", "/",
                    str(out)], capture_output=True, check=True, timeout=30)
    files = {str(p.relative_to(out)): p.read_bytes() for p in out.rglob("*") if p.is_file()}
    return label, files


def ssh_secret(secret_dir: Path, name: str, files: dict[str, str]) -> None:
    """A Secret volume as a kubelet lays it out: ..data symlinks and key symlinks."""
    d = secret_dir / f"{name}-access-cred"
    data = d / "..2026_12_04"
    data.mkdir(parents=True)
    for key, value in files.items():
        (data / key).write_text(value)
    (d / "..data").symlink_to(data.name)
    (d / "..stray").write_text("ssh-rsa STRAY")  # the kubelet's names are skipped
    for key in files:
        (d / key).symlink_to(f"..data/{key}")


def test_nocloud_iso_with_secret_user_data_and_ssh_keys(tmp_path: Path) -> None:
    secrets, eph = tmp_path / "secret", tmp_path / "eph"
    (secrets / "ci").mkdir(parents=True)
    (secrets / "ci" / "userData").write_bytes(b"#cloud-config\nSECRET: 1\n\xff")
    ssh_secret(secrets, "keys", {"b": "ssh-ed25519 BBB", "a": "ssh-ed25519 AAA", "empty": ""})
    spec = parse_vmi(vmi({"cloudInitNoCloud": {"secretRef": {"name": "s"},
                                               "networkData": "version: 2\n"}},
                         accessCredentials=[{"sshPublicKey": {
                             "source": {"secret": {"secretName": "keys"}},
                             "propagationMethod": {"noCloud": {}}}}]))
    disk = cloudinit.prepare(spec, secret_dir=str(secrets), ephemeral_dir=str(eph))
    assert disk is not None and disk.volume == "ci" and disk.format == "raw"
    iso = Path(disk.path)
    assert iso == eph / "cloud-init-data" / "ns1" / "web.example" / "noCloud.iso"
    assert stat.S_IMODE(iso.stat().st_mode) == 0o600
    # staged inputs and the staging ISO are gone
    assert sorted(os.listdir(iso.parent)) == ["noCloud.iso"]
    label, files = read_iso(iso, tmp_path / "out")
    assert label == "cidata"
    assert set(files) == {"meta-data", "user-data", "network-config"}
    assert files["user-data"] == b"#cloud-config\nSECRET: 1\n\xff"  # bytes as they are
    assert files["network-config"] == b"version: 2\n"
    assert json.loads(files["meta-data"]) == {
        "instance-type": "u1.small", "instance-id": FW, "local-hostname": "web",
        "public-keys": {"0": "ssh-ed25519 AAA", "1": "ssh-ed25519 BBB"}}


def test_configdrive_iso_layout(tmp_path: Path) -> None:
    spec = parse_vmi(vmi({"cloudInitConfigDrive": {"userData": "#cloud-config\n"}},
                         hostname="given"))
    disk = cloudinit.prepare(spec, secret_dir=str(tmp_path / "none"),
                             ephemeral_dir=str(tmp_path / "eph"))
    assert disk is not None and disk.path.endswith("/configdrive.iso")
    label, files = read_iso(Path(disk.path), tmp_path / "out")
    assert label == "config-2"
    assert set(files) == {"openstack/latest/meta_data.json", "openstack/latest/user_data"}
    assert json.loads(files["openstack/latest/meta_data.json"]) == {
        "instance_type": "u1.small", "instance_id": "web.example.ns1", "hostname": "given",
        "uuid": FW}


def test_network_data_only_still_writes_an_empty_user_data(tmp_path: Path) -> None:
    secrets = tmp_path / "secret"
    (secrets / "ci-ndata").mkdir(parents=True)  # another Secret than the user data's
    (secrets / "ci-ndata" / "networkdata").write_text("version: 2\n")
    spec = parse_vmi(vmi({"cloudInitNoCloud": {"networkDataSecretRef": {"name": "n"}}}))
    disk = cloudinit.prepare(spec, secret_dir=str(secrets), ephemeral_dir=str(tmp_path / "e"))
    assert disk is not None
    _, files = read_iso(Path(disk.path), tmp_path / "out")
    assert files["user-data"] == b"" and files["network-config"] == b"version: 2\n"


def test_missing_secret_data_is_upstreams_error(tmp_path: Path) -> None:
    (tmp_path / "secret" / "ci").mkdir(parents=True)
    (tmp_path / "secret" / "ci" / "other").write_text("x")
    spec = parse_vmi(vmi({"cloudInitNoCloud": {"secretRef": {"name": "s"}}}))
    with pytest.raises(CloudInitError, match=r"^no cloud-init data-source found at volume: ci$"):
        cloudinit.prepare(spec, secret_dir=str(tmp_path / "secret"),
                          ephemeral_dir=str(tmp_path / "e"))


def test_a_hung_iso_tool_is_bounded_and_leaves_nothing(tmp_path: Path) -> None:
    """A stand-in for a hung xorrisofs (a script that sleeps): the launcher gives up."""
    hung = tmp_path / "xorrisofs"
    hung.write_text("#!/bin/sh\nexec sleep 30\n")
    hung.chmod(0o755)
    out = tmp_path / "eph" / "noCloud.iso"
    out.parent.mkdir()
    started = time.monotonic()
    with pytest.raises(CloudInitError, match="Timed out generating cloud-init iso"):
        cloudinit.make_iso(output=str(out), label="cidata", files={"user-data": b"SECRET"},
                           staging_dir=str(tmp_path / "eph" / "data"), xorrisofs=str(hung),
                           timeout=0.5)
    assert time.monotonic() - started < 10
    assert os.listdir(tmp_path / "eph") == []  # staged data and staging ISO removed


def test_a_failing_iso_tool_names_itself(tmp_path: Path) -> None:
    with pytest.raises(CloudInitError, match="xorrisofs cmd failed to start"):
        cloudinit.make_iso(output=str(tmp_path / "x.iso"), label="cidata", files={},
                           staging_dir=str(tmp_path / "data"),
                           xorrisofs=str(tmp_path / "xorrisofs"))
    assert not (tmp_path / "data").exists()


def test_staged_files_are_0600_while_they_exist(tmp_path: Path) -> None:
    """A stand-in xorrisofs that reports the modes of what it was given."""
    spy = tmp_path / "spy"
    spy.write_text('#!/bin/sh\nfor a; do last=$a; done\n'
                   'stat -c "%a %n" "$last" "$last"/* > "$SPY_OUT"\nexit 1\n')
    spy.chmod(0o755)
    os.environ["SPY_OUT"] = str(tmp_path / "modes")
    try:
        with pytest.raises(CloudInitError, match="returned exit code 1"):
            cloudinit.make_iso(output=str(tmp_path / "x.iso"), label="cidata",
                               files={"user-data": b"a", "meta-data": b"{}"},
                               staging_dir=str(tmp_path / "data"), xorrisofs=str(spy))
    finally:
        del os.environ["SPY_OUT"]
    modes = (tmp_path / "modes").read_text().split("\n")
    assert modes[0].startswith("700 ")
    assert all(m.startswith("600 ") for m in modes[1:] if m)
    assert not (tmp_path / "data").exists()
