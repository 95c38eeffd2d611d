"""The DataVolume webhook's checks: each refusal names its field."""

from __future__ import annotations

from typing import Any

import pytest

from cdi.validate import validate_create, validate_update
from tests.cdi.builders import dv

SIZE = {"resources": {"requests": {"storage": "1Gi"}}}
PVC = {"accessModes": ["ReadWriteOnce"], **SIZE}
EXISTING = {("Secret", "creds"), ("ConfigMap", "ca")}


def exists(kind: str, name: str) -> bool:
    return (kind, name) in EXISTING


def http(**kw: Any) -> dict[str, Any]:
    return {"http": {"url": "https://example.com/disk.qcow2", **kw}}


def nosource(**kw: Any) -> dict[str, Any]:
    d = dv(**kw)
    d["spec"].pop("source", None)
    return d


@pytest.mark.parametrize("d", [
    dv(storage=SIZE),
    dv(pvc=PVC),
    dv(storage=SIZE, source=http(secretRef="creds", certConfigMap="ca",
                                 checksum="sha256:" + "a" * 64, extraHeaders=["X-A: b"])),
    dv(storage=SIZE, source=http(checksum=" SHA256 : " + "A" * 64)),  # trimmed, any case
    dv(storage=SIZE, source={"s3": {"url": "https://s3.local/bucket/disk.img",
                                    "secretRef": "creds"}}),
    dv(storage=SIZE, source={"gcs": {"url": "gs://bucket/disk.img"}}),
    dv(storage=SIZE, source={"blank": {}}),
    dv(storage={}, source={"pvc": {"namespace": "a", "name": "b"}}),
    dv(storage={}, source={"snapshot": {"namespace": "a", "name": "b"}}),
    nosource(storage={}, sourceRef={"kind": "DataSource", "name": "golden"}),
    dv(storage={**SIZE, "accessModes": ["ReadWriteOnce", "ReadOnlyMany"]}),  # storage: several
    dv(storage=SIZE, contentType="kubevirt"),
    dv(storage=SIZE, source={"registry": {"url": "docker://r/i:t"}}),
    dv(storage=SIZE, source={"registry": {"url": "oci-archive:///a.tar", "pullMethod": "pod"}}),
    dv(storage=SIZE, source={"registry": {"imageStream": "is", "pullMethod": "node"}}),
    nosource(storage={**SIZE, "dataSourceRef": {"apiGroup": "x.io", "kind": "Pop",
                                                "name": "p"}}),
    nosource(pvc={**PVC, "dataSource": {"kind": "PersistentVolumeClaim", "name": "c"},
                  "dataSourceRef": {"kind": "PersistentVolumeClaim", "name": "c"}}),
])
def test_accepted(d: dict[str, Any]) -> None:
    assert validate_create(dv=d, exists=exists) == []


