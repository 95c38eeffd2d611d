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


@pytest.mark.parametrize("d", [
    dv(storage=SIZE),
    dv(pvc=PVC),
    dv(storage=SIZE, source=http(secretRef="creds", certConfigMap="ca",
                                 checksum="sha256:" + "a" * 64, extraHeaders=["X-A: b"])),
    dv(storage=SIZE, source={"s3": {"url": "s3://bucket/disk.img", "secretRef": "creds"}}),
    dv(storage=SIZE, source={"blank": {}}),
    dv(storage={}, source={"pvc": {"namespace": "a", "name": "b"}}),
    dv(storage={}, source=None, sourceRef={"kind": "DataSource", "name": "golden"}),
])
def test_accepted(d: dict[str, Any]) -> None:
    if "sourceRef" in d["spec"]:
        d["spec"].pop("source")
    assert validate_create(dv=d, exists=exists) == []


@pytest.mark.parametrize(("d", "problem"), [
    (dv(storage=SIZE, pvc=PVC), "spec: Duplicate storage definition"),
    (dv(), "spec.storage: Missing target storage/pvc definition"),
    (dv(storage={}), "spec.storage.resources.requests.storage: Storage size is missing"),
    (dv(pvc={"accessModes": ["ReadWriteOnce"]}),
     "spec.pvc.resources.requests.storage: Storage size is missing"),
    (dv(storage={"resources": {"requests": {"storage": "1Ki"}}}),
     "spec.storage.resources.requests.storage: size should be at least 1MiB"),
    (dv(storage={"resources": {"requests": {"storage": " 1Gi"}}}),
     "spec.storage.resources.requests.storage: quantity ' 1Gi' is not a Kubernetes quantity"),
    (dv(storage=SIZE, sourceRef={"kind": "DataSource", "name": "g"}),
     "spec: Data volume should have either Source or SourceRef, not both"),
    (dv(storage=SIZE, source={"http": {"url": "http://a/b"}, "blank": {}}),
     "spec.source: Data volume source contains more than one source type: http, blank"),
    (dv(storage=SIZE, source={}), "spec.source: Missing Data volume source"),
    (dv(storage=SIZE, source={"ftp": {}}), "spec.source: unknown source type(s) ftp"),
    (dv(storage=SIZE, source={"http": {"url": "ftp://a/b"}}),
     "spec.source.http.url: scheme 'ftp' is not supported; use http or https"),
    (dv(storage=SIZE, source={"http": {"url": "file:///etc/passwd"}}),
     "spec.source.http.url: scheme 'file' is not supported"),
    (dv(storage=SIZE, source={"s3": {"url": "gopher://a/b"}}),
     "spec.source.s3.url: scheme 'gopher' is not supported; use http or https or s3"),
    (dv(storage=SIZE, source={"http": {"url": "http:///nohost"}}),
     "spec.source.http.url: 'http:///nohost' has no host"),
    (dv(storage=SIZE, source={"http": {}}), "spec.source.http.url: a URL is required"),
    (dv(storage=SIZE, source=http(checksum="crc32:abcd")),
     "spec.source.http.checksum: 'crc32:abcd' is not <algorithm>:<hex>"),
    (dv(storage=SIZE, source=http(checksum="sha256:abc")),
     "spec.source.http.checksum: a sha256 digest has 64 hex digits, not 3"),
    (dv(storage=SIZE, source=http(checksum="sha256" + "a" * 64)),
     "spec.source.http.checksum: "),
    (dv(storage=SIZE, source=http(secretRef="nope")),
     "spec.source.http.secretRef: Secret 'nope' not found"),
    (dv(storage=SIZE, source=http(certConfigMap="nope")),
     "spec.source.http.certConfigMap: ConfigMap 'nope' not found"),
    (dv(storage=SIZE, source={"s3": {"url": "s3://b/k", "secretRef": "nope"}}),
     "spec.source.s3.secretRef: Secret 'nope' not found"),
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


def test_spec_is_immutable() -> None:
    old = dv(storage=SIZE)
    new = dv(storage={"resources": {"requests": {"storage": "2Gi"}}})
    assert validate_update(old=old, new=old) == []
    assert validate_update(old=old, new=new) == [
        "spec: Cannot update DataVolume spec; delete and recreate it instead"]


def test_source_ref_kind() -> None:
    d = dv(storage={}, sourceRef={"kind": "Pod", "name": ""})
    d["spec"].pop("source")
    assert validate_create(dv=d, exists=exists) == [
        "spec.sourceRef.kind: unsupported kind 'Pod' (only DataSource)",
        "spec.sourceRef.name: a DataSource name is required"]
