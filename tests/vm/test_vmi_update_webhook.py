"""Updates after creation: only KubeVirt's service accounts may change a VMI's spec (and
only where rootdisk's components do), as upstream's VMI update admitter; a user's
change is refused naming each field with upstream's message, metadata changes pass
(bar upstream's reserved kubevirt.io/ labels). A VM's UPDATE is checked as its CREATE."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from vm.webhooks.review import respond
from vm.webhooks.vmi_update import RESERVED_LABELS_CHANGED, RESTRICTED, changed_fields

EXAMPLE = Path(__file__).resolve().parents[2] / "manifests" / "examples" / "vm-datavolume.yaml"
USER = "alice"
SA = "system:serviceaccount:kubevirt:{}"


def example_vm() -> dict[str, Any]:
    vm: dict[str, Any] = yaml.safe_load(EXAMPLE.read_text(encoding="utf-8"))
    vm["metadata"]["namespace"] = "ns"
    return vm


def vmi() -> dict[str, Any]:
    vm = example_vm()
    return {"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance",
            "metadata": {"name": "demo", "namespace": "ns", "labels": {"app": "a"},
                         "annotations": {"note": "x"}, "resourceVersion": "7"},
            "spec": copy.deepcopy(vm["spec"]["template"]["spec"]),
            "status": {"phase": "Running"}}


def review(old: dict[str, Any] | None, new: dict[str, Any], *, user: str = USER,
           resource: str = "virtualmachineinstances", operation: str = "UPDATE"
           ) -> dict[str, Any]:
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": "u1", "operation": operation, "namespace": "ns", "name": "demo",
        "userInfo": {"username": user, "groups": ["system:authenticated"]},
        "resource": {"group": "kubevirt.io", "version": "v1", "resource": resource},
        "object": new, "oldObject": old}}


def answer(old: dict[str, Any] | None, new: dict[str, Any], **kw: Any) -> dict[str, Any]:
    out: dict[str, Any] = respond(review(old, new, **kw), namespace="kubevirt")["response"]
    return out


def message(out: dict[str, Any]) -> str:
    assert out["allowed"] is False, out
    assert out["status"]["code"] == 422
    return str(out["status"]["message"])


def test_a_users_machine_type_change_is_refused_naming_the_field() -> None:
    old = vmi()
    new = copy.deepcopy(old)
    new["spec"]["domain"]["machine"]["type"] = "pc-q35-7.2,kernel=/x"
    assert message(answer(old, new)) == f"spec.domain.machine.type: {RESTRICTED}"


def test_a_valid_machine_type_change_is_refused_too() -> None:
    """Not a matter of the value: the spec that was admitted is the one that runs."""
    old = vmi()
    new = copy.deepcopy(old)
    new["spec"]["domain"]["machine"]["type"] = "pc-q35-7.2"
    assert message(answer(old, new)) == f"spec.domain.machine.type: {RESTRICTED}"


def test_a_users_volume_rename_is_refused_naming_each_field() -> None:
    old = vmi()
    new = copy.deepcopy(old)
    new["spec"]["volumes"][0]["name"] = "private"
    new["spec"]["domain"]["devices"]["disks"][0]["name"] = "private"
    assert message(answer(old, new)) == (
        f"spec.domain.devices.disks[0].name: {RESTRICTED}, "
        f"spec.volumes[0].name: {RESTRICTED}")


def test_a_user_adding_a_volume_or_removing_a_field_is_refused() -> None:
    old = vmi()
    new = copy.deepcopy(old)
    new["spec"]["volumes"].append({"name": "b", "emptyDisk": {"capacity": "1Gi"}})
    del new["spec"]["domain"]["features"]
    assert message(answer(old, new)) == (f"spec.domain.features: {RESTRICTED}, "
                                         f"spec.volumes: {RESTRICTED}")


def test_a_users_metadata_only_update_passes() -> None:
    old = vmi()
    new = copy.deepcopy(old)
    new["metadata"]["labels"] = {"app": "b", "team": "t", "kubevirt.io/vm": "demo"}
    new["metadata"]["annotations"] = {"note": "y"}
    new["metadata"]["finalizers"] = ["example.com/hold"]
    new["status"] = {"phase": "Failed"}  # not the user's to write, but not this webhook's
    assert answer(old, new) == {"uid": "u1", "allowed": True}


def test_a_user_setting_a_field_to_null_changes_nothing() -> None:
    old = vmi()
    new = copy.deepcopy(old)
    new["spec"]["hostname"] = None
    assert answer(old, new)["allowed"] is True


@pytest.mark.parametrize("label", ["kubevirt.io/nodeName", "kubevirt.io/created-by"])
def test_a_user_may_not_change_a_reserved_label(label: str) -> None:
    old = vmi()
    old["metadata"]["labels"]["kubevirt.io/nodeName"] = "node-a"
    new = copy.deepcopy(old)
    new["metadata"]["labels"][label] = "node-b"
    assert message(answer(old, new)) == f"metadata.labels: {RESERVED_LABELS_CHANGED}: {label}"
    del new["metadata"]["labels"]["kubevirt.io/nodeName"]
    assert "kubevirt.io/nodeName" in message(answer(old, new))


def test_virt_api_may_shorten_the_grace_period() -> None:
    """`stop --grace-period` / a forced restart: vm.api.lifecycle's patch, as virt-api."""
    old = vmi()
    new = copy.deepcopy(old)
    new["spec"]["terminationGracePeriodSeconds"] = 1
    assert answer(old, new, user=SA.format("kubevirt-apiserver"))["allowed"] is True
    assert message(answer(old, new)) == f"spec.terminationGracePeriodSeconds: {RESTRICTED}"