# upstream's validateDataVolumeSpec (CDI c07cdb6fb, datavolume-validate.go, util.go):
# the first rule broken, upstream's field path and words
@pytest.mark.parametrize(("d", "problem"), [
    (dv(), "spec.PVC: Missing Data volume PVC"),
    (dv(storage=SIZE, pvc=PVC), "spec.PVC.Storage: Duplicate storage definition, both target "
                                "storage and target pvc defined"),
    (dv(storage={}), "spec.Storage.resources.requests.size: Storage size is missing"),
    (dv(pvc={"accessModes": ["ReadWriteOnce"]}),
     "spec.PVC.resources.requests.size: PVC size is missing"),
    (dv(pvc={"accessModes": ["ReadWriteOnce"]}, source={"pvc": {"namespace": "a",
                                                                  "name": "b"}}),
     "spec.PVC.resources.requests.size: PVC size is missing"),   # only storage may omit it
    (dv(storage={"resources": {"requests": {"storage": "0"}}}),
     "spec.Storage.resources.requests.size: Storage size can't be equal or less than zero"),
    (dv(storage={"resources": {"requests": {"storage": "1Ki"}}}),
     "spec.Storage.resources.requests.size: Storage size should be at least 1MiB"),
    (dv(storage={"resources": {"requests": {"storage": " 1Gi"}}}),
     "spec.Storage.resources.requests.size: quantity ' 1Gi' is not a Kubernetes quantity"),
    (dv(storage={**SIZE, "storageClassName": "s" * 254}),
     "Name cannot be longer than 253 characters"),
    (dv(pvc=SIZE), "spec.PVC.accessModes: Required value: at least 1 access mode is required"),
    (dv(pvc={**PVC, "accessModes": ["ReadWriteOnce", "ReadOnlyMany"]}),
     "spec.PVC.accessModes: PVC multiple accessModes"),
    (dv(pvc={**PVC, "accessModes": ["ReadWrite"]}),
     'spec.PVC.accessModes: Unsupported value: "ReadWrite": supported values: '
     '"ReadOnlyMany", "ReadWriteMany", "ReadWriteOnce", "ReadWriteOncePod"'),
    (dv(storage={**SIZE, "accessModes": ["ReadWriteOnce", "bad"]}),
     'spec.PVC.accessModes: Unsupported value: "ReadWriteOnce": supported values: '),
    (dv(storage=SIZE, sourceRef={"kind": "DataSource", "name": "g"}),
     "spec.source: Data volume should have either Source or SourceRef, or be externally "
     "populated"),
    (nosource(storage=SIZE),
     "spec.source: Data volume should have either Source or SourceRef, or be externally "
     "populated"),
    (nosource(storage={}, sourceRef={"name": "g"}), "spec.sourceRef.Kind: Missing sourceRef "
                                                    "kind"),
    (nosource(storage={}, sourceRef={"kind": "Pod", "name": "g"}),
     "spec.sourceRef.Kind: Unsupported sourceRef kind Pod, currently only DataSource is "
     "supported"),
    (nosource(storage={}, sourceRef={"kind": "DataSource"}),
     "spec.sourceRef.Name: Missing sourceRef name"),
    (dv(storage=SIZE, source={"http": {"url": "http://a/b"}, "blank": {}}),
     "spec.source: Multiple Data volume sources"),
    (dv(storage=SIZE, source={}), "spec.source: Missing Data volume source"),
    (dv(storage=SIZE, contentType="iso"), "spec.contentType: ContentType not one of: "
                                          "kubevirt, archive"),
    (dv(storage=SIZE, source={"http": {"url": "ftp://a/b"}}),
     "spec.source.HTTP.url: spec.source Invalid source URL scheme: ftp://a/b"),
    (dv(storage=SIZE, source={"http": {"url": "file:///etc/passwd"}}),
     "spec.source.HTTP.url: spec.source Invalid source URL scheme: file:///etc/passwd"),
    (dv(storage=SIZE, source={"s3": {"url": "s3://b/k"}}),
     "spec.source.S3.url: spec.source Invalid source URL scheme: s3://b/k"),
    (dv(storage=SIZE, source={"http": {"url": "disk.img"}}),
     "spec.source.HTTP.url: spec.source Invalid source URL: disk.img"),
    (dv(storage=SIZE, source={"http": {}}),
     "spec.source.HTTP.url: spec.source source URL is empty"),
    (dv(storage=SIZE, source=http(checksum="sha256" + "a" * 64)),
     "spec.source.HTTP.checksum: Invalid checksum format: invalid checksum format: "
     "expected 'algorithm:hash', got 'sha256" + "a" * 64 + "'"),
    (dv(storage=SIZE, source=http(checksum="sha256:")),
     "spec.source.HTTP.checksum: Invalid checksum format: checksum hash value cannot be "
     "empty"),
    (dv(storage=SIZE, source=http(checksum="crc32:abcd")),
     "spec.source.HTTP.checksum: Invalid checksum format: unsupported hash algorithm "
     "'crc32': supported algorithms are: md5, sha1, sha256, sha512"),
    (dv(storage=SIZE, source=http(checksum="sha256:abc")),
     "spec.source.HTTP.checksum: Invalid checksum format: invalid sha256 hash length: "
     "expected 64 hex characters, got 3"),
    (dv(storage=SIZE, source=http(checksum="md5:" + "g" * 32)),
     "spec.source.HTTP.checksum: Invalid checksum format: checksum hash is not valid "
     "hexadecimal: encoding/hex: invalid byte: U+0067 'g'"),
    (dv(storage=SIZE, source={"blank": {}}, contentType="archive"),
     "spec.contentType: SourceType cannot be blank and the contentType be archive"),
    (dv(storage=SIZE, source={"registry": {"url": "docker://r/i"}}, contentType="archive"),
     "spec.contentType: ContentType must be kubevirt when Source is Registry"),
    (dv(storage=SIZE, source={"registry": {}}),
     "spec.source.Registry: Source registry should have either URL or ImageStream"),
    (dv(storage=SIZE, source={"registry": {"url": "docker://r/i", "imageStream": "is"}}),
     "spec.source.Registry: Source registry should have either URL or ImageStream"),
    (dv(storage=SIZE, source={"registry": {"url": "http://r/i"}}),
     "spec.source.Registry.URL: Illegal registry source URL scheme http://r/i"),
    (dv(storage=SIZE, source={"registry": {"url": "docker://r/i", "pullMethod": "x"}}),
     'spec.source.Registry.importMethod: ImportMethod x is neither pod, node or ""'),
    (dv(storage=SIZE, source={"registry": {"imageStream": "", "pullMethod": "node"}}),
     "spec.source.Registry.importMethod: Source registry ImageStream is not valid"),
    (dv(storage=SIZE, source={"registry": {"imageStream": "is"}}),
     "spec.source.Registry.importMethod: Source registry ImageStream is supported only with "
     "node pull import method"),
    (dv(storage=SIZE, source={"imageio": {"url": "https://e/a", "diskId": "d"}}),
     "spec.source.Imageio: spec.source.Imageio source Imageio is not valid"),
    (dv(storage=SIZE, source={"imageio": {"url": "https://e/a", "diskId": "d",
                                          "secretRef": "creds"}}),
     "spec.source.Imageio: spec.source.Imageio source Imageio requires CertConfigMap or "
     "InsecureSkipVerify"),
    (dv(storage=SIZE, source={"vddk": {"url": "https://e/a"}}),
     "spec.source.VDDK: spec.source.VDDK source VDDK is not valid"),
    (dv(storage={}, source={"pvc": {"name": "b"}}),
     "spec.source.PVC: spec.source.PVC source PVC is not valid"),
    (dv(storage={}, source={"snapshot": {"namespace": "a"}}),
     "spec.source.Snapshot: spec.source.Snapshot source snapshot is not valid"),
    # external population (validateExternalPopulation): every cause
    (dv(storage={**SIZE, "dataSourceRef": {"apiGroup": "x.io", "kind": "Pop", "name": "p"}}),
     "spec.source: External population is incompatible with Source and SourceRef"),
    (nosource(pvc={**PVC, "dataSource": {"kind": "PersistentVolumeClaim", "name": "a"},
                   "dataSourceRef": {"kind": "PersistentVolumeClaim", "name": "b"}}),
     "DataSourceRef and DataSource must match"),
    (nosource(storage={**SIZE, "dataSource": {"kind": "Pop"}}),
     "spec.dataSource.name: Required value: DataSource name"),
    (nosource(storage={**SIZE, "dataSource": {"name": "p", "kind": "Pop"}}),
     "spec.dataSource.apiGroup: Required value: DataSource apiGroup when kind is not "
     "'PersistentVolumeClaim'"),
    (nosource(storage={**SIZE, "dataSourceRef": {"name": "p", "apiGroup": "x.io"}}),
     "spec.dataSourceRef.kind: Required value: DataSourceRef kind"),
    (nosource(storage={**SIZE, "dataSourceRef": {"apiGroup": "x.io", "kind": "Pop",
                                                 "name": "p", "namespace": "other"}}),
     "spec.dataSourceRef.namespace: Invalid value: DataSourceRef namespace not supported"),
    (dv(name="n" * 254, storage=SIZE), "Name cannot be longer than 253 characters"),
    # rootdisk's own, after upstream's rules pass
    (dv(storage=SIZE, source={"ftp": {}}), "spec.source: unknown source type(s) ftp"),
    (dv(storage=SIZE, source=http(secretRef="nope")),
     "spec.source.http.secretRef: Secret 'nope' not found"),
    (dv(storage=SIZE, source=http(certConfigMap="nope")),
     "spec.source.http.certConfigMap: ConfigMap 'nope' not found"),
    (dv(storage=SIZE, source={"s3": {"url": "https://s/b/k", "secretRef": "nope"}}),
     "spec.source.s3.secretRef: Secret 'nope' not found"),
    (dv(storage=SIZE, source={"s3": {"url": "gs://b/k"}}),
     "spec.source.s3.url: an S3 source needs an http or https URL"),
    (dv(storage=SIZE, source=http(secretExtraHeaders=["nope"])),
     "spec.source.http.secretExtraHeaders[0]: Secret 'nope' not found"),
    (dv(storage=SIZE, source=http(extraHeaders=["X-A: b\r\nX-Evil: 1"])),
     "spec.source.http.extraHeaders[0]: not a single 'Name: value' header"),
    (dv(storage={**SIZE, "volumeMode": "Block"}, contentType="archive"),
     "spec.storage.volumeMode: ContentType Archive cannot have block volumeMode"),
])
def test_refused(d: dict[str, Any], problem: str) -> None:
    problems = validate_create(dv=d, exists=exists)
    assert any(p.startswith(problem) for p in problems), problems


