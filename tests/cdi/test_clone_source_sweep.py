"""VolumeCloneSources left behind by a DataVolume deleted while the operator was down
(cross-namespace ones have no owner reference) are swept by the resync: the decision as a
table, then the sweep against a real API server, where it must delete the orphan and
nothing else (not a live clone's source, not a user's own VolumeCloneSource)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from cdi import clone, reconcile
from kubeclient import Client
from kubeclient.resources import CLONE_SOURCES, DATAVOLUMES
from tests.cdi.conftest import cdi_client
from vocab import cdi as api


def vcs(uid: str | None, *, name: str | None = None, ns: str = "golden") -> dict[str, Any]:
    labels = {api.CLONE_FOR_DV_LABEL: uid} if uid else {}
    return {"apiVersion": api.API_VERSION, "kind": api.CLONE_SOURCE_KIND,
            "metadata": {"name": name or clone.clone_source_name(uid or "x"),
                         "namespace": ns, "labels": labels},
            "spec": {"source": {"kind": "PersistentVolumeClaim", "name": "disk"}}}


@pytest.mark.parametrize(("sources", "uids", "expected"), [
    ([vcs("u1")], {"u1"}, []),
    ([vcs("u1")], set(), [("golden", clone.clone_source_name("u1"))]),
    ([vcs("u1"), vcs("u2")], {"u2"}, [("golden", clone.clone_source_name("u1"))]),
    # not named as this controller names them: never touched
    ([vcs("u1", name="users-own")], set(), []),
    ([vcs(None, name="unlabelled")], set(), []),
])
def test_orphans(sources: list[dict[str, Any]], uids: set[str],
                 expected: list[tuple[str, str]]) -> None:
    assert clone.orphaned_clone_sources(clone_sources=sources, datavolume_uids=uids) == expected


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Client]:
    with cdi_client(tmp_path_factory.mktemp("apiserver"),
                    crds=("datavolumes.yaml", "volumeclonesources.yaml"),
                    served="/apis/cdi.kubevirt.io/v1beta1/volumeclonesources",
                    namespaces=("golden", "team")) as c:
        yield c


def test_sweep_deletes_only_the_orphan(client: Client) -> None:
    live = client.create(DATAVOLUMES, {
        "apiVersion": api.API_VERSION, "kind": "DataVolume",
        "metadata": {"name": "copy", "namespace": "team"},
        "spec": {"source": {"pvc": {"namespace": "golden", "name": "disk"}},
                 "storage": {"resources": {"requests": {"storage": "1Gi"}}}}})
    assert live is not None
    live_uid = live["metadata"]["uid"]
    client.create(CLONE_SOURCES, vcs(live_uid))
    client.create(CLONE_SOURCES, vcs("0f0f0f0f-dead-beef-0000-000000000000"))
    client.create(CLONE_SOURCES, vcs("0f0f0f0f-dead-beef-0000-000000000000", name="users-own"))

    sources = reconcile.list_clone_sources(client)
    reconcile.sweep_clone_sources(client, clone_sources=sources,
                                  datavolumes=client.list(DATAVOLUMES))

    left = {o["metadata"]["name"] for o in client.list(CLONE_SOURCES, "golden")}
    assert left == {clone.clone_source_name(live_uid), "users-own"}


@pytest.mark.parametrize(("annotations", "keeps"), [
    ({}, False),
    ({api.POD_RETAIN: "false"}, False),
    ({api.POD_RETAIN: "true"}, True),
])
def test_a_finished_datavolume_keeps_its_clone_source_only_when_retaining_pods(
        annotations: dict[str, str], keeps: bool) -> None:
    dv = {"metadata": {"name": "d", "namespace": "n", "uid": "u1",
                       "annotations": annotations}}
    assert clone.keeps_clone_source(dv) is keeps
