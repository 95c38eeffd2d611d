"""Manifests applied again, as `rootdisk up` applies manifests/ at every start, on a real
API server: kubectl's three-way merge, not a replace. What the manifest changed is set,
what it dropped is removed, and what only a user or a controller set stays; an object
applied unchanged is not written at all."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from kubeclient import MERGE, Client
from kubeclient.resources import CONFIGMAPS
from localcluster.apiserver.threaded import ServerThread
from localcluster.workloads.apply import LAST_APPLIED, apply_manifests


@pytest.fixture
def kube(tmp_path: Path) -> Iterator[Client]:
    thread = ServerThread(tmp_path / "api")
    thread.start()
    client = Client.connect(str(tmp_path / "api" / "kubeconfig"))
    try:
        yield client
    finally:
        client.api.close()
        thread.stop()


def write(root: Path, data: dict[str, str], labels: dict[str, str]) -> dict[str, Any]:
    manifest = {"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "settings", "namespace": "default", "labels": labels},
                "data": data}
    (root / "deploy").mkdir(parents=True, exist_ok=True)
    (root / "deploy" / "settings.yaml").write_text(yaml.safe_dump(manifest))
    return manifest


def test_applied_again_changes_what_the_manifest_changed_and_nothing_else(
        kube: Client, tmp_path: Path) -> None:
    root = tmp_path / "manifests"
    first = write(root, {"keep": "1", "change": "a", "drop": "x"}, {"app": "a"})
    assert apply_manifests(kube, str(root)) == ["ConfigMap/settings"]
    live = kube.get(CONFIGMAPS, "settings", "default")
    assert json.loads(live["metadata"]["annotations"][LAST_APPLIED]) == first
    # a user's additions, and a user's edit of a key the manifest names
    kube.request("PATCH", CONFIGMAPS.path("default", "settings"), content_type=MERGE,
                 body={"metadata": {"labels": {"mine": "yes"}},
                       "data": {"user": "mine", "keep": "edited"}})
    second = write(root, {"keep": "1", "change": "b"}, {"app": "a"})
    apply_manifests(kube, str(root))
    live = kube.get(CONFIGMAPS, "settings", "default")
    assert live["data"] == {"keep": "1", "change": "b", "user": "mine"}
    assert live["metadata"]["labels"] == {"app": "a", "mine": "yes"}
    assert json.loads(live["metadata"]["annotations"][LAST_APPLIED]) == second
    # the same manifest once more: nothing to write
    version = live["metadata"]["resourceVersion"]
    apply_manifests(kube, str(root))
    assert kube.get(CONFIGMAPS, "settings", "default")["metadata"]["resourceVersion"] == \
        version


def test_an_object_made_without_a_record_loses_nothing_and_gets_one(
        kube: Client, tmp_path: Path) -> None:
    """Made by hand (or by an older rootdisk, which replaced objects and kept no record):
    nothing is known to have been applied, so nothing is removed."""
    kube.request("POST", CONFIGMAPS.path("default"), body={
        "apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "settings"},
        "data": {"old": "1", "change": "a"}})
    root = tmp_path / "manifests"
    manifest = write(root, {"change": "b"}, {"app": "a"})
    apply_manifests(kube, str(root))
    live = kube.get(CONFIGMAPS, "settings", "default")
    assert live["data"] == {"old": "1", "change": "b"}
    assert json.loads(live["metadata"]["annotations"][LAST_APPLIED]) == manifest


@pytest.mark.parametrize("record", ["{not json", "[" * 100_000, '"a string"'])
def test_a_record_that_is_not_json_is_taken_for_none(kube: Client, tmp_path: Path,
                                                     record: str) -> None:
    """The record is whatever someone who may edit the object wrote: broken JSON, JSON
    nested deeper than the parser goes, or JSON that is not an object."""
    kube.request("POST", CONFIGMAPS.path("default"), body={
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "settings", "annotations": {LAST_APPLIED: record}},
        "data": {"old": "1"}})
    root = tmp_path / "manifests"
    write(root, {"new": "2"}, {})
    apply_manifests(kube, str(root))
    assert kube.get(CONFIGMAPS, "settings", "default")["data"] == {"old": "1", "new": "2"}