def test_the_controller_may_set_finalizers_and_the_node_label() -> None:
    """vm.vmi.kube's patches, as virt-controller."""
    old = vmi()
    new = copy.deepcopy(old)
    new["metadata"]["finalizers"] = ["kubevirt.io/virtualMachineControllerFinalize"]
    new["metadata"]["labels"]["kubevirt.io/nodeName"] = "node-a"
    assert answer(old, new, user=SA.format("kubevirt-controller"))["allowed"] is True
    new["metadata"]["finalizers"] = []
    assert answer(new, copy.deepcopy(new),
                  user=SA.format("kubevirt-controller"))["allowed"] is True


@pytest.mark.parametrize("sa", ["kubevirt-apiserver", "kubevirt-controller",
                                "kubevirt-handler"])
def test_service_accounts_may_change_no_other_spec_field(sa: str) -> None:
    old = vmi()
    new = copy.deepcopy(old)
    new["spec"]["domain"]["machine"]["type"] = "pc-q35-7.2,kernel=/x"
    assert message(answer(old, new, user=SA.format(sa))) == (
        f"spec.domain.machine.type: {RESTRICTED}: KubeVirt's service accounts may change "
        "only spec.terminationGracePeriodSeconds")


@pytest.mark.parametrize("user", ["system:serviceaccount:other:kubevirt-apiserver",
                                  "system:serviceaccount:kubevirt:default",
                                  "kubevirt-apiserver"])
def test_other_service_accounts_are_users(user: str) -> None:
    old = vmi()
    new = copy.deepcopy(old)
    new["spec"]["terminationGracePeriodSeconds"] = 1
    assert message(answer(old, new, user=user)) == (
        f"spec.terminationGracePeriodSeconds: {RESTRICTED}")
    new = copy.deepcopy(old)
    new["metadata"]["labels"]["kubevirt.io/nodeName"] = "n"
    assert RESERVED_LABELS_CHANGED in message(answer(old, new, user=user))


def test_kubevirts_namespace_is_virt_apis_own(monkeypatch: pytest.MonkeyPatch) -> None:
    old = vmi()
    new = copy.deepcopy(old)
    new["spec"]["terminationGracePeriodSeconds"] = 1
    req = review(old, new, user="system:serviceaccount:kv:kubevirt-apiserver")
    monkeypatch.delenv("POD_NAMESPACE", raising=False)
    assert respond(req)["response"]["allowed"] is False
    monkeypatch.setenv("POD_NAMESPACE", "kv")
    assert respond(req)["response"]["allowed"] is True
    assert respond(review(old, new, user=SA.format("kubevirt-apiserver")))[
        "response"]["allowed"] is False


def test_an_update_without_the_old_object_is_refused() -> None:
    assert message(answer(None, vmi())) == "oldObject: required for an update"


def test_an_unchanged_legacy_spec_is_not_checked_again() -> None:
    """A VMI admitted before a rule was tightened keeps its metadata writable (its
    finalizer must come off for it to go)."""
    old = vmi()
    old["spec"]["domain"]["machine"]["type"] = "pc-q35-7.2,kernel=/x"
    new = copy.deepcopy(old)
    new["metadata"]["finalizers"] = []
    assert answer(old, new)["allowed"] is True
    assert answer(old, new, user=SA.format("kubevirt-controller"))["allowed"] is True


