"""CDIConfig status.uploadProxyURL, as upstream: the override, else the host of an Ingress
of the CDI namespace routing to cdi-uploadproxy, else absent. The rule as a table, then
the operator's reconcile against a real API server (set, changed, and removed again)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from cdi import config, reconcile
from kubeclient import Client
from kubeclient.resources import CDICONFIGS, INGRESSES, STORAGECLASSES
from tests.cdi.conftest import cdi_client
from vocab import cdi as api

SERVICE = api.UPLOAD_PROXY_SERVICE


def ingress(name: str, *, host: str | None, service: str = SERVICE,
            default_backend: bool = False, ns: str = api.CDI_NAMESPACE) -> dict[str, Any]:
    backend = {"service": {"name": service, "port": {"number": 443}}}
    rule: dict[str, Any] = {"http": {"paths": [] if default_backend else [
        {"path": "/", "pathType": "Prefix", "backend": backend}]}}
    if host:
        rule["host"] = host
    spec: dict[str, Any] = {"rules": [rule]}
    if default_backend:
        spec["defaultBackend"] = backend
    return {"apiVersion": "networking.k8s.io/v1", "kind": "Ingress",
            "metadata": {"name": name, "namespace": ns}, "spec": spec}


@pytest.mark.parametrize(("spec", "ingresses", "expected"), [
    ({}, [], None),
    ({"uploadProxyURLOverride": "https://up.example.com:31001"},
     [ingress("a", host="ignored.example.com")], "https://up.example.com:31001"),
    ({}, [ingress("a", host="up.example.com")], "up.example.com"),
    ({}, [ingress("a", host="up.example.com", default_backend=True)], "up.example.com"),
    ({}, [ingress("a", host="other.example.com", service="web")], None),
    ({}, [ingress("a", host=None)], None),  # no host: nothing a client could dial
    ({}, [ingress("b", host="b.example.com"), ingress("a", host="a.example.com")],
     "a.example.com"),
    ({"uploadProxyURLOverride": ""}, [ingress("a", host="up.example.com")], "up.example.com"),
])
def test_the_rule(spec: dict[str, Any], ingresses: list[dict[str, Any]],
                  expected: str | None) -> None:
    assert config.upload_proxy_url(spec=spec, ingresses=ingresses, service=SERVICE) == expected


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Client]:
    with cdi_client(tmp_path_factory.mktemp("apiserver"), crds=("cdiconfigs.yaml",),
                    served="/apis/cdi.kubevirt.io/v1beta1/cdiconfigs",
                    namespaces=(api.CDI_NAMESPACE, "elsewhere")) as c:
        yield c


def _url(c: Client) -> Any:
    return ((c.get_or_none(CDICONFIGS, api.CONFIG_NAME) or {}).get("status") or {}).get(
        "uploadProxyURL")


def test_reconcile_follows_ingresses_and_the_override(client: Client,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("POD_NAMESPACE", raising=False)
    reconcile.reconcile_config(client)
    assert _url(client) is None
    # an Ingress for the proxy in another namespace is not CDI's
    client.create(INGRESSES, ingress("up", host="wrong.example.com", ns="elsewhere"))
    reconcile.reconcile_config(client)
    assert _url(client) is None
    client.create(INGRESSES, ingress("up", host="upload.example.com"))
    reconcile.reconcile_config(client)
    assert _url(client) == "upload.example.com"
    client.patch(CDICONFIGS, api.CONFIG_NAME,
                 {"spec": {"uploadProxyURLOverride": "https://10.0.0.5:31001"}})
    reconcile.reconcile_config(client)
    assert _url(client) == "https://10.0.0.5:31001"
    client.patch(CDICONFIGS, api.CONFIG_NAME, {"spec": {"uploadProxyURLOverride": None}})
    client.delete(INGRESSES, "up", api.CDI_NAMESPACE)
    reconcile.reconcile_config(client)
    status = (client.get_or_none(CDICONFIGS, api.CONFIG_NAME) or {}).get("status") or {}
    assert "uploadProxyURL" not in status
    assert status["importRetryLimit"] == config.DEFAULT_IMPORT_RETRY_LIMIT  # the rest kept


def _overheads(c: Client) -> Any:
    status = (c.get_or_none(CDICONFIGS, api.CONFIG_NAME) or {}).get("status") or {}
    return status["filesystemOverhead"]["storageClass"]


def test_a_deleted_storage_class_and_a_removed_limit_leave_the_status(client: Client) -> None:
    """The status is written as a merge patch: keys gone from its nested maps (a deleted
    StorageClass, a limit taken out of the spec) must be removed, not left behind."""
    sc = {"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
          "metadata": {"name": "short-lived"}, "provisioner": "example.com/none"}
    client.create(STORAGECLASSES, sc)
    client.patch(CDICONFIGS, api.CONFIG_NAME, {"spec": {"podResourceRequirements": {
        "limits": {"cpu": "1", "memory": "1Gi"}, "requests": {"cpu": "100m"}}}})
    reconcile.reconcile_config(client)
    assert "short-lived" in _overheads(client)
    client.delete(STORAGECLASSES, "short-lived")
    client.patch(CDICONFIGS, api.CONFIG_NAME, {"spec": {"podResourceRequirements": {
        "limits": None}}})
    returned = reconcile.reconcile_config(client)
    assert "short-lived" not in _overheads(client)
    status = (client.get_or_none(CDICONFIGS, api.CONFIG_NAME) or {}).get("status") or {}
    assert status["defaultPodResourceRequirements"] == {"requests": {"cpu": "100m"}}
    assert returned == status
    client.patch(CDICONFIGS, api.CONFIG_NAME, {"spec": {"podResourceRequirements": None}})
