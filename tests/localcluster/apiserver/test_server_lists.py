"""Lists as kube-apiserver serves them: ``limit``/``continue`` pages form one snapshot at
the first page's resourceVersion (410 once the history no longer reaches it), with
``remainingItemCount``; ``resourceVersionMatch`` Exact/NotOlderThan; watches with
``sendInitialEvents=true`` (the initial objects, then the initial-events-end BOOKMARK).
Real server on loopback."""

from __future__ import annotations

import json
import ssl
import urllib.request

import pytest
from kubernetes import client as k8s

from localcluster.apiserver.threaded import ServerThread

from .server_fixtures import Raw, make_client


def _names(page) -> list[str]:
    return [i["metadata"]["name"] for i in page["items"]]


def test_pages_are_one_snapshot(api, raw, namespace):
    core = k8s.CoreV1Api(api)
    for i in range(7):
        core.create_namespaced_config_map(namespace, {"metadata": {"name": f"page-{i}"},
                                                      "data": {"v": "old"}})
    base = f"/api/v1/namespaces/{namespace}/configmaps"
    code, first = raw.request("GET", f"{base}?limit=3")
    assert code == 200
    assert _names(first) == ["kube-root-ca.crt", "page-0", "page-1"]
    assert first["metadata"]["remainingItemCount"] == 5
    snapshot_rv = first["metadata"]["resourceVersion"]
    # The world moves on between pages.
    core.patch_namespaced_config_map("page-4", namespace, {"data": {"v": "new"}})
    core.delete_namespaced_config_map("page-5", namespace)
    core.create_namespaced_config_map(namespace, {"metadata": {"name": "page-3a"}})
    code, second = raw.request("GET", f"{base}?limit=3&continue={first['metadata']['continue']}")
    assert code == 200
    assert second["metadata"]["resourceVersion"] == snapshot_rv
    assert _names(second) == ["page-2", "page-3", "page-4"]
    assert second["items"][2]["data"] == {"v": "old"}  # as it was at the snapshot
    assert second["metadata"]["remainingItemCount"] == 2
    code, third = raw.request("GET", f"{base}?limit=3&continue={second['metadata']['continue']}")
    assert _names(third) == ["page-5", "page-6"]  # page-5 was deleted after the snapshot
    assert "continue" not in third["metadata"] and "remainingItemCount" not in third["metadata"]
    # A new list sees the present.
    code, now = raw.request("GET", base)
    assert "page-3a" in _names(now) and "page-5" not in _names(now)
    assert [i["data"] for i in now["items"] if i["metadata"]["name"] == "page-4"] == [
        {"v": "new"}]


def test_selector_pages_have_no_remaining_count(api, raw, namespace):
    core = k8s.CoreV1Api(api)
    for i in range(4):
        core.create_namespaced_config_map(namespace, {"metadata": {
            "name": f"sel-{i}", "labels": {"app": "x"}}})
    code, page = raw.request("GET", f"/api/v1/namespaces/{namespace}/configmaps"
                                    "?limit=2&labelSelector=app%3Dx")
    assert code == 200 and _names(page) == ["sel-0", "sel-1"]
    assert page["metadata"]["continue"] and "remainingItemCount" not in page["metadata"]


def test_continue_token_expires_with_the_history(tmp_path):
    thread = ServerThread(tmp_path / "data", history_limit=20)
    server = thread.start()
    try:
        raw = Raw(server)
        core = k8s.CoreV1Api(make_client(server))
        for i in range(5):
            core.create_namespaced_config_map("default", {"metadata": {"name": f"c{i}"}})
        code, first = raw.request("GET", "/api/v1/namespaces/default/configmaps?limit=2")
        token = first["metadata"]["continue"]
        code, page = raw.request("GET", "/api/v1/namespaces/default/configmaps"
                                        f"?limit=2&continue={token}")
        assert code == 200 and _names(page) == ["c2", "c3"]  # still within the history
        for i in range(30):  # more writes than the history keeps
            core.patch_namespaced_config_map("c0", "default", {"data": {"i": str(i)}})
        code, status = raw.request("GET", "/api/v1/namespaces/default/configmaps"
                                          f"?limit=2&continue={token}")
        assert code == 410 and status["reason"] == "Expired"
        assert "continue parameter is too old" in status["message"]
    finally:
        thread.stop()