def test_changed_fields() -> None:
    assert list(changed_fields({"a": 1, "b": [1, {"c": 2}]}, {"a": 1, "b": [1, {"c": 3}]},
                               "spec")) == ["spec.b[1].c"]
    assert list(changed_fields({"a": [1]}, {"a": [1, 2]}, "spec")) == ["spec.a"]
    assert list(changed_fields({"a": 1}, {"a": True}, "spec")) == ["spec.a"]
    assert list(changed_fields({"a": None}, {}, "spec")) == []
    assert list(changed_fields({"a": {}}, {}, "spec")) == ["spec.a"]
    assert list(changed_fields(None, {"a": 1}, "spec")) == ["spec"]


def test_more_than_ten_changes_are_cut_short() -> None:
    old = vmi()
    new = copy.deepcopy(old)
    new["spec"]["nodeSelector"] = {}
    old["spec"]["nodeSelector"] = {f"k{i:02}": "v" for i in range(12)}
    out = answer(old, new)
    text = message(out)
    # the message holds the first 10 causes (KubeVirt's ToAdmissionResponse), the
    # details every one
    assert text.count(RESTRICTED) == 10
    assert text.endswith(f"spec.nodeSelector.k09: {RESTRICTED}, and 1 more validation errors")
    causes = out["status"]["details"]["causes"]
    assert len(causes) == 11 and causes[-1] == {
        "reason": "FieldValueInvalid", "message": f"{RESTRICTED} (and more fields)",
        "field": "spec"}


# -- a VM's UPDATE runs the same checks as its CREATE ----------------------------------

def test_a_vm_update_with_an_invalid_template_is_refused() -> None:
    old = example_vm()
    new = copy.deepcopy(old)
    new["spec"]["template"]["spec"]["domain"]["machine"]["type"] = "pc-q35-7.2,kernel=/x"
    text = message(answer(old, new, resource="virtualmachines"))
    assert text.startswith("spec.template.spec.domain.machine.type: ")
    assert message(answer(None, new, resource="virtualmachines",
                          operation="CREATE")) == text
    new = copy.deepcopy(old)
    new["spec"]["template"]["spec"]["volumes"][0]["name"] = "../x"
    assert "spec.template.spec.volumes[0].name: '../x' is not a valid volume name" in \
        message(answer(old, new, resource="virtualmachines"))


def test_a_valid_vm_update_passes_for_a_user() -> None:
    old = example_vm()
    new = copy.deepcopy(old)
    new["spec"]["runStrategy"] = "Halted"
    new["spec"]["template"]["spec"]["domain"]["machine"]["type"] = "pc-q35-7.2"
    assert answer(old, new, resource="virtualmachines")["allowed"] is True


@pytest.mark.parametrize("label", ["kubevirt.io/nodeName", "kubevirt.io/created-by"])
def test_a_user_may_not_create_a_vmi_or_vm_template_with_a_reserved_label(
        label: str) -> None:
    """Upstream's ValidateVirtualMachineInstanceMetadata: on a VMI a user creates, and in
    a VM's template (its VMIs are created by the controller, a KubeVirt account)."""
    new = vmi()
    new["metadata"]["labels"][label] = "node-b"
    text = message(answer(None, new, operation="CREATE"))
    assert text == ("metadata.labels: creation of the following reserved kubevirt.io/"
                    f" labels on a VMI object is prohibited: {label}")
    vm = example_vm()
    vm["spec"]["template"].setdefault("metadata", {}).setdefault("labels", {})[label] = "x"
    for operation in ("CREATE", "UPDATE"):
        text = message(answer(example_vm(), vm, operation=operation,
                              resource="virtualmachines"))
        assert ("spec.template.metadata.labels: creation of the following reserved"
                f" kubevirt.io/ labels on a VMI object is prohibited: {label}") in text
    # KubeVirt's own accounts may: the VM controller creates VMIs carrying them
    assert answer(None, new, operation="CREATE",
                  user=SA.format("kubevirt-controller"))["allowed"] is True
    assert answer(None, vm, operation="CREATE", resource="virtualmachines",
                  user=SA.format("kubevirt-controller"))["allowed"] is True
    # other kubevirt.io/ labels are not reserved
    new = vmi()
    new["metadata"]["labels"]["kubevirt.io/domain"] = "demo"
    assert answer(None, new, operation="CREATE")["allowed"] is True
