"""kubectl 1.32 against the server's strictness: a typo in a Pod is refused with
kubectl's strict decoding error, a 1.1 MiB ConfigMap is refused, ``kubectl explain``
prints built-in kinds from the server's OpenAPI, the PrometheusRule and cert-manager-like
CRDs apply and a CEL rule refuses a violating object with its message. Each with its
accepted counterpart."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest

from .kubectl_tool import kubectl_path, needs_kubectl

pytestmark = needs_kubectl
DATA = Path(__file__).parent / "data"

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


CERT = """apiVersion: cert-manager.io/v1
kind: Certificate
metadata:
  name: web
  namespace: {ns}
spec:
  secretName: web-tls
  issuerRef:
    name: ca
  dnsNames:
  - {dns}
"""

PROMRULE = """apiVersion: monitoring.coreos.com/v1
kind: PrometheusRule
metadata:
  name: alerts
  namespace: {ns}
spec:
  groups:
  - name: up
    partial_response_strategy: {strategy}
    rules:
    - alert: Down
      expr: up == 0
      for: 5m
"""


def _wait_served(kubectl, resource):
    for _ in range(100):
        if kubectl("get", resource, "-A").returncode == 0:
            return
        time.sleep(0.1)
    raise AssertionError(f"{resource} not served")


def test_third_party_crds_apply_and_cel_rejects_with_its_message(kubectl, namespace,
                                                                  tmp_path):
    for name in ("certificates.cert-manager.io", "prometheusrules.monitoring.coreos.com"):
        proc = kubectl("apply", "-f", str(DATA / f"{name}.yaml"))
        assert proc.returncode == 0, proc.stderr
    _wait_served(kubectl, "certificates.cert-manager.io")
    _wait_served(kubectl, "prometheusrules.monitoring.coreos.com")
    manifest = tmp_path / "cert.yaml"
    manifest.write_text(CERT.format(ns=namespace, dns="Web.Example.com"))
    proc = kubectl("apply", "-f", str(manifest))
    assert proc.returncode != 0
    assert "spec.dnsNames" in proc.stderr and "dnsNames must be lower case" in proc.stderr
    manifest.write_text(CERT.format(ns=namespace, dns="web.example.com"))
    proc = kubectl("apply", "-f", str(manifest))
    assert proc.returncode == 0 and "certificate.cert-manager.io/web created" in proc.stdout
    rule = tmp_path / "rule.yaml"
    rule.write_text(PROMRULE.format(ns=namespace, strategy="sometimes"))
    proc = kubectl("apply", "-f", str(rule))
    assert proc.returncode != 0 and "partial_response_strategy" in proc.stderr
    rule.write_text(PROMRULE.format(ns=namespace, strategy="WARN"))
    proc = kubectl("apply", "-f", str(rule))
    assert proc.returncode == 0, proc.stderr


def test_explain_from_the_protobuf_openapi_v2(kubectl):
    proc = kubectl("explain", "pods.spec.containers", "--output=plaintext-openapiv2")
    assert proc.returncode == 0, proc.stderr
    assert "imagePullPolicy\t<string>" in proc.stdout


def test_a_list_is_validated_on_the_client_and_an_unknown_kind_is_no_match(
        kubectl, namespace, tmp_path):
    """kubectl validates a List (and a kind whose PATCH takes no fieldValidation) itself,
    from the protobuf /openapi/v2; an unknown kind then reaches its usual mapping error."""
    manifest = tmp_path / "list.yaml"
    manifest.write_text(f"""apiVersion: v1
kind: List
items:
- apiVersion: v1
  kind: ConfigMap
  metadata: {{name: listed, namespace: {namespace}}}
  data: {{a: b}}
""")
    proc = kubectl("create", "-f", str(manifest))
    assert proc.returncode == 0, proc.stderr
    assert "configmap/listed created" in proc.stdout
    manifest.write_text(f"""apiVersion: v1
kind: List
items:
- apiVersion: v1
  kind: ConfigMap
  metadata: {{name: listed2, namespace: {namespace}}}
  dta: {{a: b}}
""")
    proc = kubectl("create", "-f", str(manifest))
    assert proc.returncode != 0
    assert 'unknown field "dta"' in proc.stderr, proc.stderr
    manifest.write_text(f"""apiVersion: v1
kind: Nonesuch
metadata: {{name: x, namespace: {namespace}}}
""")
    proc = kubectl("create", "-f", str(manifest))
    assert proc.returncode != 0
    assert 'no matches for kind "Nonesuch" in version "v1"' in proc.stderr, proc.stderr
