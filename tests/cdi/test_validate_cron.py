"""The DataImportCron webhook, upstream's cases (CDI c07cdb6fb,
``dataimportcron-validate_test.go``) with upstream's messages."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from cdi.admission import review
from cdi.validate_cron import validate_cron_create, validate_cron_update

URL = "docker://registry:5000/test"


def cron(registry: dict[str, Any] | None = None, **spec: Any) -> dict[str, Any]:
    source = {"registry": {"url": URL} if registry is None else registry}
    return {"apiVersion": "cdi.kubevirt.io/v1beta1", "kind": "DataImportCron",
            "metadata": {"name": "testCron", "namespace": "default"},
            "spec": {"template": {"spec": {
                "source": source,
                "pvc": {"accessModes": ["ReadWriteOnce"],
                        "resources": {"requests": {"storage": "1Mi"}}}}},
                "schedule": "30 1 * * 1", "managedDataSource": "someDataSource", **spec}}


def exists(kind: str, name: str) -> bool:
    return True


def without(obj: dict[str, Any], *path: str) -> dict[str, Any]:
    out = copy.deepcopy(obj)
    node = out
    for key in path[:-1]:
        node = node[key]
    del node[path[-1]]
    return out


@pytest.mark.parametrize("obj", [
    cron(),
    cron({"imageStream": "test-is", "pullMethod": "node"}),
    cron(schedule=""),
    cron(importsToKeep=0, garbageCollect="Never", retentionPolicy="None"),
])
def test_accepted(obj: dict[str, Any]) -> None:
    assert validate_cron_create(cron=obj, exists=exists) == []


LONG = "the-name-length-of-this-dataimportcron-is-longer-then-63-characters"


@pytest.mark.parametrize(("obj", "problem"), [
    ({**cron(), "metadata": {"name": LONG}}, "Name cannot be longer than 63 characters"),
    (cron({"imageStream": "test-is"}), "Template.source.Registry.importMethod: Source"
     " registry ImageStream is supported only with node pull import method"),
    (cron({}), "Template.source.Registry: Source registry should have either URL or"
     " ImageStream"),
    (without(cron(), "spec", "template", "spec", "source", "registry"),
     "spec.Template: Missing source"),
    (without(cron(), "spec", "template", "spec", "source"), "spec.Template: Missing source"),
    (cron(template={"spec": {**cron()["spec"]["template"]["spec"],
                             "sourceRef": {"kind": "DataSource", "name": "noname"}}}),
     "spec.Template: Unsettable fields: SourceRef, ContentType, Checkpoints, FinalCheckpoint"),
    (cron({"url": URL, "imageStream": "test-is"}),
     "Template.source.Registry: Source registry should have either URL or ImageStream"),
    (cron({"url": "invalidurl"}),
     "Template.source.Registry.URL: Illegal registry source URL scheme invalidurl"),
    (cron({"url": "joker://registry:5000/test"}),
     "Template.source.Registry.URL: Illegal registry source URL scheme"
     " joker://registry:5000/test"),
    (cron({"url": URL, "pullMethod": "nosuch"}),
     'Template.source.Registry.importMethod: ImportMethod nosuch is neither pod, node or ""'),
    (cron(schedule="61 * * * *"), "spec.Schedule: Illegal cron schedule"),
    (cron(managedDataSource=""), "spec.ManagedDataSource: Illegal ManagedDataSource value"),
    (cron(managedDataSource=LONG), "Name cannot be longer than 63 characters"),
    (cron(importsToKeep=-1), "spec.ImportsToKeep: Illegal ImportsToKeep value"),
    (cron(garbageCollect="nosuch"), "spec.GarbageCollect: Illegal GarbageCollect value"),
])
def test_refused(obj: dict[str, Any], problem: str) -> None:
    got = validate_cron_create(cron=obj, exists=exists)
    assert len(got) == 1 and got[0].endswith(problem), got


def test_the_spec_cannot_change_but_metadata_and_status_can() -> None:
    old = cron()
    assert validate_cron_update(old=old, new={**old, "spec": {**old["spec"],
                                                              "schedule": "* * * * *"}}) == [
        "DataImportCron.Spec: Cannot update DataImportCron Spec"]
    relabelled = copy.deepcopy(old)
    relabelled["metadata"]["labels"] = {"a": "b"}
    assert validate_cron_update(old=old, new=relabelled) == []
    assert validate_cron_update(old=old, new={**old, "status": {"sourceFormat": "pvc"}}) == []


def test_the_webhook_answers_for_crons() -> None:
    body = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "request": {"uid": "u1", "operation": "CREATE", "namespace": "default",
                        "kind": {"group": "cdi.kubevirt.io", "version": "v1beta1",
                                 "kind": "DataImportCron"},
                        "object": cron(schedule="61 * * * *")}}
    answer = review(body, exists=lambda kind, name, ns: True)["response"]
    assert answer["allowed"] is False
    assert answer["status"]["details"]["causes"] == [
        {"reason": "FieldValueInvalid", "field": "spec.Schedule",
         "message": "Illegal cron schedule"}]
    missing = review({**body, "request": {**body["request"], "object": cron(
        {"url": URL, "secretRef": "nope"})}}, exists=lambda kind, name, ns: False)["response"]
    assert missing["allowed"] is False and "nope" in missing["status"]["message"]