def test_the_first_rule_broken_is_the_refusal() -> None:
    """Upstream stops at the first rule broken: a DataVolume with a bad access mode and a
    bad URL is refused for the access mode alone."""
    d = dv(pvc={**PVC, "accessModes": ["Nope"]}, source={"http": {"url": "ftp://a"}})
    problems = validate_create(dv=d, exists=exists)
    assert len(problems) == 1 and problems[0].startswith("spec.PVC.accessModes: ")


# upstream's webhook table with the DataVolumeClaimAdoption feature gate: the gate lets
# every DataVolume adopt, the DataVolume's annotation (when it has one) wins over it
@pytest.mark.parametrize(("annotations", "gate", "refused"), [
    ({}, False, True),
    ({}, True, False),
    ({"cdi.kubevirt.io/allowClaimAdoption": "false"}, True, True),
    ({"cdi.kubevirt.io/allowClaimAdoption": "true"}, False, False),
])
def test_an_existing_claim_with_the_adoption_gate(annotations: dict[str, str], gate: bool,
                                                  refused: bool) -> None:
    d = dv(storage=SIZE, annotations=annotations)
    problems = validate_create(dv=d, exists=exists, claim=_claim(), adoption_gate=gate)
    assert problems == (["DataVolume.Name: Destination PVC ns/disk already exists"]
                        if refused else [])


