"""The one client's verbs and its exception tree, against a real localcluster API server."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

import kubeclient
from kubeclient import resources as r
from localcluster.apiserver.threaded import ServerThread
from tests.vm.conftest import kube_for

NS = "default"


@pytest.fixture(scope="module")
def kube(tmp_path_factory: pytest.TempPathFactory) -> Iterator[kubeclient.Client]:
    thread = ServerThread(tmp_path_factory.mktemp("apiserver"), bookmark_interval=0.5)
    client = kube_for(thread.start())
    try:
        yield client
    finally:
        client.close()
        thread.stop()


def configmap(name: str, **data: str) -> kubeclient.Obj:
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": NS}, "data": dict(data)}


def test_get_raises_not_found_and_get_or_none_gives_none(kube: kubeclient.Client) -> None:
    with pytest.raises(kubeclient.NotFound) as caught:
        kube.get(r.CONFIGMAPS, "absent", NS)
    assert caught.value.status == 404
    assert isinstance(caught.value, kubeclient.KubeError)
    assert kube.get_or_none(r.CONFIGMAPS, "absent", NS) is None


def test_create_twice_is_already_exists_a_conflict(kube: kubeclient.Client) -> None:
    kube.create(r.CONFIGMAPS, configmap("twice", a="1"))
    with pytest.raises(kubeclient.AlreadyExists) as caught:
        kube.create(r.CONFIGMAPS, configmap("twice", a="2"))
    assert isinstance(caught.value, kubeclient.Conflict)
    assert kube.create_if_absent(r.CONFIGMAPS, configmap("twice", a="3")) is None
    assert kube.get(r.CONFIGMAPS, "twice", NS)["data"] == {"a": "1"}


def test_replace_at_a_stale_version_is_a_conflict_not_already_exists(
        kube: kubeclient.Client) -> None:
    made = kube.create(r.CONFIGMAPS, configmap("stale", a="1"))
    kube.patch(r.CONFIGMAPS, "stale", {"data": {"a": "2"}}, NS)
    with pytest.raises(kubeclient.Conflict) as caught:
        kube.replace(r.CONFIGMAPS, made)
    assert not isinstance(caught.value, kubeclient.AlreadyExists)
    assert kubeclient.is_stale(caught.value)


def test_list_items_and_list_object(kube: kubeclient.Client) -> None:
    kube.create(r.CONFIGMAPS, configmap("listed", a="1"))
    names = {o["metadata"]["name"] for o in kube.list(r.CONFIGMAPS, NS)}
    assert "listed" in names
    whole = kube.list_object(r.CONFIGMAPS, NS)
    assert whole["metadata"]["resourceVersion"]
    assert {o["metadata"]["name"] for o in whole["items"]} == names


def test_delete_is_idempotent_and_keeps_a_namesake(kube: kubeclient.Client) -> None:
    first = kube.create(r.CONFIGMAPS, configmap("deleted"))
    assert kube.delete(r.CONFIGMAPS, "deleted", NS, uid=first["metadata"]["uid"]) is True
    assert kube.delete(r.CONFIGMAPS, "deleted", NS) is False
    kube.create(r.CONFIGMAPS, configmap("deleted"))
    assert kube.delete(r.CONFIGMAPS, "deleted", NS, uid=first["metadata"]["uid"]) is False
    assert kube.get_or_none(r.CONFIGMAPS, "deleted", NS) is not None


def test_metadata_never_carries_the_secret_data(kube: kubeclient.Client) -> None:
    kube.create(r.SECRETS, {"apiVersion": "v1", "kind": "Secret",
                            "metadata": {"name": "meta", "namespace": NS,
                                         "labels": {"x": "y"}},
                            "stringData": {"password": "hunter2"}})
    meta = kube.metadata(r.SECRETS, "meta", NS)
    assert meta is not None and meta["labels"] == {"x": "y"}
    assert "hunter2" not in repr(meta) and "data" not in meta
    assert kube.metadata(r.SECRETS, "absent", NS) is None


def test_create_or_replace(kube: kubeclient.Client) -> None:
    kube.create_or_replace(r.CONFIGMAPS, configmap("upsert", a="1"))
    kube.create_or_replace(r.CONFIGMAPS, configmap("upsert", a="2"))
    assert kube.get(r.CONFIGMAPS, "upsert", NS)["data"] == {"a": "2"}


def test_invalid_object_is_invalid(kube: kubeclient.Client) -> None:
    with pytest.raises(kubeclient.Invalid):
        kube.create(r.CONFIGMAPS, configmap("Not_A_Name"))


def test_api_error_picks_the_class() -> None:
    assert type(kubeclient.api_error(404, "Not Found")) is kubeclient.NotFound
    assert type(kubeclient.api_error(403, "Forbidden")) is kubeclient.Forbidden
    assert type(kubeclient.api_error(409, "Conflict", {"reason": "Conflict"})) \
        is kubeclient.Conflict
    assert type(kubeclient.api_error(409, "Conflict", {"reason": "AlreadyExists"})) \
        is kubeclient.AlreadyExists
    assert type(kubeclient.api_error(500, "Internal")) is kubeclient.KubeError


def test_resource_paths_quote_names() -> None:
    assert r.PODS.path("ns", "a/b?c") == "/api/v1/namespaces/ns/pods/a%2Fb%3Fc"
    assert r.NODES.path("ignored", "n1") == "/api/v1/nodes/n1"
    assert r.DATAVOLUMES.path("ns", "dv", "status") == \
        "/apis/cdi.kubevirt.io/v1beta1/namespaces/ns/datavolumes/dv/status"


def test_patch_kinds_and_status(kube: kubeclient.Client) -> None:
    kube.create(r.CONFIGMAPS, configmap("patched", a="1"))
    kube.patch(r.CONFIGMAPS, "patched", [{"op": "replace", "path": "/data/a", "value": "2"}],
               NS, content_type=kubeclient.JSON_PATCH)
    assert kube.get(r.CONFIGMAPS, "patched", NS)["data"] == {"a": "2"}
    with pytest.raises(kubeclient.NotFound):
        kube.patch(r.CONFIGMAPS, "absent", {"data": {"a": "1"}}, NS)


def test_watch_sees_a_create(kube: kubeclient.Client) -> None:
    since = kube.list_object(r.CONFIGMAPS, NS)["metadata"]["resourceVersion"]
    kube.create(r.CONFIGMAPS, configmap("watched", a="1"))
    seen = []
    for event in kube.watch(r.CONFIGMAPS, resource_version=since, timeout=5, namespace=NS,
                            field_selector="metadata.name=watched"):
        seen.append((event["type"], event["object"]["metadata"]["name"]))
        if event["type"] == "ADDED":
            break
    assert ("ADDED", "watched") in seen


def test_event_recorded_and_a_refused_one_only_logged(
        kube: kubeclient.Client, caplog: pytest.LogCaptureFixture) -> None:
    about = kube.create(r.CONFIGMAPS, configmap("evented"))
    kube.event(about, type_="Normal", reason="Checked", message="x" * 5000, component="test")
    events = [e for e in kube.list(r.EVENTS, NS)
              if e["involvedObject"].get("uid") == about["metadata"]["uid"]]
    assert [(e["reason"], len(e["message"])) for e in events] == [("Checked", 1024)]
    elsewhere = {"apiVersion": "v1", "kind": "ConfigMap",
                 "metadata": {"name": "x", "namespace": "no-such-namespace"}}
    kube.event(elsewhere, type_="Normal", reason="Lost", message="m", component="test")
    assert "event Lost on no-such-namespace/x not recorded" in caplog.text


def _pooled_sockets(client: kubeclient.Client) -> list[socket.socket]:
    manager = client.api.rest_client.pool_manager
    found = []
    for key in manager.pools.keys():  # noqa: SIM118 - urllib3's container refuses iteration
        for conn in list(manager.pools[key].pool.queue):
            if conn is not None and conn.sock is not None:
                found.append(conn.sock)
    return found


def test_close_closes_the_pooled_connections(tmp_path: Path) -> None:
    """A closed client leaves no socket for the garbage collector (an unraisable
    ResourceWarning in whatever runs when it collects)."""
    thread = ServerThread(tmp_path / "apiserver")
    client = kube_for(thread.start())
    try:
        client.get_or_none(r.CONFIGMAPS, "absent", NS)
        pooled = _pooled_sockets(client)
        assert pooled and all(s.fileno() >= 0 for s in pooled)
        client.close()
        assert [s.fileno() for s in pooled] == [-1] * len(pooled)
    finally:
        thread.stop()
