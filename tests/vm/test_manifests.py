"""The VM side's manifests apply to an API server as `rootdisk up` applies them, and
their RBAC gives each component what it does and no more."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from kubeclient import Client
from kubeclient.resources import ROLEBINDINGS as RB
from kubeclient.resources import SUBJECT_ACCESS_REVIEWS as SAR
from localcluster.apiserver.threaded import ServerThread
from localcluster.workloads.apply import apply_manifests

from .conftest import ROOT, kube_for


@pytest.fixture(scope="module")
def applied(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Client, list[str]]]:
    thread = ServerThread(tmp_path_factory.mktemp("apiserver"), bookmark_interval=0.5)
    server = thread.start()
    lc = Client.connect(str(server.kubeconfig_path))
    kube = kube_for(server)
    try:
        yield kube, apply_manifests(lc, str(ROOT / "manifests"))
    finally:
        lc.close()
        kube.api.close()
        thread.stop()


def can(kube: Client, sa: str, verb: str, group: str, resource: str, *, ns: str = "default",
        sub: str = "", name: str = "") -> bool:
    out = kube.create(SAR, {"apiVersion": "authorization.k8s.io/v1",
                            "kind": "SubjectAccessReview", "spec": {
                                "user": f"system:serviceaccount:kubevirt:{sa}",
                                "groups": ["system:serviceaccounts",
                                           "system:serviceaccounts:kubevirt"],
                                "resourceAttributes": {"namespace": ns, "verb": verb,
                                                       "group": group, "resource": resource,
                                                       "subresource": sub, "name": name}}})
    return bool(out["status"].get("allowed"))


def test_everything_applies(applied: tuple[Client, list[str]]) -> None:
    names = applied[1]
    for want in ("CustomResourceDefinition/virtualmachines.kubevirt.io",
                 "Deployment/virt-controller", "Deployment/virt-api", "DaemonSet/virt-handler",
                 "APIService/v1.subresources.kubevirt.io",
                 "ValidatingWebhookConfiguration/virt-api-validator", "KubeVirt/kubevirt"):
        assert want in names, names


@pytest.mark.parametrize(("sa", "verb", "group", "resource", "sub", "ns", "name", "ok"), [
    ("kubevirt-controller", "create", "kubevirt.io", "virtualmachineinstances", "", "x", "",
     True),
    ("kubevirt-controller", "create", "cdi.kubevirt.io", "datavolumes", "", "x", "", True),
    ("kubevirt-controller", "delete", "cdi.kubevirt.io", "datavolumes", "", "x", "", False),
    ("kubevirt-controller", "update", "kubevirt.io", "virtualmachines", "", "x", "", False),
    ("kubevirt-controller", "get", "", "secrets", "", "x", "", False),
    ("kubevirt-controller", "update", "kubevirt.io", "kubevirts", "status", "kubevirt",
     "kubevirt", True),
    ("kubevirt-controller", "update", "kubevirt.io", "kubevirts", "", "kubevirt", "kubevirt",
     False),
    ("kubevirt-controller", "get", "apps", "daemonsets", "", "kubevirt", "virt-handler", True),
    ("kubevirt-controller", "update", "apps", "deployments", "", "kubevirt", "virt-api", False),
    ("kubevirt-apiserver", "patch", "kubevirt.io", "virtualmachines", "", "x", "", True),
    ("kubevirt-apiserver", "delete", "kubevirt.io", "virtualmachines", "", "x", "", False),
    ("kubevirt-apiserver", "get", "", "secrets", "", "kubevirt", "virt-api-certs", True),
    ("kubevirt-apiserver", "get", "", "secrets", "", "kubevirt", "other", False),
    ("kubevirt-apiserver", "patch", "", "secrets", "", "kubevirt", "virt-api-certs", True),
    ("kubevirt-apiserver", "patch", "", "secrets", "", "kubevirt", "other", False),
    ("kubevirt-apiserver", "patch", "", "secrets", "", "kubevirt", "virt-handler-certs",
     True),
    # no handler can read the CA's key: it reads only the certificate virt-api issued it
    ("kubevirt-handler", "get", "", "secrets", "", "kubevirt", "virt-api-certs", False),
    ("kubevirt-handler", "get", "", "secrets", "", "kubevirt", "virt-handler-certs", True),
    ("kubevirt-handler", "patch", "", "secrets", "", "kubevirt", "virt-handler-certs",
     False),
    ("kubevirt-handler", "patch", "", "secrets", "", "kubevirt", "virt-api-certs", False),
    ("kubevirt-apiserver", "list", "", "pods", "", "kubevirt", "", True),
    ("kubevirt-apiserver", "list", "", "pods", "", "x", "", False),
    ("kubevirt-handler", "update", "kubevirt.io", "virtualmachineinstances", "status", "x", "",
     True),
    ("kubevirt-handler", "update", "kubevirt.io", "virtualmachineinstances", "", "x", "",
     False),
    ("kubevirt-handler", "create", "", "pods", "", "x", "", False),
])
def test_least_privilege(applied: tuple[Client, list[str]], sa: str, verb: str, group: str,
                         resource: str, sub: str, ns: str, name: str, ok: bool) -> None:
    assert can(applied[0], sa, verb, group, resource, ns=ns, sub=sub, name=name) is ok




@pytest.mark.parametrize(("role", "verb", "sub", "ok"), [
    ("view", "get", "guestosinfo", True),
    ("view", "get", "userlist", True),
    ("view", "get", "filesystemlist", True),
    ("view", "get", "console", False),
    ("view", "update", "softreboot", False),
    ("edit", "get", "guestosinfo", True),
    ("edit", "get", "filesystemlist", True),
    ("edit", "update", "softreboot", True),
    ("edit", "get", "softreboot", False),
])
def test_user_roles_on_the_guest_agent_subresources(
        applied: tuple[Client, list[str]], role: str, verb: str, sub: str, ok: bool) -> None:
    """As upstream's kubevirt.io:view and :edit (through the aggregated view/edit roles)."""
    assert _user_can(applied[0], f"ga-{role}", role, verb, "subresources.kubevirt.io",
                     "virtualmachineinstances", sub) is ok


