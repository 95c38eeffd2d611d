"""kubectl 1.32 against the server's strictness: a typo in a Pod is refused with
kubectl's strict decoding error, a 1.1 MiB ConfigMap is refused, ``kubectl explain``
prints built-in kinds from the server's OpenAPI. Each with its accepted counterpart."""

from __future__ import annotations

import os
import subprocess

import pytest

from .kubectl_tool import kubectl_path, needs_kubectl

pytestmark = needs_kubectl

POD = """apiVersion: v1
kind: Pod
metadata:
  name: {name}
  namespace: {ns}
spec:
  containers:
  - name: c
    image: busybox
    {field}: Always
"""


@pytest.fixture
def kubectl(shared_server, tmp_path):
    env = {**os.environ, "KUBECONFIG": str(shared_server.kubeconfig_path),
           "HOME": str(tmp_path)}

    def run(*args, timeout=60):
        return subprocess.run([kubectl_path(), *args], env=env, capture_output=True,
                              text=True, timeout=timeout)
    return run


@pytest.mark.parametrize("verb", ["create", "apply"])
def test_unknown_pod_field_is_a_strict_decoding_error(kubectl, namespace, tmp_path, verb):
    manifest = tmp_path / "pod.yaml"
    manifest.write_text(POD.format(name="typo", ns=namespace, field="imagePullPolcy"))
    proc = kubectl(verb, "-f", str(manifest))
    assert proc.returncode != 0
    assert 'strict decoding error: unknown field "spec.containers[0].imagePullPolcy"' \
        in proc.stderr
    assert kubectl("get", "pod", "typo", "-n", namespace).returncode != 0
    # --validate=warn: created, the field dropped, kubectl shows the server's warning.
    proc = kubectl(verb, "-f", str(manifest), "--validate=warn")
    assert proc.returncode == 0, proc.stderr
    assert 'Warning: unknown field "spec.containers[0].imagePullPolcy"' in proc.stderr
    kubectl("delete", "pod", "typo", "-n", namespace, "--wait=false")
    manifest.write_text(POD.format(name="fixed", ns=namespace, field="imagePullPolicy"))
    proc = kubectl(verb, "-f", str(manifest))
    assert proc.returncode == 0, proc.stderr
    got = kubectl("get", "pod", "fixed", "-n", namespace, "-o",
                  "jsonpath={.spec.containers[0].imagePullPolicy}")
    assert got.stdout == "Always"


def test_configmap_of_1_1_mib_is_refused(kubectl, namespace, tmp_path):
    big = tmp_path / "big.txt"
    big.write_bytes(b"x" * (1024 * 1024 + 100 * 1024))
    proc = kubectl("create", "configmap", "big", "-n", namespace, f"--from-file=blob={big}")
    assert proc.returncode != 0
    assert "Too long: must have at most 1048576 bytes" in proc.stderr
    big.write_bytes(b"x" * (1000 * 1024))
    proc = kubectl("create", "configmap", "big", "-n", namespace, f"--from-file=blob={big}")
    assert proc.returncode == 0, proc.stderr


def test_explain_builtin_kinds(kubectl):
    proc = kubectl("explain", "pods.spec")
    assert proc.returncode == 0, proc.stderr
    assert "KIND:       Pod" in proc.stdout
    assert "containers\t<[]Container> -required-" in proc.stdout
    assert "restartPolicy\t<string>" in proc.stdout
    proc = kubectl("explain", "pods.spec.containers")
    assert proc.returncode == 0 and "imagePullPolicy\t<string>" in proc.stdout
    proc = kubectl("explain", "deployments.spec.strategy.rollingUpdate")
    assert proc.returncode == 0 and "maxSurge\t<" in proc.stdout
    proc = kubectl("explain", "pods.spec.imagePullPolcy")
    assert proc.returncode != 0
    assert 'field "imagePullPolcy" does not exist' in proc.stderr
