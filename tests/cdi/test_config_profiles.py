"""CDIConfig status and StorageProfile status: table tests."""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import pytest

from cdi import config, profiles
from tests.cdi.builders import sc

CLASSES = [sc("local", annotations={"localcluster.rootdisk.io/filesystem-overhead": "0.03"}),
           sc("plain", provisioner="ebs.csi.aws.com"),
           sc("bad", annotations={"localcluster.rootdisk.io/filesystem-overhead": "3%"})]


@pytest.mark.parametrize(("spec", "overheads", "problems"), [
    (None, {"global": "0.06", "storageClass": {"local": "0.03", "plain": "0.06",
                                               "bad": "0.06"}}, ["StorageClass bad"]),
    ({"filesystemOverhead": {"global": "0.1"}},
     {"global": "0.1", "storageClass": {"local": "0.03", "plain": "0.1", "bad": "0.1"}},
     ["StorageClass bad"]),
    ({"filesystemOverhead": {"global": "1.0", "storageClass": {"local": "0.2", "plain": "x"}}},
     {"global": "0.06", "storageClass": {"local": "0.2", "bad": "0.06"}},
     ["spec.filesystemOverhead.global", "spec.filesystemOverhead.storageClass[plain]",
      "StorageClass bad"]),
])
def test_config_overheads(spec: Any, overheads: Any, problems: list[str]) -> None:
    result = config.compute_status(spec=spec, storage_classes=CLASSES)
    assert result.status["filesystemOverhead"] == overheads
    assert len(result.problems) == len(problems)
    for text, problem in zip(problems, result.problems, strict=True):
        assert problem.startswith(text)


def test_config_defaults_and_overrides() -> None:
    default = config.compute_status(spec={}, storage_classes=[]).status
    assert default["defaultPodResourceRequirements"] == {
        "limits": {"cpu": "750m", "memory": "600M"},
        "requests": {"cpu": "100m", "memory": "60M"}}
    assert default["importRetryLimit"] == config.DEFAULT_IMPORT_RETRY_LIMIT
    res = {"limits": {"cpu": "1", "memory": "1Gi"}}
    given = config.compute_status(spec={"podResourceRequirements": res, "importRetryLimit": 0},
                                  storage_classes=[]).status
    assert given["defaultPodResourceRequirements"] == res and given["importRetryLimit"] == 0
    bad = config.compute_status(spec={"importRetryLimit": -1}, storage_classes=[])
    assert bad.problems == ("spec.importRetryLimit: -1 is not a non-negative integer",)


# upstream's config controller: scratchSpaceStorageClass is the named class only when it
# exists; preallocation and imagePullSecrets are the spec's (omitted when empty or false)
@pytest.mark.parametrize(("spec", "scratch", "prealloc", "secrets"), [
    ({}, "", None, None),
    ({"scratchSpaceStorageClass": "plain"}, "plain", None, None),
    ({"scratchSpaceStorageClass": "gone"}, "", None, None),
    ({"preallocation": True}, "", True, None),
    ({"preallocation": False}, "", None, None),
    ({"imagePullSecrets": [{"name": "pull"}]}, "", None, [{"name": "pull"}]),
])
def test_config_status_fields_as_upstream(spec: Any, scratch: str, prealloc: bool | None,
                                          secrets: Any) -> None:
    status = config.compute_status(spec=spec, storage_classes=CLASSES).status
    assert status["scratchSpaceStorageClass"] == scratch
    assert status["preallocation"] == prealloc
    assert status["imagePullSecrets"] == secrets


