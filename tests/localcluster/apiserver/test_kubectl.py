"""kubectl 1.32 against the server: apply, get (printer columns), describe, delete,
wait --for=condition, get -w. Skipped where kubectl is not installed, failed in CI."""

from __future__ import annotations

import json
import os
import subprocess
import threading
import time

import pytest
from kubernetes import client as k8s

from .kubectl_tool import kubectl_path, needs_kubectl
from .server_fixtures import WIDGET_CRD

pytestmark = needs_kubectl


@pytest.fixture
def kubectl(shared_server, tmp_path):
    env = {**os.environ, "KUBECONFIG": str(shared_server.kubeconfig_path),
           "HOME": str(tmp_path)}

    def run(*args, check=True, input_text=None, timeout=30):
        proc = subprocess.run([kubectl_path(), *args], env=env, capture_output=True, text=True,
                              input=input_text, timeout=timeout)
        if check and proc.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)}: {proc.stderr}")
        return proc
    run.env = env
    return run


WIDGET = """apiVersion: example.com/v1
kind: Widget
metadata:
  name: {name}
  namespace: {ns}
spec:
  size: {size}
"""


def test_apply_get_describe_delete(kubectl, namespace, tmp_path):
    crd = tmp_path / "crd.json"
    crd.write_text(json.dumps(WIDGET_CRD))
    assert "widgets.example.com" in kubectl("apply", "-f", str(crd)).stdout
    manifest = tmp_path / "w.yaml"
    manifest.write_text(WIDGET.format(name="w1", ns=namespace, size=3))
    assert "widget.example.com/w1 created" in kubectl("apply", "-f", str(manifest)).stdout
    assert "unchanged" in kubectl("apply", "-f", str(manifest)).stdout
    manifest.write_text(WIDGET.format(name="w1", ns=namespace, size=4))
    assert "configured" in kubectl("apply", "-f", str(manifest)).stdout
    out = kubectl("get", "widgets", "-n", namespace).stdout.splitlines()
    assert out[0].split() == ["NAME", "SIZE", "PHASE", "AGE"]
    assert out[1].split()[:2] == ["w1", "4"]
    described = kubectl("describe", "widget", "w1", "-n", namespace).stdout
    assert "Size:" in described and "Kind:         Widget" in described
    got = json.loads(kubectl("get", "wd", "w1", "-n", namespace, "-o", "json").stdout)
    assert got["spec"] == {"size": 4, "color": "blue"}
    assert 'widget.example.com "w1" deleted' in kubectl("delete", "widget", "w1", "-n",
                                                       namespace).stdout
    assert "No resources found" in kubectl("get", "widgets", "-n", namespace).stderr


def test_apply_builtin_and_describe_with_events(kubectl, api, namespace, tmp_path):
    manifest = tmp_path / "cm.yaml"
    manifest.write_text(f"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: conf\n"
                        f"  namespace: {namespace}\n  labels: {{app: demo}}\ndata:\n  a: '1'\n")
    kubectl("apply", "-f", str(manifest))
    manifest.write_text(manifest.read_text().replace("a: '1'", "a: '2'"))
    assert "configured" in kubectl("apply", "-f", str(manifest)).stdout
    cm = k8s.CoreV1Api(api).read_namespaced_config_map("conf", namespace)
    assert cm.data == {"a": "2"} and cm.metadata.labels == {"app": "demo"}
    k8s.CoreV1Api(api).create_namespaced_pod(namespace, {
        "metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "image": "i"}]}})
    pod_uid = k8s.CoreV1Api(api).read_namespaced_pod("p", namespace).metadata.uid
    k8s.CoreV1Api(api).create_namespaced_event(namespace, {
        "metadata": {"name": "p.1"}, "type": "Warning", "reason": "Testing",
        "message": "a message for describe", "involvedObject": {
            "kind": "Pod", "name": "p", "namespace": namespace, "uid": pod_uid,
            "apiVersion": "v1"}})
    described = kubectl("describe", "pod", "p", "-n", namespace).stdout
    assert "a message for describe" in described
    pods = kubectl("get", "pods", "-n", namespace).stdout.splitlines()
    assert pods[0].split()[:3] == ["NAME", "READY", "STATUS"]


def test_wait_for_condition_and_watch(kubectl, api, widgets, namespace, tmp_path):
    co = k8s.CustomObjectsApi(api)
    co.create_namespaced_custom_object("example.com", "v1", namespace, "widgets", {
        "apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "ww"},
        "spec": {"size": 1}})
    watcher = subprocess.Popen([kubectl_path(), "get", "widgets", "-n", namespace, "-w"],
                               env=kubectl.env, stdout=subprocess.PIPE, text=True)

    def become_ready():
        time.sleep(0.5)
        co.patch_namespaced_custom_object_status("example.com", "v1", namespace, "widgets",
                                                 "ww", {"status": {"phase": "Ready",
                                                        "conditions": [{"type": "Ready",
                                                                        "status": "True"}]}})

    t = threading.Thread(target=become_ready)
    t.start()
    waited = kubectl("wait", "--for=condition=Ready", "widget/ww", "-n", namespace,
                     "--timeout=20s")
    t.join()
    assert "condition met" in waited.stdout
    try:
        lines = []
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            line = watcher.stdout.readline()
            lines.append(line)
            if "Ready" in line:
                break
        assert lines[0].split() == ["NAME", "SIZE", "PHASE", "AGE"]
        assert any(line.split()[:3] == ["ww", "1", "Ready"] for line in lines), lines
    finally:
        watcher.terminate()
        watcher.wait(5)
        watcher.stdout.close()
    failed = kubectl("wait", "--for=condition=Missing", "widget/ww", "-n", namespace,
                     "--timeout=1s", check=False)
    assert failed.returncode != 0 and "timed out" in failed.stderr


def test_kubectl_errors_are_clear(kubectl, widgets, namespace, tmp_path):
    manifest = tmp_path / "bad.yaml"
    manifest.write_text(WIDGET.format(name="bad", ns=namespace, size=1000))
    proc = kubectl("apply", "-f", str(manifest), check=False)
    assert proc.returncode != 0 and "spec.size" in proc.stderr
    proc = kubectl("get", "widget", "missing", "-n", namespace, check=False)
    assert proc.returncode != 0 and 'widgets.example.com "missing" not found' in proc.stderr
