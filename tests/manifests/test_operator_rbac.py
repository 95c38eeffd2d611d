"""The operators' RBAC as the manifests grant it, asked of a real API server with
SubjectAccessReviews: every controller set that runs on kopf may read and watch
CustomResourceDefinitions (kopf watches them to notice resources that appear after it
starts; refused, the CDI operator retried nine times over ~50 s at every start and
logged each refusal as an error), and may not change them."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from kubeclient import Client
from kubeclient.resources import NAMESPACES
from localcluster.apiserver.threaded import ServerThread
from tests.vm.conftest import RBAC_KINDS, kube_for

ROOT = Path(__file__).resolve().parents[2]
KINDS = {"Namespace": NAMESPACES, **RBAC_KINDS}
KOPF_OPERATORS = (  # the service accounts of the controller sets run by rootdisk.operator
    "system:serviceaccount:rootdisk:rootdisk-cdi",
    "system:serviceaccount:kubevirt:kubevirt-controller",
    "system:serviceaccount:kubevirt:kubevirt-handler",
)


@pytest.fixture(scope="module")
def kube(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Client]:
    thread = ServerThread(tmp_path_factory.mktemp("apiserver"))
    client = kube_for(thread.start())
    try:
        docs = [d for name in ("cdi.yaml", "kubevirt.yaml")
                for d in yaml.safe_load_all((ROOT / "manifests" / "rbac" / name).read_text())
                if d]
        for ns in {d["metadata"].get("namespace") for d in docs} - {None}:
            client.create_if_absent(NAMESPACES, {"apiVersion": "v1", "kind": "Namespace",
                                                 "metadata": {"name": ns}})
        for doc in docs:
            client.create_if_absent(KINDS[doc["kind"]], doc, doc["metadata"].get("namespace"))
        yield client
    finally:
        client.api.close()
        thread.stop()


def allowed(kube: Client, user: str, verb: str) -> bool:
    return kube.allowed({
        "apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
        "spec": {"user": user, "groups": ["system:serviceaccounts", "system:authenticated"],
                 "resourceAttributes": {"group": "apiextensions.k8s.io",
                                        "resource": "customresourcedefinitions",
                                        "verb": verb}}})


@pytest.mark.parametrize("user", KOPF_OPERATORS)
def test_kopf_operators_read_and_watch_crds_and_change_none(kube: Client, user: str) -> None:
    assert [v for v in ("get", "list", "watch") if not allowed(kube, user, v)] == []
    assert [v for v in ("create", "update", "patch", "delete") if allowed(kube, user, v)] == []
    # the control: a service account the manifests grant nothing
    assert not allowed(kube, "system:serviceaccount:rootdisk:nobody", "list")
