"""The SQLite store and the watch cache: one global resourceVersion, persistence across
reopening, history kept for resumption and compacted into 410s."""

from __future__ import annotations

import asyncio

import pytest

from localcluster.apiserver.errors import APIError
from localcluster.apiserver.storage.store import Store
from localcluster.apiserver.storage.watchcache import WatchCache


def _obj(name, **extra):
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, **extra}


def test_resource_versions_persist_and_keep_increasing(tmp_path):
    store = Store(tmp_path / "s.db")
    a = store.put("/configmaps", "ns", "a", _obj("a"), previous=None)
    b = store.put("/secrets", "ns", "b", _obj("b"), previous=None)
    m = store.put("/configmaps", "ns", "a", _obj("a", data={"x": "y"}), previous=a.stored.obj)
    assert (a.rv, b.rv, m.rv) == (1, 2, 3) and m.type == "MODIFIED"
    gone = store.remove("/secrets", "ns", "b", _obj("b"))
    assert gone.rv == 4 and gone.type == "DELETED" and gone.previous is not None
    store.close()
    store = Store(tmp_path / "s.db")
    assert store.rv == 4
    assert store.get("/configmaps", "ns", "a").obj["data"] == {"x": "y"}
    assert store.get("/configmaps", "ns", "a").obj["metadata"]["resourceVersion"] == "3"
    assert store.get("/secrets", "ns", "b") is None
    assert store.put("/configmaps", "ns", "c", _obj("c"), previous=None).rv == 5
    assert [k for k, _ in store.items("/configmaps")] == [("ns", "a"), ("ns", "c")]
    assert [(rv, t) for rv, _, _, t, _ in store.history(2)] == [
        (3, "MODIFIED"), (4, "DELETED"), (5, "ADDED")]
    store.close()


def test_history_is_compacted_and_watches_below_it_are_gone(tmp_path):
    store = Store(tmp_path / "s.db", history_limit=500)
    for i in range(1200):
        store.put("/configmaps", "ns", f"c{i}", _obj(f"c{i}"), previous=None)
    assert store.compacted_rv == 500  # pruned at rv 1000, keeping the newest 500
    store.close()
    store = Store(tmp_path / "s.db", history_limit=500)
    cache = WatchCache(store, capacity=500)
    assert cache.compacted_rv == 700
    with pytest.raises(APIError) as err:
        cache.since(10, gr="/configmaps", ns=None, current_rv=store.rv)
    assert err.value.code == 410 and "too old resource version: 10 (1200)" in err.value.message
    replay = cache.since(1195, gr="/configmaps", ns="ns", current_rv=store.rv)
    assert [e.rv for e in replay] == [1196, 1197, 1198, 1199, 1200]
    assert cache.since(1195, gr="/configmaps", ns="other", current_rv=store.rv) == []
    store.close()


def test_watchers_get_only_their_type_and_namespace(tmp_path):
    async def scenario():
        store = Store(tmp_path / "s.db")
        cache = WatchCache(store, capacity=100)
        mine = cache.subscribe("/configmaps", "a")
        everything = cache.subscribe("/configmaps", None)
        for gr, ns in (("/configmaps", "a"), ("/configmaps", "b"), ("/secrets", "a")):
            cache.append(store.put(gr, ns, "x", _obj("x"), previous=None))
        assert mine.queue.qsize() == 1 and everything.queue.qsize() == 2
        cache.unsubscribe(mine)
        cache.append(store.put("/configmaps", "a", "y", _obj("y"), previous=None))
        assert mine.queue.qsize() == 1
        cache.close_all()
        assert (await everything.queue.get()).rv == 1
        store.close()

    asyncio.run(scenario())


def test_replayed_history_knows_the_previous_state(tmp_path):
    store = Store(tmp_path / "s.db")
    first = store.put("/configmaps", "ns", "a", _obj("a", data={"v": "1"}), previous=None)
    store.put("/configmaps", "ns", "a", _obj("a", data={"v": "2"}), previous=first.stored.obj)
    store.remove("/configmaps", "ns", "a", _obj("a"))
    store.close()
    store = Store(tmp_path / "s.db")
    cache = WatchCache(store, capacity=100)
    events = cache.since(0, gr="/configmaps", ns=None, current_rv=store.rv)
    assert [e.type for e in events] == ["ADDED", "MODIFIED", "DELETED"]
    assert events[0].previous is None
    assert events[1].previous["data"] == {"v": "1"}
    assert events[2].previous["data"] == {"v": "2"}
    store.close()
