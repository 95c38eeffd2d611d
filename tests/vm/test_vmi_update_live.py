"""The VMI update webhook through a real API server: virt-api registered as the
manifests register it and running as its own service account, with the manifests'
RBAC. A user with `kubevirt.io:edit` cannot change a VMI's spec after creation (nor
its reserved labels), can change its other metadata; virt-controller's patches and
virt-api's stop with a grace period still go through; a VM's update is checked as
its create."""

from __future__ import annotations

import copy
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from kubeclient import JSON_PATCH, Client, KubeError
from kubeclient.resources import VMIS, VMS
from localcluster.apiserver.threaded import ServerThread
from vm.api import kube as api_kube

from .conftest import CRD_FILES, CRDS, RBAC_KINDS, ROOT, kube_for, wait_served
from .virtapi_harness import NAMESPACES, VirtAPIThread, register

EXAMPLE = ROOT / "manifests" / "examples" / "vm-datavolume.yaml"
BASE = "/apis/subresources.kubevirt.io/v1"
SA = "system:serviceaccount:kubevirt:{}"
USER = "alice"


def as_user(server: object, user: str) -> Client:
    kube = kube_for(server)
    kube.api.set_default_header("Impersonate-User", user)
    return kube


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory,
            ) -> Iterator[tuple[object, Client, dict[str, Client]]]:
    thread = ServerThread(tmp_path_factory.mktemp("apiserver"), bookmark_interval=0.5,
                          aggregation_check_interval=0.3)
    server = thread.start()
    kube = kube_for(server)
    users = {name: as_user(server, name) for name in (
        USER, SA.format("kubevirt-apiserver"), SA.format("kubevirt-controller"),
        SA.format("kubevirt-handler"))}
    virtapi = None
    try:
        for name in CRD_FILES:
            kube.create(CRDS, yaml.safe_load((ROOT / "manifests" / "crds" / name).read_text()))
        wait_served(kube, "/apis/kubevirt.io/v1/virtualmachines")
        for doc in yaml.safe_load_all((ROOT / "manifests/rbac/kubevirt.yaml").read_text()):
            if doc and doc["kind"] == "Namespace":
                kube.create(NAMESPACES, doc)
            elif doc:
                kube.create(RBAC_KINDS[doc["kind"]], doc, doc["metadata"].get("namespace"))
        # virt-api as in its pod: its own service account, no more than the manifests grant
        virtapi = VirtAPIThread(users[SA.format("kubevirt-apiserver")]).start()
        register(kube, virtapi.port)
        api_kube.publish_ca(kube, virtapi.bundle)
        wait_served(kube, BASE)
        yield server, kube, users
    finally:
        if virtapi is not None:
            virtapi.stop()
        for k in [kube, *users.values()]:
            k.api.close()
        thread.stop()


@pytest.fixture(autouse=True)
def _virt_apis_namespace(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("POD_NAMESPACE", raising=False)  # virt-api's namespace: kubevirt


@pytest.fixture
def ns(cluster: tuple[object, Client, dict[str, Client]]) -> str:
    kube = cluster[1]
    name = f"vu-{uuid.uuid4().hex[:8]}"
    kube.create(NAMESPACES, {"apiVersion": "v1", "kind": "Namespace",
                             "metadata": {"name": name}})
    kube.create(RBAC_KINDS["RoleBinding"], {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
        "metadata": {"name": "alice-edit"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                    "name": "kubevirt.io:edit"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User",
                      "name": USER}]}, name)
    return name


def example_vm(strategy: str = "Always") -> dict[str, Any]:
    vm: dict[str, Any] = yaml.safe_load(EXAMPLE.read_text(encoding="utf-8"))
    vm["spec"]["runStrategy"] = strategy
    return vm


def make_vmi(kube: Client, ns: str, *, by: Client | None = None) -> dict[str, Any]:
    """A Running VMI named demo, created by ``by`` (else the admin ``kube``)."""
    spec = copy.deepcopy(example_vm()["spec"]["template"]["spec"])
    vmi = (by or kube).create(VMIS, {
        "apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance",
        "metadata": {"name": "demo", "labels": {"app": "a"}}, "spec": spec}, ns)
    vmi["status"] = {"phase": "Running"}
    out: dict[str, Any] = kube.replace_status(VMIS, vmi)
    return out


def refusal(fn: Any, *args: Any, **kw: Any) -> str:
    with pytest.raises(KubeError) as err:
        fn(*args, **kw)
    assert err.value.status in (400, 403, 422), err.value
    return str(err.value.message)


def test_a_users_spec_changes_are_refused_naming_the_field(
        cluster: tuple[object, Client, dict[str, Client]], ns: str) -> None:
    kube, alice = cluster[1], cluster[2][USER]
    make_vmi(cluster[1], ns, by=alice)
    text = refusal(alice.patch, VMIS, "demo", {"spec": {"domain": {"machine": {
        "type": "pc-q35-7.2,kernel=/x"}}}}, ns)
    assert "spec.domain.machine.type: update of VMI object is restricted" in text
    ops = [{"op": "replace", "path": "/spec/volumes/0/name", "value": "private"}]
    text = refusal(alice.patch, VMIS, "demo", ops, ns, content_type=JSON_PATCH)
    assert "spec.volumes[0].name: update of VMI object is restricted" in text
    vmi = alice.get_or_none(VMIS, "demo", ns)
    vmi["spec"]["terminationGracePeriodSeconds"] = 0
    text = refusal(alice.request, "PUT", VMIS.path(ns, "demo"), body=vmi)
    assert "spec.terminationGracePeriodSeconds: update of VMI object is restricted" in text
    stored = kube.get_or_none(VMIS, "demo", ns)
    assert stored["spec"]["domain"]["machine"]["type"] == "q35"
    assert stored["spec"]["volumes"][0]["name"] == "rootdisk"
    assert stored["spec"]["terminationGracePeriodSeconds"] == 30


