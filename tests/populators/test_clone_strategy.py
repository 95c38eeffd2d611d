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


def vsc(name: str, driver: str = "local.localcluster.rootdisk.io", *,
        default: bool = False) -> dict[str, Any]:
    ann = {"snapshot.storage.kubernetes.io/is-default-class": "true"} if default else {}
    return {"metadata": {"name": name, "annotations": ann}, "driver": driver,
            "deletionPolicy": "Delete"}


SNAPS = [vsc("b-local"), vsc("a-local"), vsc("ebs", "ebs.csi.aws.com", default=True)]


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
    # snapshot: a class for the driver both classes share, then the checks csi-clone has
    ({"override": "snapshot", "snapshot_classes": SNAPS}, "snapshot", ""),
    ({"profile_strategy": None, "snapshot_classes": SNAPS}, "snapshot", ""),
    ({"override": "snapshot", "snapshot_classes": SNAPS[2:]}, "copy",
     "NoVolumeSnapshotClass"),  # only another driver's class
    ({"override": "snapshot", "snapshot_classes": SNAPS, "target_class": OTHER}, "copy",
     "NoVolumeSnapshotClass"),  # no common driver: upstream finds no class
    ({"override": "snapshot", "snapshot_classes": SNAPS, "target": claim(mode="Block")},
     "copy", "IncompatibleVolumeModes"),
    ({"override": "snapshot", "snapshot_classes": SNAPS, "target": claim(size="512Mi")},
     "copy", "TargetSmallerThanSource"),
    ({"override": "snapshot", "snapshot_classes": SNAPS, "target": claim(size="2Gi"),
      "target_class": FIXED, "source_class": FIXED}, "copy", "NoVolumeExpansion"),
    ({"override": "snapshot", "snapshot_classes": SNAPS, "target": claim("other")},
     "snapshot", ""),
    ({"override": "snapshot", "snapshot_classes": SNAPS, "profile_snapshot_class": "ebs"},
     "copy", "NoVolumeSnapshotClass"),  # the profile's class serves another driver
])
def test_choose(kw: dict[str, Any], strategy: str, reason: str) -> None:
    args: dict[str, Any] = {"override": None, "profile_strategy": "csi-clone",
                            "source": claim(), "target": claim(), "source_class": LOCAL,
                            "target_class": LOCAL, **kw}
    choice = cs.choose(**args)
    assert (choice.strategy, choice.reason) == (strategy, reason)
    assert bool(choice.message) == bool(reason)
    assert bool(choice.snapshot_class) == (strategy == "snapshot")


@pytest.mark.parametrize(("classes", "driver", "named", "chosen"), [
    (SNAPS, "local.localcluster.rootdisk.io", None, "a-local"),  # first by name
    ([*SNAPS, vsc("z-local", default=True)], "local.localcluster.rootdisk.io", None,
     "z-local"),  # the default wins
    (SNAPS, "local.localcluster.rootdisk.io", "b-local", "b-local"),  # the profile's
    (SNAPS, "local.localcluster.rootdisk.io", "ebs", None),  # named, other driver
    (SNAPS, "local.localcluster.rootdisk.io", "missing", None),
    (SNAPS, "ebs.csi.aws.com", None, "ebs"),
    (SNAPS, None, None, None),
    ([], "local.localcluster.rootdisk.io", None, None),
])
def test_snapshot_class(classes: list[dict[str, Any]], driver: str | None, named: str | None,
                        chosen: str | None) -> None:
    assert cs.snapshot_class(classes=classes, driver=driver, named=named) == chosen


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