def test_resource_version_match(api, raw, namespace):
    core = k8s.CoreV1Api(api)
    base = f"/api/v1/namespaces/{namespace}/configmaps"
    created = core.create_namespaced_config_map(namespace, {"metadata": {"name": "exact"},
                                                            "data": {"v": "1"}})
    rv = created.metadata.resource_version
    core.patch_namespaced_config_map("exact", namespace, {"data": {"v": "2"}})
    code, at = raw.request("GET", f"{base}?resourceVersion={rv}&resourceVersionMatch=Exact")
    assert code == 200 and at["metadata"]["resourceVersion"] == rv
    assert [i["data"] for i in at["items"] if i["metadata"]["name"] == "exact"] == [{"v": "1"}]
    code, now = raw.request("GET", f"{base}?resourceVersion={rv}"
                                   "&resourceVersionMatch=NotOlderThan")
    assert code == 200 and int(now["metadata"]["resourceVersion"]) > int(rv)
    assert [i["data"] for i in now["items"] if i["metadata"]["name"] == "exact"] == [{"v": "2"}]
    future = int(now["metadata"]["resourceVersion"]) + 1000
    for match in ("NotOlderThan", "Exact"):
        code, status = raw.request("GET", f"{base}?resourceVersion={future}"
                                          f"&resourceVersionMatch={match}")
        assert code == 504 and "Too large resource version" in status["message"]
    for query, text in (("resourceVersionMatch=Exact", "unless resourceVersion is provided"),
                        ("resourceVersion=1&resourceVersionMatch=Newest",
                         'Unsupported value: "Newest"'),
                        ("resourceVersion=0&resourceVersionMatch=Exact", 'resourceVersion "0"')):
        code, status = raw.request("GET", f"{base}?{query}")
        assert code == 400 and text in status["message"], status


def _stream(server, path: str):
    ctx = ssl.create_default_context(cafile=str(server.ca_path))
    req = urllib.request.Request(server.url + path)
    req.add_header("Authorization", f"Bearer {server.admin_token}")
    return urllib.request.urlopen(req, context=ctx, timeout=30)


def test_send_initial_events_watch(api, shared_server, namespace):
    core = k8s.CoreV1Api(api)
    for name in ("w1", "w2"):
        core.create_namespaced_config_map(namespace, {"metadata": {"name": name}})
    path = (f"/api/v1/namespaces/{namespace}/configmaps?watch=true&sendInitialEvents=true"
            "&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true&timeoutSeconds=20")
    with _stream(shared_server, path) as resp:
        events = []
        for _ in range(20):
            event = json.loads(resp.readline())
            events.append(event)
            if event["type"] == "BOOKMARK":
                break
        initial = [(e["type"], e["object"]["metadata"]["name"]) for e in events[:-1]]
        assert initial == [("ADDED", "kube-root-ca.crt"), ("ADDED", "w1"), ("ADDED", "w2")]
        bookmark = events[-1]["object"]["metadata"]
        assert bookmark["annotations"] == {"k8s.io/initial-events-end": "true"}
        assert int(bookmark["resourceVersion"]) >= max(
            int(e["object"]["metadata"]["resourceVersion"]) for e in events[:-1])
        core.create_namespaced_config_map(namespace, {"metadata": {"name": "w3"}})
        while True:
            event = json.loads(resp.readline())
            if event["type"] != "BOOKMARK":
                break
            assert "annotations" not in event["object"]["metadata"]  # only the first one
        assert (event["type"], event["object"]["metadata"]["name"]) == ("ADDED", "w3")


@pytest.mark.parametrize(("query", "text"), [
    ("sendInitialEvents=true&allowWatchBookmarks=true", "resourceVersionMatch to NotOlderThan"),
    ("sendInitialEvents=true&resourceVersionMatch=NotOlderThan", "allowWatchBookmarks=true"),
    ("resourceVersionMatch=NotOlderThan&resourceVersion=1", "unless sendInitialEvents"),
])
def test_send_initial_events_options_are_checked(raw, namespace, query, text):
    code, status = raw.request("GET", f"/api/v1/namespaces/{namespace}/configmaps?watch=true&"
                                      f"{query}")
    assert code == 400 and text in status["message"]