def test_a_users_metadata_changes_pass_but_not_reserved_labels(
        cluster: tuple[object, Client, dict[str, Client]], ns: str) -> None:
    alice = cluster[2][USER]
    make_vmi(cluster[1], ns, by=alice)
    out = alice.patch(VMIS, "demo", {"metadata": {"labels": {"app": "b", "team": "t"},
                                                  "annotations": {"note": "x"}}}, ns)
    assert out["metadata"]["labels"] == {"app": "b", "team": "t"}
    assert out["metadata"]["annotations"]["note"] == "x"
    text = refusal(alice.patch, VMIS, "demo", {"metadata": {"labels": {
        "kubevirt.io/nodeName": "elsewhere"}}}, ns)
    assert ("metadata.labels: modification of the following reserved kubevirt.io/ labels "
            "on a VMI object is prohibited: kubevirt.io/nodeName") in text


def test_a_user_may_not_create_a_vmi_carrying_a_reserved_label(
        cluster: tuple[object, Client, dict[str, Client]], ns: str) -> None:
    """The attack: a VMI created with ``kubevirt.io/nodeName`` set is served by that
    node's handler before any scheduling decided so."""
    kube, alice = cluster[1], cluster[2][USER]
    spec = copy.deepcopy(example_vm()["spec"]["template"]["spec"])
    text = refusal(alice.create, VMIS, {
        "apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance",
        "metadata": {"name": "placed", "labels": {"kubevirt.io/nodeName": "node-b"}},
        "spec": spec}, ns)
    assert ("metadata.labels: creation of the following reserved kubevirt.io/ labels on a"
            " VMI object is prohibited: kubevirt.io/nodeName") in text
    assert kube.get_or_none(VMIS, "placed", ns) is None


def test_the_controllers_patches_pass(cluster: tuple[object, Client, dict[str, Client]],
                                      ns: str) -> None:
    """vm.vmi.kube's: its finalizer, then the node label; and the handler's status."""
    users = cluster[2]
    controller = users[SA.format("kubevirt-controller")]
    handler = users[SA.format("kubevirt-handler")]
    vmi = make_vmi(cluster[1], ns)
    vmi = controller.patch(VMIS, "demo", {"metadata": {
        "finalizers": ["kubevirt.io/virtualMachineControllerFinalize"],
        "resourceVersion": vmi["metadata"]["resourceVersion"]}}, ns)
    vmi = controller.patch(VMIS, "demo", {"metadata": {
        "labels": {"kubevirt.io/nodeName": "node-a"},
        "resourceVersion": vmi["metadata"]["resourceVersion"]}}, ns)
    assert vmi["metadata"]["labels"]["kubevirt.io/nodeName"] == "node-a"
    vmi["status"] = {"phase": "Succeeded"}
    handler.replace_status(VMIS, vmi)
    vmi = controller.patch(VMIS, "demo", {"metadata": {"finalizers": []}}, ns)
    assert not vmi["metadata"].get("finalizers")
    assert vmi["status"]["phase"] == "Succeeded"
    # nor may the controller change the spec itself
    text = refusal(controller.patch, VMIS, "demo", {"spec": {"domain": {"machine": {
        "type": "pc-q35-7.2"}}}}, ns)
    assert "spec.domain.machine.type: update of VMI object is restricted: KubeVirt's " \
           "service accounts may change only spec.terminationGracePeriodSeconds" in text


def test_stop_with_a_grace_period_shortens_the_vmis(
        cluster: tuple[object, Client, dict[str, Client]], ns: str) -> None:
    """virt-api's patch of the VMI's terminationGracePeriodSeconds, as its own service
    account, for a user allowed to stop the VM."""
    kube, alice = cluster[1], cluster[2][USER]
    alice.create(VMS, example_vm("Always"), ns)
    make_vmi(kube, ns)
    alice.request("PUT", f"{BASE}/namespaces/{ns}/virtualmachines/demo/stop",
                  body={"gracePeriod": 5})
    assert kube.get_or_none(VMIS, "demo", ns)["spec"]["terminationGracePeriodSeconds"] == 5
    assert kube.get_or_none(VMS, "demo", ns)["spec"]["runStrategy"] == "Halted"


def test_a_vm_update_with_an_invalid_template_is_refused(
        cluster: tuple[object, Client, dict[str, Client]], ns: str) -> None:
    alice = cluster[2][USER]
    alice.create(VMS, example_vm("Halted"), ns)
    text = refusal(alice.patch, VMS, "demo", {"spec": {"template": {"spec": {"domain": {
        "machine": {"type": "pc-q35-7.2,kernel=/x"}}}}}}, ns)
    assert "spec.template.spec.domain.machine.type: " in text
    ops = [{"op": "replace", "path": "/spec/template/spec/volumes/0/name", "value": "../x"},
           {"op": "replace", "path": "/spec/template/spec/domain/devices/disks/0/name",
            "value": "../x"}]
    text = refusal(alice.patch, VMS, "demo", ops, ns, content_type=JSON_PATCH)
    assert "spec.template.spec.volumes[0].name: '../x' is not a valid volume name" in text
    alice.patch(VMS, "demo", {"spec": {"template": {"spec": {"domain": {
        "machine": {"type": "pc-q35-7.2"}}}}}}, ns)
    assert alice.get_or_none(VMS, "demo", ns)["spec"]["template"]["spec"]["domain"]["machine"][
        "type"] == "pc-q35-7.2"
