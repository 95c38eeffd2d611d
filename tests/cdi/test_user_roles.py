"""What namespace users may do with CDI's kinds once manifests/ is applied as `rootdisk up`
applies it: upstream's cdi.kubevirt.io:admin|edit|view roles aggregated into the cluster's
admin, edit and view (CDI c07cdb6fb, pkg/operator/resources/cluster/rbac.go), asked as
SubjectAccessReviews of a user bound to those roles in one namespace."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from kubeclient import Client
from kubeclient.resources import ROLEBINDINGS
from kubeclient.resources import SUBJECT_ACCESS_REVIEWS as SARS
from localcluster.apiserver.threaded import ServerThread
from localcluster.workloads.apply import apply_manifests
from tests.cdi.conftest import ROOT
from tests.vm.conftest import kube_for


@pytest.fixture(scope="module")
def applied(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Client]:
    thread = ServerThread(tmp_path_factory.mktemp("apiserver"), bookmark_interval=0.5)
    server = thread.start()
    lc = Client.connect(str(server.kubeconfig_path))
    c = Client(kube_for(server).configuration)
    try:
        apply_manifests(lc, str(ROOT / "manifests"))
        yield c
    finally:
        lc.close()
        c.close()
        thread.stop()


def user_can(c: Client, role: str, verb: str, group: str, resource: str, *,
             sub: str = "", ns: str = "default", user: str | None = None,
             groups: tuple[str, ...] = ()) -> bool:
    """Whether a user bound to ClusterRole ``role`` in namespace default may (``role``
    empty: a user bound to nothing)."""
    name = user or f"cdi-{role}"
    if role and c.get_or_none(ROLEBINDINGS, name, "default") is None:
        c.create(ROLEBINDINGS, {
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
            "metadata": {"name": name, "namespace": "default"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                        "name": role},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User",
                          "name": name}]})
    spec = {"user": name, "groups": list(groups), "resourceAttributes": {
        "namespace": ns, "verb": verb, "group": group, "resource": resource,
        "subresource": sub}}
    out = c.request("POST", SARS.path(), body={
        "apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview", "spec": spec})
    return bool(out["status"].get("allowed"))


@pytest.mark.parametrize(("role", "verb", "group", "resource", "sub", "ok"), [
    ("edit", "create", "cdi.kubevirt.io", "datavolumes", "", True),
    ("edit", "delete", "cdi.kubevirt.io", "datavolumes", "", True),
    ("edit", "create", "cdi.kubevirt.io", "datasources", "", True),
    ("edit", "create", "cdi.kubevirt.io", "dataimportcrons", "", True),
    ("edit", "create", "cdi.kubevirt.io", "datavolumes", "source", True),
    ("edit", "create", "upload.cdi.kubevirt.io", "uploadtokenrequests", "", True),
    ("admin", "create", "cdi.kubevirt.io", "datavolumes", "", True),
    ("admin", "create", "upload.cdi.kubevirt.io", "uploadtokenrequests", "", True),
    ("view", "get", "cdi.kubevirt.io", "datavolumes", "", True),
    ("view", "list", "cdi.kubevirt.io", "storageprofiles", "", True),
    ("view", "create", "cdi.kubevirt.io", "datavolumes", "", False),
    ("view", "create", "upload.cdi.kubevirt.io", "uploadtokenrequests", "", False),
    ("edit", "update", "cdi.kubevirt.io", "cdiconfigs", "", False),
    ("edit", "update", "cdi.kubevirt.io", "datavolumes", "status", False),
])
def test_namespace_users(applied: Client, role: str, verb: str, group: str, resource: str,
                         sub: str, ok: bool) -> None:
    assert user_can(applied, role, verb, group, resource, sub=sub) is ok


def test_a_user_bound_to_nothing_cannot_create_but_reads_the_configuration(
        applied: Client) -> None:
    """cdi.kubevirt.io:config-reader is bound to every authenticated user."""
    who = {"role": "", "user": "nobody", "groups": ("system:authenticated",)}
    assert not user_can(applied, verb="create", group="cdi.kubevirt.io",
                        resource="datavolumes", **who)  # type: ignore[arg-type]
    assert user_can(applied, verb="get", group="cdi.kubevirt.io", resource="cdiconfigs",
                    ns="", **who)  # type: ignore[arg-type]
    assert user_can(applied, verb="list", group="cdi.kubevirt.io", resource="storageprofiles",
                    ns="", **who)  # type: ignore[arg-type]