def _user_can(kube: Client, user: str, role: str, verb: str, group: str, resource: str,
              sub: str) -> bool:
    """Whether ``user``, bound to ClusterRole ``role`` in namespace default, may."""
    if kube.get_or_none(RB, user, "default") is None:
        kube.create(RB, {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
                         "metadata": {"name": user, "namespace": "default"},
                         "roleRef": {"apiGroup": "rbac.authorization.k8s.io",
                                     "kind": "ClusterRole", "name": role},
                         "subjects": [{"apiGroup": "rbac.authorization.k8s.io",
                                       "kind": "User", "name": user}]}, "default")
    out = kube.create(SAR, {"apiVersion": "authorization.k8s.io/v1",
                            "kind": "SubjectAccessReview", "spec": {
                                "user": user, "resourceAttributes": {
                                    "namespace": "default", "verb": verb, "group": group,
                                    "resource": resource, "subresource": sub,
                                    "name": "vm1"}}})
    return bool(out["status"].get("allowed"))


@pytest.mark.parametrize(("role", "verb", "group", "resource", "sub", "ok"), [
    # a namespace edit (or admin) user creates VMs, starts them, opens their console,
    # pauses them, as on upstream (kubevirt.io:edit|admin aggregated into edit|admin)
    ("edit", "create", "kubevirt.io", "virtualmachines", "", True),
    ("edit", "update", "subresources.kubevirt.io", "virtualmachines", "start", True),
    ("edit", "get", "subresources.kubevirt.io", "virtualmachineinstances", "console", True),
    ("edit", "update", "subresources.kubevirt.io", "virtualmachineinstances", "pause", True),
    ("edit", "update", "subresources.kubevirt.io", "virtualmachineinstances", "unpause", True),
    ("admin", "create", "kubevirt.io", "virtualmachines", "", True),
    ("admin", "get", "subresources.kubevirt.io", "virtualmachineinstances", "console", True),
    ("admin", "update", "subresources.kubevirt.io", "virtualmachineinstances", "pause", True),
    ("view", "get", "kubevirt.io", "virtualmachines", "", True),
    ("view", "create", "kubevirt.io", "virtualmachines", "", False),
    ("view", "update", "subresources.kubevirt.io", "virtualmachineinstances", "pause", False),
    ("view", "get", "kubevirt.io", "kubevirts", "", True),
    ("edit", "update", "kubevirt.io", "kubevirts", "", False),
])
def test_user_roles_on_vms(applied: tuple[Client, list[str]], role: str, verb: str, group: str,
                           resource: str, sub: str, ok: bool) -> None:
    assert _user_can(applied[0], f"vm-{role}", role, verb, group, resource, sub) is ok
