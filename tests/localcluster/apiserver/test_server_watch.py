"""Watches through the ``kubernetes`` client: order, bookmarks, 410, timeouts, restarts."""

from __future__ import annotations

import threading
import time

import pytest
from kubernetes import client as k8s
from kubernetes import watch

from localcluster.apiserver.threaded import ServerThread

from .server_fixtures import make_client


def _collect(stream, until, limit=50):
    out = []
    for event in stream:
        out.append(event)
        if until(out) or len(out) >= limit:
            break
    return out


def test_watch_from_list_resource_version_sees_changes_in_order(api, namespace):
    core = k8s.CoreV1Api(api)
    core.create_namespaced_config_map(namespace, {"metadata": {"name": "before"}})
    rv = core.list_namespaced_config_map(namespace).metadata.resource_version

    def writer():
        time.sleep(0.1)
        core.create_namespaced_config_map(namespace, {"metadata": {"name": "w"}})
        core.patch_namespaced_config_map("w", namespace, {"data": {"a": "b"}})
        core.delete_namespaced_config_map("w", namespace)

    t = threading.Thread(target=writer)
    t.start()
    w = watch.Watch()
    events = _collect(w.stream(core.list_namespaced_config_map, namespace,
                               resource_version=rv, timeout_seconds=5),
                      lambda evs: evs[-1]["type"] == "DELETED")
    w.stop()
    t.join()
    assert [(e["type"], e["object"].metadata.name) for e in events] == [
        ("ADDED", "w"), ("MODIFIED", "w"), ("DELETED", "w")]
    rvs = [int(e["object"].metadata.resource_version) for e in events]
    assert rvs == sorted(rvs) and rvs[0] > int(rv)
    assert events[1]["object"].data == {"a": "b"}


def test_watch_without_resource_version_starts_with_current_objects(api, namespace):
    core = k8s.CoreV1Api(api)
    for n in ("a", "b"):
        core.create_namespaced_config_map(namespace, {"metadata": {"name": n}})
    w = watch.Watch()
    events = _collect(w.stream(core.list_namespaced_config_map, namespace, timeout_seconds=2),
                      lambda evs: len(evs) == 2)
    w.stop()
    assert [(e["type"], e["object"].metadata.name) for e in events] == [("ADDED", "a"),
                                                                        ("ADDED", "b")]


def test_bookmarks_when_asked(api, namespace):
    core = k8s.CoreV1Api(api)
    rv = core.list_namespaced_config_map(namespace).metadata.resource_version
    w = watch.Watch()
    events = _collect(w.stream(core.list_namespaced_config_map, namespace, resource_version=rv,
                               allow_watch_bookmarks=True, timeout_seconds=5),
                      lambda evs: evs[-1]["type"] == "BOOKMARK")
    w.stop()
    assert events[-1]["type"] == "BOOKMARK"
    assert int(events[-1]["raw_object"]["metadata"]["resourceVersion"]) >= int(rv)


def test_timeout_seconds_ends_the_watch(api, namespace):
    core = k8s.CoreV1Api(api)
    started = time.monotonic()
    events = list(watch.Watch().stream(core.list_namespaced_config_map, namespace,
                                       resource_version=core.list_namespaced_config_map(
                                           namespace).metadata.resource_version,
                                       timeout_seconds=1))
    assert events == [] and 0.9 < time.monotonic() - started < 5


def test_label_selector_watch_sees_objects_leave_and_enter(api, namespace):
    core = k8s.CoreV1Api(api)
    core.create_namespaced_config_map(namespace, {"metadata": {"name": "s",
                                                               "labels": {"keep": "yes"}}})
    rv = core.list_namespaced_config_map(namespace).metadata.resource_version
    core.patch_namespaced_config_map("s", namespace, {"metadata": {"labels": {"keep": "no"}}})
    core.patch_namespaced_config_map("s", namespace, {"metadata": {"labels": {"keep": "yes"}}})
    w = watch.Watch()
    events = _collect(w.stream(core.list_namespaced_config_map, namespace, resource_version=rv,
                               label_selector="keep=yes", timeout_seconds=3),
                      lambda evs: len(evs) == 2)
    w.stop()
    assert [e["type"] for e in events] == ["DELETED", "ADDED"]


def test_too_old_resource_version_is_410(tmp_path):
    thread = ServerThread(tmp_path / "d", history_limit=5)
    server = thread.start()
    try:
        with make_client(server) as c:
            core = k8s.CoreV1Api(c)
            for i in range(12):
                core.create_namespaced_config_map("default", {"metadata": {"name": f"c{i}"}})
            with pytest.raises(k8s.ApiException) as err:
                list(watch.Watch().stream(core.list_namespaced_config_map, "default",
                                          resource_version="2", timeout_seconds=2))
            assert err.value.status == 410
    finally:
        thread.stop()


def test_watch_resumes_after_restart(tmp_path):
    data = tmp_path / "d"
    first = ServerThread(data)
    server = first.start()
    port = server.port
    with make_client(server) as c:
        core = k8s.CoreV1Api(c)
        core.create_namespaced_config_map("default", {"metadata": {"name": "old"}})
        rv = core.list_namespaced_config_map("default").metadata.resource_version
        core.create_namespaced_config_map("default", {"metadata": {"name": "during"}})
    first.stop()
    second = ServerThread(data, port=port)
    server = second.start()
    try:
        with make_client(server) as c:
            core = k8s.CoreV1Api(c)
            old = core.read_namespaced_config_map("old", "default")
            assert int(old.metadata.resource_version) <= int(rv)
            core.create_namespaced_config_map("default", {"metadata": {"name": "after"}})
            w = watch.Watch()
            events = _collect(w.stream(core.list_namespaced_config_map, "default",
                                       resource_version=rv, timeout_seconds=5),
                              lambda evs: len(evs) == 2)
            w.stop()
            assert [(e["type"], e["object"].metadata.name) for e in events] == [
                ("ADDED", "during"), ("ADDED", "after")]
            assert int(events[1]["object"].metadata.resource_version) > int(
                events[0]["object"].metadata.resource_version)
    finally:
        second.stop()


def test_restart_keeps_the_port_of_the_written_kubeconfig(tmp_path):
    first = ServerThread(tmp_path / "d")
    port = first.start().port
    first.stop()
    second = ServerThread(tmp_path / "d")
    try:
        assert second.start().port == port
    finally:
        second.stop()
