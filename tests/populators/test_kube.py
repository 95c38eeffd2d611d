"""The populators' functions over kubeclient.Client, against a real localcluster API server:
each one's success and the answer it gives when the object changed, is gone or is not
served."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

import kubeclient
from kubeclient import resources as r
from localcluster.apiserver.threaded import ServerThread
from populators import kube as pkube
from tests.vm.conftest import kube_for

NS = "default"


@pytest.fixture(scope="module")
def kube(tmp_path_factory: pytest.TempPathFactory) -> Iterator[kubeclient.Client]:
    thread = ServerThread(tmp_path_factory.mktemp("apiserver"))
    client = kube_for(thread.start())
    try:
        yield client
    finally:
        client.close()
        thread.stop()


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def volume(name: str) -> kubeclient.Obj:
    return {"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": name},
            "spec": {"capacity": {"storage": "1Mi"}, "accessModes": ["ReadWriteOnce"],
                     "hostPath": {"path": "/nonexistent"}}}


def test_list_served_gives_items_or_none_when_the_kind_is_not_served(
        kube: kubeclient.Client) -> None:
    name = unique("pv")
    kube.create(r.PVS, volume(name))
    assert name in {o["metadata"]["name"] for o in pkube.list_served(kube, r.PVS)}
    assert pkube.list_served(kube, r.SNAPSHOT_CLASSES) == []  # no CRD installed


def test_replaced_yields_to_a_newer_object(kube: kubeclient.Client) -> None:
    name = unique("cm")
    made = kube.create(r.CONFIGMAPS, {"apiVersion": "v1", "kind": "ConfigMap",
                                      "metadata": {"name": name, "namespace": NS},
                                      "data": {"a": "1"}})
    assert pkube.replaced(kube, r.CONFIGMAPS, {**made, "data": {"a": "2"}})
    assert not pkube.replaced(kube, r.CONFIGMAPS, {**made, "data": {"a": "3"}})  # stale
    assert kube.get(r.CONFIGMAPS, name, NS)["data"] == {"a": "2"}


def test_set_claim_ref_only_at_the_version_seen(kube: kubeclient.Client) -> None:
    name = unique("pv")
    made = kube.create(r.PVS, volume(name))
    ref = {"namespace": NS, "name": "target", "uid": "u-1"}
    version = made["metadata"]["resourceVersion"]
    kube.patch(r.PVS, name, {"metadata": {"labels": {"moved": "on"}}})
    assert not pkube.set_claim_ref(kube, name, ref, version)  # changed since
    assert "claimRef" not in kube.get(r.PVS, name)["spec"]
    current = kube.get(r.PVS, name)["metadata"]["resourceVersion"]
    assert pkube.set_claim_ref(kube, name, ref, current)
    assert kube.get(r.PVS, name)["spec"]["claimRef"]["name"] == "target"
    assert not pkube.set_claim_ref(kube, unique("absent"), ref, "")


def test_events_about_only_that_object(kube: kubeclient.Client) -> None:
    about = kube.create(r.CONFIGMAPS, {"apiVersion": "v1", "kind": "ConfigMap",
                                       "metadata": {"name": unique("cm"), "namespace": NS}})
    other = kube.create(r.CONFIGMAPS, {"apiVersion": "v1", "kind": "ConfigMap",
                                       "metadata": {"name": unique("cm"), "namespace": NS}})
    kube.event(about, type_="Normal", reason="Mine", message="m", component="test")
    kube.event(other, type_="Normal", reason="Theirs", message="m", component="test")
    found = pkube.events_about(kube, NS, about["metadata"]["uid"])
    assert [e["reason"] for e in found] == ["Mine"]
    assert pkube.events_about(kube, NS, "no-such-uid") == []
