"""Size limits as kube-apiserver's: ConfigMap and Secret data up to 1 MiB, annotations up
to 256 KiB (422 "Too long" past them). Real server on loopback."""

from __future__ import annotations

import base64
import json

import pytest
from kubernetes import client as k8s
from kubernetes.client.rest import ApiException

MIB = 1024 * 1024


def _configmap(name: str, size: int) -> k8s.V1ConfigMap:
    return k8s.V1ConfigMap(metadata=k8s.V1ObjectMeta(name=name), data={"blob": "x" * size})


def test_configmap_over_one_mib_is_too_long(api, namespace):
    core = k8s.CoreV1Api(api)
    with pytest.raises(ApiException) as info:
        core.create_namespaced_config_map(namespace, _configmap("big", int(1.1 * MIB)))
    assert info.value.status == 422
    assert "data: Too long: must have at most 1048576 bytes" in info.value.body
    # Exactly at the limit is accepted (the key's bytes do not count).
    created = core.create_namespaced_config_map(namespace, _configmap("fits", MIB))
    assert len(created.data["blob"]) == MIB


def test_configmap_counts_utf8_bytes_and_binary_data(api, raw, namespace):
    core = k8s.CoreV1Api(api)
    wide = {"metadata": {"name": "wide"}, "data": {"a": "é" * (MIB // 2 + 1)}}  # 2 bytes each
    code, status = raw.request("POST", f"/api/v1/namespaces/{namespace}/configmaps",
                               raw=json.dumps(wide, ensure_ascii=False).encode())
    assert code == 422 and "Too long" in status["message"]
    wide["data"]["a"] = "é" * (MIB // 2)
    code, _ = raw.request("POST", f"/api/v1/namespaces/{namespace}/configmaps",
                          raw=json.dumps(wide, ensure_ascii=False).encode())
    assert code == 201
    split = k8s.V1ConfigMap(metadata=k8s.V1ObjectMeta(name="split"),
                            data={"a": "x" * (MIB // 2)},
                            binary_data={"b": base64.b64encode(b"\0" * (MIB // 2 + 8)).decode()})
    with pytest.raises(ApiException) as info:
        core.create_namespaced_config_map(namespace, split)
    assert info.value.status == 422 and "Too long" in info.value.body
    split.binary_data = {"b": base64.b64encode(b"\0" * (MIB // 2)).decode()}
    core.create_namespaced_config_map(namespace, split)


def test_secret_over_one_mib_is_too_long(api, namespace):
    core = k8s.CoreV1Api(api)
    big = k8s.V1Secret(metadata=k8s.V1ObjectMeta(name="big"),
                       data={"k": base64.b64encode(b"\1" * (MIB + 1)).decode()})
    with pytest.raises(ApiException) as info:
        core.create_namespaced_secret(namespace, big)
    assert info.value.status == 422
    assert "data: Too long: must have at most 1048576 bytes" in info.value.body
    big.data = {"k": base64.b64encode(b"\1" * MIB).decode()}
    core.create_namespaced_secret(namespace, big)


def test_annotations_over_256_kib_are_too_long(api, namespace):
    core = k8s.CoreV1Api(api)
    meta = k8s.V1ObjectMeta(name="noted", annotations={"a": "x" * (256 * 1024)})
    with pytest.raises(ApiException) as info:
        core.create_namespaced_config_map(namespace, k8s.V1ConfigMap(metadata=meta))
    assert info.value.status == 422
    assert "metadata.annotations: Too long: must have at most 262144 bytes" in info.value.body
    meta.annotations = {"a": "x" * (256 * 1024 - 1)}
    core.create_namespaced_config_map(namespace, k8s.V1ConfigMap(metadata=meta))
