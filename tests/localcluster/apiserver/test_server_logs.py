"""GET pods/<name>/log is served by the log provider the kubelet registers."""

from __future__ import annotations

import asyncio
import os
import subprocess

import pytest
from kubernetes import client as k8s

from .kubectl_tool import kubectl_path, needs_kubectl
from .server_fixtures import Raw, make_client


@pytest.fixture
def logs_cluster(fresh_server):
    server = fresh_server.server
    asked = []

    async def provider(*, namespace, pod, container, follow, tail_lines, previous,
                       timestamps, since_seconds, limit_bytes):
        asked.append({"pod": pod, "container": container, "follow": follow,
                      "tail_lines": tail_lines, "previous": previous})
        if pod == "nologs":
            raise LookupError("no such container run yet")
        lines = [f"{container} line {i}\n".encode() for i in range(5)]
        if tail_lines is not None:
            lines = lines[-tail_lines:]
        for line in lines:
            yield line
        if follow:
            for i in range(3):
                await asyncio.sleep(0.05)
                yield f"{container} followed {i}\n".encode()

    server.set_log_provider(provider)
    with make_client(server) as api:
        core = k8s.CoreV1Api(api)
        for name, containers in (("one", ["main"]), ("two", ["a", "b"]), ("nologs", ["m"])):
            core.create_namespaced_pod("default", {"metadata": {"name": name}, "spec": {
                "containers": [{"name": c, "image": "rootdisk/x"} for c in containers]}})
        yield server, core, asked


def _log(core, *args, **kwargs):
    # kubernetes 36 turns a text body into the repr of its bytes unless read raw
    return core.read_namespaced_pod_log(*args, _preload_content=False, **kwargs).data.decode()


def test_logs_through_the_client(logs_cluster):
    _, core, asked = logs_cluster
    assert _log(core, "one", "default") == "".join(f"main line {i}\n" for i in range(5))
    assert _log(core, "two", "default", container="b", tail_lines=2) == "b line 3\nb line 4\n"
    followed = _log(core, "one", "default", follow=True, tail_lines=1)
    assert followed.splitlines() == ["main line 4", "main followed 0", "main followed 1",
                                     "main followed 2"]
    assert asked[-1] == {"pod": "one", "container": "main", "follow": True, "tail_lines": 1,
                         "previous": False}


def test_log_errors(logs_cluster):
    server, _, _ = logs_cluster
    raw = Raw(server)
    code, body = raw.request("GET", "/api/v1/namespaces/default/pods/two/log")
    assert code == 400 and "choose one of: [a b]" in body["message"]
    code, body = raw.request("GET", "/api/v1/namespaces/default/pods/one/log?container=zzz")
    assert code == 400 and "container zzz is not valid" in body["message"]
    code, body = raw.request("GET", "/api/v1/namespaces/default/pods/nologs/log")
    assert code == 400 and "no such container run yet" in body["message"]
    code, body = raw.request("GET", "/api/v1/namespaces/default/pods/missing/log")
    assert code == 404
    server.set_log_provider(None)
    code, body = raw.request("GET", "/api/v1/namespaces/default/pods/one/log")
    assert code == 400 and "waiting to start" in body["message"]


@needs_kubectl
def test_kubectl_logs(logs_cluster, tmp_path):
    server, _, _ = logs_cluster
    env = {**os.environ, "KUBECONFIG": str(server.kubeconfig_path), "HOME": str(tmp_path)}
    out = subprocess.run([kubectl_path(), "logs", "two", "-c", "a", "--tail=1"], env=env,
                         capture_output=True, text=True, timeout=30)
    assert out.returncode == 0 and out.stdout == "a line 4\n", out.stderr


def test_limit_bytes_is_enforced(logs_cluster):
    server, _, _ = logs_cluster
    code, text = Raw(server).request("GET", "/api/v1/namespaces/default/pods/one/log"
                                            "?limitBytes=15")
    assert code == 200 and text == "main line 0\nmai"


def test_a_provider_failing_mid_stream_ends_the_stream(fresh_server, caplog):
    server = fresh_server.server

    async def broken(**_):
        yield b"first\n"
        raise RuntimeError("disk gone")

    server.set_log_provider(broken)
    with make_client(server) as api:
        k8s.CoreV1Api(api).create_namespaced_pod("default", {"metadata": {"name": "b"},
                                                             "spec": {"containers": [
                                                                 {"name": "c", "image": "x"}]}})
    code, text = Raw(server).request("GET", "/api/v1/namespaces/default/pods/b/log")
    assert code == 200 and text == "first\n"
    assert "disk gone" in caplog.text
