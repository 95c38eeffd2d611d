"""The default user-facing roles grant what kube-apiserver's bootstrap policy grants, no
more: view reads no Secrets, edit writes no status subresources and no Endpoints (but
reads Secrets, and may exec/attach/port-forward and mint its service accounts' tokens)."""

from __future__ import annotations

from typing import Any

import pytest

from localcluster.apiserver.auth.rbac import DEFAULT_RBAC_OBJECTS, Attributes, authorize

USER = "system:serviceaccount:team:someone"
GROUPS = ("system:serviceaccounts", "system:serviceaccounts:team", "system:authenticated")
CLUSTER_ROLES = [o for o in DEFAULT_RBAC_OBJECTS if o["kind"] == "ClusterRole"]


def allowed(role: str, verb: str, resource: str, subresource: str = "",
            group: str = "") -> bool:
    binding: dict[str, Any] = {
        "kind": "RoleBinding", "metadata": {"name": "b", "namespace": "team"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                    "name": role},
        "subjects": [{"kind": "ServiceAccount", "name": "someone", "namespace": "team"}]}
    attrs = Attributes(user=USER, groups=GROUPS, verb=verb, api_group=group,
                       resource=resource, subresource=subresource, name="x",
                       namespace="team")
    return authorize(attrs, roles=[], cluster_roles=CLUSTER_ROLES, role_bindings=[binding],
                     cluster_role_bindings=[]).allowed


@pytest.mark.parametrize("verb", ["get", "list", "watch"])
def test_view_reads_no_secrets_edit_and_admin_do(verb: str) -> None:
    """A viewer reading Secrets reads credentials: the upload token signing key, a CA's
    key, service-account tokens, so view becomes whoever they speak for."""
    assert not allowed("view", verb, "secrets")
    assert allowed("edit", verb, "secrets") and allowed("admin", verb, "secrets")
    assert allowed("view", verb, "configmaps") and allowed("view", verb, "pods")


@pytest.mark.parametrize(("resource", "subresource", "group"), [
    ("pods", "status", ""), ("persistentvolumeclaims", "status", ""),
    ("deployments", "status", "apps"), ("daemonsets", "status", "apps")])
def test_edit_writes_no_status(resource: str, subresource: str, group: str) -> None:
    """Status is the controllers' and the kubelet's to write: an editor patching a claim
    Bound to another's volume is the attack."""
    for verb in ("update", "patch"):
        assert not allowed("edit", verb, resource, subresource, group)
        assert not allowed("admin", verb, resource, subresource, group)
    assert allowed("view", "get", resource, subresource, group)
    assert allowed("edit", "patch", resource, "", group)


def test_edit_writes_no_endpoints_but_may_exec_and_mint_tokens() -> None:
    assert not allowed("edit", "create", "endpoints")  # CVE-2021-25740
    assert not allowed("edit", "patch", "endpoints")
    assert allowed("edit", "get", "endpoints")
    for sub in ("exec", "attach", "portforward"):
        assert allowed("edit", "create", "pods", sub) and allowed("edit", "get", "pods", sub)
        assert not allowed("view", "create", "pods", sub)
    assert allowed("edit", "create", "serviceaccounts", "token")
    assert not allowed("view", "create", "serviceaccounts", "token")