# upstream's update rule: a multi-stage import (vddk/imageio with checkpoints) may change
# its checkpoints and finalCheckpoint, nothing else; any other DataVolume nothing at all
_VDDK = {"vddk": {"url": "https://vcenter/sdk", "uuid": "u", "backingFile": "[ds] vm.vmdk",
                  "thumbprint": "t", "secretRef": "s"}}
_CP1 = [{"previous": "", "current": "snap-1"}]
_CP2 = [*_CP1, {"previous": "snap-1", "current": "snap-2"}]


@pytest.mark.parametrize(("old_spec", "new_spec", "refused"), [
    ({"source": _VDDK, "checkpoints": _CP1}, {"source": _VDDK, "checkpoints": _CP2}, False),
    ({"source": _VDDK, "checkpoints": _CP1},
     {"source": _VDDK, "checkpoints": _CP1, "finalCheckpoint": True}, False),
    ({"source": _VDDK, "checkpoints": _CP1},
     {"source": _VDDK, "checkpoints": _CP2, "preallocation": True}, True),
    ({"source": {"http": {"url": "http://x/y"}}, "checkpoints": _CP1},
     {"source": {"http": {"url": "http://x/y"}}, "checkpoints": _CP2}, True),
])
def test_multi_stage_checkpoint_updates(old_spec: dict[str, Any], new_spec: dict[str, Any],
                                        refused: bool) -> None:
    old, new = dv(storage=SIZE), dv(storage=SIZE)
    old["spec"].update(old_spec)
    new["spec"].update(new_spec)
    assert validate_update(old=old, new=new) == (
        ["DataVolume.Spec: Cannot update DataVolume Spec"] if refused else [])


def test_spec_is_immutable() -> None:
    old = dv(storage=SIZE)
    new = dv(storage={"resources": {"requests": {"storage": "2Gi"}}})
    assert validate_update(old=old, new=old) == []
    assert validate_update(old=old, new=new) == [
        "DataVolume.Spec: Cannot update DataVolume Spec"]


def _claim(**meta: Any) -> dict[str, Any]:
    return {"name": "disk", "namespace": "ns", **meta}


DV_OWNER = {"kind": "DataVolume", "name": "disk", "uid": "u", "controller": True}