# upstream's GetFilesystemOverheadForStorageClass (CDI c07cdb6fb): the class's, else the
# global; "" (no class) 0; a CDIConfig not reconciled yet (no status / no overhead) 0
@pytest.mark.parametrize(("cls", "mode", "expected"), [
    ("local", "Filesystem", Fraction(3, 100)), ("plain", "Filesystem", Fraction(1, 10)),
    ("unknown", "Filesystem", Fraction(1, 10)), ("local", "Block", Fraction(0)),
    (None, "Filesystem", Fraction(1, 10)),
    ("", "Filesystem", Fraction(0)),
])
def test_overhead_lookup(cls: str | None, mode: str, expected: Fraction) -> None:
    status = config.compute_status(spec={"filesystemOverhead": {"global": "0.1"}},
                                   storage_classes=CLASSES[:2]).status
    assert config.overhead_for(status=status, storage_class=cls, volume_mode=mode) == expected


@pytest.mark.parametrize("status", [None, {}, {"filesystemOverhead": None},
                                    {"filesystemOverhead": {}}])
def test_overhead_before_the_config_is_reconciled_is_zero(status: Any) -> None:
    assert config.overhead_for(status=status, storage_class="local",
                               volume_mode="Filesystem") == 0


def test_unparsable_stored_overhead_gives_the_default() -> None:
    status = {"filesystemOverhead": {"global": "lots"}}
    assert config.overhead_for(status=status, storage_class="local",
                               volume_mode="Filesystem") == config.DEFAULT_OVERHEAD


@pytest.mark.parametrize(("cls", "spec", "sets", "strategy"), [
    (sc("local"), None, [{"accessModes": ["ReadWriteOnce"], "volumeMode": "Filesystem"},
                         {"accessModes": ["ReadWriteOnce"], "volumeMode": "Block"}], "csi-clone"),
    (sc("x", provisioner="example.com/unknown"), None, [], "copy"),
    (sc("x", provisioner="example.com/unknown",
        annotations={"cdi.kubevirt.io/clone-strategy": "snapshot"}), None, [], "snapshot"),
    (sc("local"), {"claimPropertySets": [{"accessModes": ["ReadWriteMany"], "volumeMode": "Block"},
                                         {"accessModes": ["ReadWriteOnce"]}],
                   "cloneStrategy": "copy"},
     [{"accessModes": ["ReadWriteMany"], "volumeMode": "Block"}], "copy"),
])
def test_profile_status(cls: Any, spec: Any, sets: Any, strategy: str) -> None:
    status = profiles.compute_status(storage_class=cls, spec=spec)
    assert status["claimPropertySets"] == sets
    assert status["cloneStrategy"] == strategy
    assert status["storageClass"] == cls["metadata"]["name"]
    assert status["provisioner"] == cls["provisioner"]


def _typed(provisioner: str, disk: str | None) -> dict[str, Any]:
    cls = sc("x", provisioner=provisioner)
    if disk is not None:
        cls["parameters"] = {"type": disk}
    return cls


@pytest.mark.parametrize(("provisioner", "disk", "minimum"), [
    # upstream's table: the disk type of the class decides
    ("ebs.csi.aws.com", "io1", "4Gi"),
    ("ebs.csi.aws.com", "io2", "4Gi"),
    ("ebs.csi.aws.com", "gp3", "1Gi"),
    ("ebs.csi.aws.com", "gp2", "1Gi"),
    ("ebs.csi.aws.com", "st1", None),
    ("ebs.csi.aws.com", None, None),
    ("pd.csi.storage.gke.io", "hyperdisk-balanced", "4Gi"),
    ("pd.csi.storage.gke.io", "hyperdisk-balanced-high-availability", "4Gi"),
    ("pd.csi.storage.gke.io", "pd-ssd", None),
    ("local.localcluster.rootdisk.io", None, None),  # rounds small requests up itself
    ("example.com/odd", "io1", None),
])
def test_minimum_supported_size_from_the_table(provisioner: str, disk: str | None,
                                                minimum: str | None) -> None:
    cls = _typed(provisioner, disk)
    assert profiles.minimum_size_annotation(storage_class=cls, annotations={}) == minimum
    # an administrator's own annotation on the profile is never replaced
    assert profiles.minimum_size_annotation(
        storage_class=cls, annotations={"cdi.kubevirt.io/minimumSupportedPvcSize": "9Gi"}
    ) is None
