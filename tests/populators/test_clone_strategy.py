"""The clone strategy and its fallbacks, and which pods block a clone (pure)."""

from __future__ import annotations

from typing import Any

import pytest

from populators import clone_strategy as cs


def claim(ns: str = "ns", mode: str = "Filesystem", size: str = "1Gi") -> dict[str, Any]:
    return {"metadata": {"name": "c", "namespace": ns},
            "spec": {"volumeMode": mode, "resources": {"requests": {"storage": size}}}}


LOCAL = {"provisioner": "local.localcluster.rootdisk.io", "allowVolumeExpansion": True}
FIXED = {"provisioner": "local.localcluster.rootdisk.io"}
OTHER = {"provisioner": "ebs.csi.aws.com", "allowVolumeExpansion": True}


@pytest.mark.parametrize(("kw", "strategy", "reason"), [
    ({}, "csi-clone", ""),
    ({"override": "copy"}, "copy", ""),
    ({"override": "snapshot"}, "copy", "NoVolumeSnapshotClass"),
    ({"profile_strategy": None}, "copy", "NoVolumeSnapshotClass"),  # upstream's default
    ({"profile_strategy": "bogus"}, "copy", "NoVolumeSnapshotClass"),
    ({"target": claim("other")}, "csi-clone", ""),  # across namespaces too, as upstream
    ({"target_class": OTHER}, "copy", "IncompatibleProvisioners"),
    ({"source_class": None}, "copy", "IncompatibleProvisioners"),
    ({"target": claim(mode="Block")}, "copy", "IncompatibleVolumeModes"),
    ({"target": claim(size="2Gi"), "target_class": FIXED, "source_class": FIXED}, "copy",
     "NoVolumeExpansion"),
    ({"target": claim(size="2Gi")}, "csi-clone", ""),
    ({"target": claim(size="512Mi")}, "copy", "TargetSmallerThanSource"),
    ({"override": "csi-clone", "profile_strategy": "copy"}, "csi-clone", ""),
])
def test_choose(kw: dict[str, Any], strategy: str, reason: str) -> None:
    args: dict[str, Any] = {"override": None, "profile_strategy": "csi-clone",
                            "source": claim(), "target": claim(), "source_class": LOCAL,
                            "target_class": LOCAL, **kw}
    choice = cs.choose(**args)
    assert (choice.strategy, choice.reason) == (strategy, reason)
    assert bool(choice.message) == bool(reason)


def pod(name: str, *, ro_volume: bool = False, ro_mount: bool = False, device: bool = False,
        phase: str = "Running", claim_name: str = "golden") -> dict[str, Any]:
    container: dict[str, Any] = {"name": "c"}
    if device:
        container["volumeDevices"] = [{"name": "v", "devicePath": "/dev/x"}]
    else:
        container["volumeMounts"] = [{"name": "v", "mountPath": "/d", "readOnly": ro_mount}]
    return {"metadata": {"name": name}, "status": {"phase": phase},
            "spec": {"containers": [container], "volumes": [
                {"name": "v", "persistentVolumeClaim": {"claimName": claim_name,
                                                        "readOnly": ro_volume}}]}}


def test_writers_block_readers_do_not() -> None:
    pods = [pod("w"), pod("dev", device=True), pod("ro-vol", ro_volume=True),
            pod("ro-mount", ro_mount=True), pod("done", phase="Succeeded"),
            pod("elsewhere", claim_name="other")]
    assert cs.writers(pods=pods, claim="golden") == ["dev", "w"]