# upstream's Admit: a claim of the DataVolume's name may exist only when it is the
# DataVolume's (owned by a DataVolume), populated for it, or adoption is allowed
@pytest.mark.parametrize(("claim", "annotations", "refused"), [
    (None, {}, False),
    (_claim(), {}, True),
    (_claim(ownerReferences=[{"kind": "Pod", "name": "p", "controller": True}]), {}, True),
    (_claim(ownerReferences=[DV_OWNER]), {}, False),
    (_claim(annotations={"cdi.kubevirt.io/storage.populatedFor": "disk"}), {}, False),
    (_claim(annotations={"cdi.kubevirt.io/storage.populatedFor": "other"}), {}, True),
    (_claim(), {"cdi.kubevirt.io/allowClaimAdoption": "true"}, False),
    (_claim(), {"cdi.kubevirt.io/allowClaimAdoption": "false"}, True),
    (_claim(), {"cdi.kubevirt.io/allowClaimAdoption": "yes"}, True),  # ParseBool: not true
    (_claim(), {"cdi.kubevirt.io/allowClaimAdoption": "T"}, False),  # ParseBool: true
    # the annotation on the claim, not the DataVolume, allows nothing
    (_claim(annotations={"cdi.kubevirt.io/allowClaimAdoption": "true"}), {}, True),
    # a claim made for this very DataVolume (its uid) is never adopted
    (_claim(annotations={"cdi.kubevirt.io/createdForDataVolume": "dv-uid"}),
     {"cdi.kubevirt.io/allowClaimAdoption": "true"}, True),
])
def test_an_existing_claim(claim: dict[str, Any] | None, annotations: dict[str, str],
                           refused: bool) -> None:
    d = dv(storage=SIZE, annotations=annotations)
    d["metadata"]["uid"] = "dv-uid"
    problems = validate_create(dv=d, exists=exists, claim=claim)
    if refused:
        assert problems == ["DataVolume.Name: Destination PVC ns/disk already exists"]
    else:
        assert problems == []


# -- source.snapshot (upstream's validateDataVolumeSpec and validateStorageSize for a clone
# from a VolumeSnapshot; whether the snapshot exists is the controller's, as upstream's) ----

SNAP = {"snapshot": {"namespace": "gold", "name": "gold-snap"}}


@pytest.mark.parametrize("d", [
    pytest.param(dv(storage={}, source=SNAP), id="storage without size: the restoreSize"),
    pytest.param(dv(storage=SIZE, source=SNAP), id="storage with size"),
    pytest.param(dv(pvc=PVC, source=SNAP), id="pvc with size"),
    pytest.param(dv(storage={"resources": {"requests": {"storage": "1Mi"}}}, source=SNAP),
                 id="the smallest size"),
    pytest.param(dv(storage={}, source={"snapshot": {"namespace": "other-ns",
                                                     "name": "not-there-yet"}}),
                 id="a snapshot that does not exist yet"),
])
def test_snapshot_source_accepted(d: dict[str, Any]) -> None:
    assert validate_create(dv=d, exists=exists) == []


@pytest.mark.parametrize(("d", "problem"), [
    pytest.param(dv(pvc={"accessModes": ["ReadWriteOnce"]}, source=SNAP),
                 "spec.PVC.resources.requests.size: PVC size is missing",
                 id="pvc must give a size"),
    pytest.param(dv(storage={}, source={"snapshot": {"name": "gold-snap"}}),
                 "spec.source.Snapshot: spec.source.Snapshot source snapshot is not valid",
                 id="no namespace"),
    pytest.param(dv(storage={}, source={"snapshot": {"namespace": "", "name": "gold-snap"}}),
                 "spec.source.Snapshot: spec.source.Snapshot source snapshot is not valid",
                 id="empty namespace"),
    pytest.param(dv(storage={}, source={"snapshot": {"namespace": "gold", "name": ""}}),
                 "spec.source.Snapshot: spec.source.Snapshot source snapshot is not valid",
                 id="empty name"),
    pytest.param(dv(storage={"resources": {"requests": {"storage": "0"}}}, source=SNAP),
                 "spec.Storage.resources.requests.size: Storage size can't be equal or less "
                 "than zero", id="zero size"),
    pytest.param(dv(storage={"resources": {"requests": {"storage": "1023Ki"}}}, source=SNAP),
                 "spec.Storage.resources.requests.size: Storage size should be at least 1MiB",
                 id="below 1MiB"),
    pytest.param(dv(storage={}, source={**SNAP, "pvc": {"namespace": "a", "name": "b"}}),
                 "spec.source: Multiple Data volume sources", id="snapshot and pvc"),
    pytest.param(dv(storage={}, source=SNAP, sourceRef={"kind": "DataSource", "name": "f"}),
                 "spec.source: Data volume should have either Source or SourceRef, or be "
                 "externally populated", id="snapshot and sourceRef"),
    pytest.param(dv(storage=SIZE, source={"snapshot": {"namespace": "gold",
                                                       "name": "gold-snap"},
                                          "http": {"url": "https://example.com/a"}}),
                 "spec.source: Multiple Data volume sources", id="snapshot and http"),
])
def test_snapshot_source_refused(d: dict[str, Any], problem: str) -> None:
    assert validate_create(dv=d, exists=exists) == [problem]
