"""kopf, unmodified, against the server: in the same process (KopfRunner, one namespace)
and as ``kopf run -A`` in a subprocess with the written kubeconfig."""

from __future__ import annotations

import copy
import gc
import os
import subprocess
import sys
import time
import warnings
from pathlib import Path

import pytest
from kubernetes import client as k8s

from .server_fixtures import WIDGET_CRD

OPERATOR = Path(__file__).with_name("kopf_operator.py")
G, V = "example.net", "v1"


def _crd(plural: str, kind: str, scope: str) -> dict:
    crd = copy.deepcopy(WIDGET_CRD)
    crd["metadata"]["name"] = f"{plural}.{G}"
    crd["spec"].update(group=G, scope=scope, names={"plural": plural, "kind": kind})
    version = crd["spec"]["versions"][0]
    version["schema"]["openAPIV3Schema"]["properties"]["status"] = {
        "type": "object", "x-kubernetes-preserve-unknown-fields": True}
    return crd


@pytest.fixture
def kopf_crds(api):
    ext = k8s.ApiextensionsV1Api(api)
    for crd in (_crd("kopfwidgets", "KopfWidget", "Namespaced"),
                _crd("kopfgadgets", "KopfGadget", "Cluster")):
        try:
            ext.create_custom_resource_definition(crd)
        except k8s.ApiException as err:
            if err.status != 409:
                raise


def _wait_for(get, predicate, timeout=20.0):
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        try:
            last = get()
        except k8s.ApiException as err:
            if err.status != 404:
                raise
            last = None
        if predicate(last):
            return last
        time.sleep(0.1)
    raise AssertionError(f"condition not reached; last state: {last}")


def _exercise(api, namespace: str, gadget: str) -> None:
    co = k8s.CustomObjectsApi(api)
    core = k8s.CoreV1Api(api)

    def widget():
        return co.get_namespaced_custom_object(G, V, namespace, "kopfwidgets", "w")

    co.create_namespaced_custom_object(G, V, namespace, "kopfwidgets", {
        "apiVersion": f"{G}/{V}", "kind": "KopfWidget", "metadata": {"name": "w"},
        "spec": {"size": 3}})
    w = _wait_for(widget, lambda o: o and o.get("status", {}).get("phase") == "Created"
                  and o["status"].get("widget_created") == {"size": 3})
    assert any(f.startswith("kopf.zalando.org/") for f in w["metadata"]["finalizers"])
    co.patch_namespaced_custom_object(G, V, namespace, "kopfwidgets", "w",
                                      {"spec": {"size": 5}})
    _wait_for(widget, lambda o: o and o["status"].get("resized") == "3->5")
    _wait_for(widget, lambda o: o and int(o["status"].get("ticks") or 0) >= 3)

    def reasons():
        return {e.reason for e in core.list_namespaced_event(namespace).items}

    _wait_for(reasons, lambda r: "WidgetCreated" in r)
    co.create_cluster_custom_object(G, V, "kopfgadgets", {
        "apiVersion": f"{G}/{V}", "kind": "KopfGadget", "metadata": {"name": gadget},
        "spec": {"size": 1}})
    _wait_for(lambda: co.get_cluster_custom_object(G, V, "kopfgadgets", gadget),
              lambda o: o and o.get("status", {}).get("phase") == "Seen")
    co.delete_namespaced_custom_object(G, V, namespace, "kopfwidgets", "w")
    _wait_for(widget, lambda o: o is None)
    _wait_for(reasons, lambda r: "WidgetDeleted" in r)
    co.delete_cluster_custom_object(G, V, "kopfgadgets", gadget)


@pytest.mark.slow
def test_kopf_in_process(shared_server, api, kopf_crds, namespace, monkeypatch):
    from kopf.testing import KopfRunner

    monkeypatch.setenv("KUBECONFIG", str(shared_server.kubeconfig_path))
    with KopfRunner(["run", "--standalone", "--namespace", namespace, "--verbose",
                     str(OPERATOR)], timeout=60) as runner:
        _exercise(api, namespace, gadget=f"g-{namespace}")
    # kopf stops its event loop while TLS connections of cancelled watches are still
    # closing; their sockets are only reclaimed by the garbage collector. Collect them
    # here rather than let the ResourceWarning land on whichever test runs next.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ResourceWarning)
        gc.collect()
    assert runner.exception is None, runner.output
    assert runner.exit_code == 0, runner.output
    assert "Handler 'widget_created' succeeded" in runner.output


@pytest.mark.slow
def test_kopf_run_subprocess_all_namespaces(shared_server, api, kopf_crds, namespace,
                                            tmp_path):
    env = {**os.environ, "KUBECONFIG": str(shared_server.kubeconfig_path)}
    log = (tmp_path / "kopf.log").open("w+")
    proc = subprocess.Popen([sys.executable, "-m", "kopf", "run", "--standalone", "-A",
                             "--verbose", str(OPERATOR)], env=env, stdout=log,
                            stderr=subprocess.STDOUT)
    try:
        _exercise(api, namespace, gadget=f"h-{namespace}")
    finally:
        proc.terminate()
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)
        log.seek(0)
        output = log.read()
        log.close()
    assert "Handler 'widget_created' succeeded" in output, output[-3000:]
    assert "Traceback" not in output, output[-3000:]
