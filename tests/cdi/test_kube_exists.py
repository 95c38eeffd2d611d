"""The webhook's existence check of a Secret or ConfigMap, against the real API server:
it asks for metadata only, so a Secret's data never reaches the operator."""

from __future__ import annotations

import base64
from typing import Any

import pytest
from kubernetes import client as k8s

import kubeclient
from cdi import kube
from tests.localcluster.apiserver.server_fixtures import Raw

SECRET_VALUE = "very-secret-value"


def test_exists_reads_no_secret_data(api: k8s.ApiClient, namespace: str,
                                     monkeypatch: pytest.MonkeyPatch) -> None:
    k8s.CoreV1Api(api).create_namespaced_secret(namespace, {
        "metadata": {"name": "creds"},
        "data": {"secretKey": base64.b64encode(SECRET_VALUE.encode()).decode()}})
    client = kubeclient.Client(api.configuration)
    answers: list[Any] = []
    real = client.request

    def recording(*args: Any, **kw: Any) -> Any:
        out = real(*args, **kw)
        answers.append(out)
        return out

    monkeypatch.setattr(client, "request", recording)
    try:
        assert kube.exists(client, "Secret", "creds", namespace)
        assert not kube.exists(client, "Secret", "absent", namespace)
        assert not kube.exists(client, "ConfigMap", "absent", namespace)
    finally:
        client.close()
    assert answers[0]["kind"] == "PartialObjectMetadata"
    assert answers[0]["metadata"]["name"] == "creds"
    assert "data" not in answers[0] and SECRET_VALUE not in str(answers)
    assert base64.b64encode(SECRET_VALUE.encode()).decode() not in str(answers)


def test_server_serves_partial_object_metadata(api: k8s.ApiClient, namespace: str,
                                               raw: Raw) -> None:
    """``as=PartialObjectMetadata`` (get) and ``as=PartialObjectMetadataList`` (list), as
    kube-apiserver serves them; without it, the whole object."""
    k8s.CoreV1Api(api).create_namespaced_secret(namespace, {
        "metadata": {"name": "s1", "labels": {"a": "b"}}, "data": {"k": "dmFsdWU="}})
    path = f"/api/v1/namespaces/{namespace}/secrets"
    code, one = raw.request("GET", f"{path}/s1", headers={"Accept": kubeclient.METADATA_ONLY})
    assert code == 200 and one["kind"] == "PartialObjectMetadata"
    assert one["apiVersion"] == "meta.k8s.io/v1" and "data" not in one
    assert one["metadata"]["labels"] == {"a": "b"}
    code, many = raw.request("GET", path, headers={
        "Accept": "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1"})
    assert code == 200 and many["kind"] == "PartialObjectMetadataList"
    assert [i["metadata"]["name"] for i in many["items"]] == ["s1"]
    assert "dmFsdWU=" not in str(many)
    code, whole = raw.request("GET", f"{path}/s1", headers={"Accept": "application/json"})
    assert code == 200 and whole["kind"] == "Secret" and whole["data"] == {"k": "dmFsdWU="}
