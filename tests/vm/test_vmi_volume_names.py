"""VMI volume names reach the launcher pod as its volume names (a directory or a device
node the kubelet makes of each) and as paths in it: the VMI webhook refuses a name
that is not a DNS-1123 label, or is one of the launcher pod's own volumes, naming the
field; and the machine type, which becomes QEMU's -machine option, must be one of q35's
exact names."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from vm.vmi.claims import LAUNCHER_VOLUMES, ClaimView, disk_claims
from vm.vmi.pod import LauncherConfig, launcher_pod
from vm.webhooks.review import respond
from vm.webhooks.vm_rules import validate_vm
from vm.webhooks.vmi_rules import validate_vmi_spec

EXAMPLE = Path(__file__).resolve().parents[2] / "manifests" / "examples" / "vm-datavolume.yaml"
LABEL = ("a lowercase RFC 1123 label must consist of lower case alphanumeric characters or "
         "'-', and must start and end with an alphanumeric character (e.g. 'my-name',  or "
         "'123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')")


def vmi_spec(volume: str = "rootdisk", machine: str | None = None) -> dict:
    spec = yaml.safe_load(EXAMPLE.read_text(encoding="utf-8"))["spec"]["template"]["spec"]
    spec["volumes"][0]["name"] = volume
    spec["domain"]["devices"]["disks"][0]["name"] = volume
    if machine is not None:
        spec["domain"]["machine"] = {"type": machine}
    return spec


def review(spec: dict, resource: str = "virtualmachineinstances") -> dict:
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": "u1", "operation": "CREATE", "namespace": "ns",
        "resource": {"group": "kubevirt.io", "version": "v1", "resource": resource},
        "object": {"metadata": {"name": "v", "namespace": "ns"}, "spec": spec}}}


def test_the_example_passes() -> None:
    assert validate_vmi_spec(vmi_spec()) == []


@pytest.mark.parametrize("name", ["../x", "/etc/x", "UPPER", "../../etc/ld.so.preload",
                                  "a.b", "a_b", "-a", "a-", "x\ny"])
def test_a_volume_name_that_is_not_a_label_is_refused_naming_the_field(name: str) -> None:
    problems = [str(p) for p in validate_vmi_spec(vmi_spec(name))]
    assert problems == [f"spec.volumes[0].name: {name!r} is not a valid volume name: {LABEL}"]
    response = respond(review(vmi_spec(name)))["response"]
    assert response["allowed"] is False and response["status"]["code"] == 422
    assert response["status"]["message"] == problems[0]


def test_a_long_volume_name_is_refused() -> None:
    assert [str(p) for p in validate_vmi_spec(vmi_spec("a" * 64))] == [
        f"spec.volumes[0].name: {'a' * 64!r} is not a valid volume name: must be no more "
        "than 63 characters"]
    assert validate_vmi_spec(vmi_spec("a" * 63)) == []


@pytest.mark.parametrize("name", sorted(LAUNCHER_VOLUMES))
def test_the_launcher_pods_own_volume_names_are_refused(name: str) -> None:
    problems = validate_vmi_spec(vmi_spec(name))
    assert [p.field for p in problems] == ["spec.volumes[0].name"]
    assert problems[0].message.startswith(f"{name!r} is reserved: the launcher pod has a "
                                          "volume of that name")


def test_a_vm_template_is_checked_under_its_prefix() -> None:
    vm = yaml.safe_load(EXAMPLE.read_text(encoding="utf-8"))
    vm["metadata"]["namespace"] = "ns"
    vm["spec"]["template"]["spec"] = vmi_spec("../x", machine="pc-q35-7.2,kernel=/x")
    assert [p.field for p in validate_vm(vm).problems] == [
        "spec.template.spec.volumes[0].name", "spec.template.spec.domain.machine.type"]


def test_launcher_volumes_are_the_launcher_pods_own() -> None:
    """LAUNCHER_VOLUMES must list every volume vm/vmi/pod.py adds of its own, so a VMI
    volume can never collide with one: a Filesystem and a Block claim and a cloud-init
    Secret, all rendered."""
    spec = {"domain": {"resources": {"requests": {"memory": "1Gi"}}},
            "volumes": [{"name": "fs", "persistentVolumeClaim": {"claimName": "fs-pvc"}},
                        {"name": "blk", "persistentVolumeClaim": {"claimName": "blk-pvc"}},
                        {"name": "ci", "cloudInitNoCloud": {"secretRef": {"name": "s"}}}]}
    vmi = {"metadata": {"name": "v", "namespace": "ns", "uid": "u"}, "spec": spec}
    views = {"fs-pvc": ClaimView(exists=True, phase="Bound"),
             "blk-pvc": ClaimView(exists=True, phase="Bound", volume_mode="Block")}
    pod = launcher_pod(vmi=vmi, claims=disk_claims(spec), views=views, config=LauncherConfig())
    own = {v["name"] for v in pod["spec"]["volumes"]} - {"fs", "blk", "ci-udata"}
    assert own == LAUNCHER_VOLUMES


@pytest.mark.parametrize("machine", ["pc-q35-7.2,kernel=/x", "pc-q35-7.2,initrd=/proc/self/environ",
                                     "pc-q35-7.2 ", " q35", "pc-q35-7.2\n", "q35,smm=off", "pc",
                                     "pc-i440fx-7.2", "pc-q35", "pc-q35-7", "pc-q35-7.2.1",
                                     "q35-7.2", "pc-q35-rhel9", "pc-q35-٧.٢", "Q35"])
def test_a_machine_type_other_than_q35s_names_is_refused(machine: str) -> None:
    problems = [str(p) for p in validate_vmi_spec(vmi_spec(machine=machine))]
    assert problems == [f"spec.domain.machine.type: {machine!r} is not supported (allowed "
                        "values: q35, pc-q35-<major>.<minor>, pc-q35-rhel<x>.<y>.<z>)"]
    assert respond(review(vmi_spec(machine=machine)))["response"]["allowed"] is False


@pytest.mark.parametrize("machine", ["q35", "pc-q35-7.2", "pc-q35-10.0", "pc-q35-rhel9.2.0",
                                     ""])
def test_q35_machine_types_are_accepted(machine: str) -> None:
    assert validate_vmi_spec(vmi_spec(machine=machine)) == []
