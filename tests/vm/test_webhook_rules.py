"""Validating webhook rules: each refusal names the field."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml

from vm.webhooks.review import BadReview, respond
from vm.webhooks.vm_rules import RUNNING_DEPRECATED, validate_vm
from vm.webhooks.vmi_rules import validate_vmi_spec

EXAMPLE = Path(__file__).resolve().parents[2] / "manifests" / "examples" / "vm-datavolume.yaml"


def vm() -> dict:
    v = yaml.safe_load(EXAMPLE.read_text(encoding="utf-8"))
    v["metadata"]["namespace"] = "ns"
    return v


def tspec(v: dict) -> dict:
    return v["spec"]["template"]["spec"]


def test_example_is_valid() -> None:
    assert validate_vm(vm()).problems == ()


def _running(v: dict) -> None:
    v["spec"]["running"] = True


def _no_strategy(v: dict) -> None:
    del v["spec"]["runStrategy"]


def _bad_strategy(v: dict) -> None:
    v["spec"]["runStrategy"] = "Sometimes"


def _disk_without_volume(v: dict) -> None:
    tspec(v)["domain"]["devices"]["disks"].append({"name": "ghost", "disk": {}})


def _duplicate_disk(v: dict) -> None:
    tspec(v)["domain"]["devices"]["disks"].append({"name": "rootdisk", "disk": {}})


def _duplicate_volume(v: dict) -> None:
    tspec(v)["volumes"].append({"name": "rootdisk", "emptyDisk": {"capacity": "1Gi"}})


def _duplicate_boot(v: dict) -> None:
    tspec(v)["volumes"].append({"name": "b", "emptyDisk": {"capacity": "1Gi"}})
    tspec(v)["domain"]["devices"]["disks"].append({"name": "b", "bootOrder": 1})


def _two_sources(v: dict) -> None:
    tspec(v)["volumes"][0]["persistentVolumeClaim"] = {"claimName": "x"}


def _unreferenced_template(v: dict) -> None:
    t = copy.deepcopy(v["spec"]["dataVolumeTemplates"][0])
    t["metadata"]["name"] = "orphan"
    v["spec"]["dataVolumeTemplates"].append(t)


def _no_memory(v: dict) -> None:
    d = tspec(v)["domain"]
    del d["memory"], d["resources"]


def _tiny_memory(v: dict) -> None:
    d = tspec(v)["domain"]
    del d["memory"]
    d["resources"]["requests"]["memory"] = "1k"


def _over_limit(v: dict) -> None:
    tspec(v)["domain"]["resources"]["limits"] = {"memory": "128Mi"}


def _ide(v: dict) -> None:
    tspec(v)["domain"]["devices"]["disks"][0]["disk"]["bus"] = "ide"


def _other_namespace(v: dict) -> None:
    v["spec"]["dataVolumeTemplates"][0]["metadata"]["namespace"] = "elsewhere"


def _pvc_and_storage(v: dict) -> None:
    v["spec"]["dataVolumeTemplates"][0]["spec"]["pvc"] = {}


def _bios_and_efi(v: dict) -> None:
    tspec(v)["domain"]["firmware"] = {"bootloader": {"bios": {}, "efi": {}}}


CASES = [
    (_running, "spec.running", "mutually exclusive"),
    (_no_strategy, "spec.runStrategy", "must be specified"),
    (_bad_strategy, "spec.runStrategy", "Invalid RunStrategy"),
    (_disk_without_volume, "spec.template.spec.domain.devices.disks[1].name", "not found"),
    (_duplicate_disk, "spec.template.spec.domain.devices.disks[1].name", "duplicate disk"),
    (_duplicate_volume, "spec.template.spec.volumes[1].name", "duplicate volume"),
    (_duplicate_boot, "spec.template.spec.domain.devices.disks[1].bootOrder",
     "already set for disk 'rootdisk'"),
    (_two_sources, "spec.template.spec.volumes[0]", "exactly one source"),
    (_unreferenced_template, "spec.dataVolumeTemplates[1]", "must be referenced"),
    (_no_memory, "spec.template.spec.domain.resources.requests.memory", "no memory"),
    (_tiny_memory, "spec.template.spec.domain.resources.requests.memory", "1M"),
    (_over_limit, "spec.template.spec.domain.memory.guest", "greater than the memory limit"),
    (_ide, "spec.template.spec.domain.devices.disks[0].disk.bus", "IDE"),
    (_other_namespace, "spec.dataVolumeTemplates[0].metadata.namespace", "differs"),
    (_pvc_and_storage, "spec.dataVolumeTemplates[0].spec", "mutually exclusive"),
    (_bios_and_efi, "spec.template.spec.domain.firmware.bootloader", "mutually exclusive"),
]


@pytest.mark.parametrize(("mutate", "field", "text"), CASES, ids=[c[0].__name__ for c in CASES])
def test_refusals_name_the_field(mutate, field: str, text: str) -> None:  # type: ignore[no-untyped-def]
    v = vm()
    mutate(v)
    problems = validate_vm(v).problems
    assert any(p.field == field and text in p.message for p in problems), problems


def test_running_alone_is_accepted_with_the_warning() -> None:
    v = vm()
    del v["spec"]["runStrategy"]
    v["spec"]["running"] = False
    verdict = validate_vm(v)
    assert verdict.problems == () and verdict.warnings == (RUNNING_DEPRECATED,)


def test_vmi_rules_at_the_vmi_prefix() -> None:
    spec = tspec(vm())
    spec["domain"]["devices"]["disks"][0]["name"] = "nope"
    [p] = validate_vmi_spec(spec)
    assert str(p) == "spec.domain.devices.disks[0].name: volume 'nope' not found"


def review(obj: dict, resource: str, op: str = "CREATE") -> dict:
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": "r1", "operation": op, "namespace": "ns", "object": obj,
        "resource": {"group": "kubevirt.io", "version": "v1", "resource": resource}}}


def test_review_denies_with_all_problems_and_warns() -> None:
    v = vm()
    v["spec"]["running"] = True
    _ide(v)
    out = respond(review(v, "virtualmachines"))["response"]
    assert out["uid"] == "r1" and out["allowed"] is False
    assert out["status"]["code"] == 422
    assert "spec.running: Running and RunStrategy are mutually exclusive" in out["status"][
        "message"]
    assert "disks[0].disk.bus: IDE bus is not supported" in out["status"]["message"]
    assert out["warnings"] == [RUNNING_DEPRECATED]


def test_review_allows_a_good_vmi() -> None:
    v = vm()
    vmi = {"metadata": {"name": "x"}, "spec": tspec(v)}
    assert respond(review(vmi, "virtualmachineinstances"))["response"]["allowed"] is True


def test_bad_review_body() -> None:
    with pytest.raises(BadReview):
        respond({"kind": "AdmissionReview"})


@pytest.mark.parametrize(("ports", "cidr", "field", "text"), [
    ([{"port": 0}], None, "spec.template.spec.domain.devices.interfaces[0].ports[0].port",
     "must be between 1 and 65535, got 0"),
    ([{"port": 22, "protocol": "SCTP"}], None,
     "spec.template.spec.domain.devices.interfaces[0].ports[0].protocol", "must be TCP or UDP"),
    ([{"port": 22}, {"port": 22}], None,
     "spec.template.spec.domain.devices.interfaces[0].ports[1].port",
     "TCP port 22 is listed twice"),
    ([], "10.0.2.0/30", "spec.template.spec.networks[0].pod.vmNetworkCIDR",
     "10.0.2.0/30 is too small: the prefix must be at most /29"),
])
def test_review_refuses_bad_ports_and_cidrs_naming_the_field(
        ports: list[dict], cidr: str | None, field: str, text: str) -> None:
    v = vm()
    spec = tspec(v)
    spec["networks"] = [{"name": "default", "pod": {"vmNetworkCIDR": cidr} if cidr else {}}]
    spec["domain"]["devices"]["interfaces"] = [
        {"name": "default", "masquerade": {}, "ports": ports}]
    out = respond(review(v, "virtualmachines"))["response"]
    assert out["allowed"] is False
    assert f"{field}: {text}" in out["status"]["message"]
    vmi = {"metadata": {"name": "x"}, "spec": spec}
    out = respond(review(vmi, "virtualmachineinstances"))["response"]
    assert out["allowed"] is False
    assert f"{field.replace('spec.template.spec', 'spec')}: {text}" in out["status"]["message"]


def test_no_ports_is_no_warning_as_upstream() -> None:
    """An interface without ports gets no inbound traffic here, but admission says nothing
    KubeVirt would not: kubectl prints the same against both (the launcher logs it)."""
    vmi = {"metadata": {"name": "x"}, "spec": tspec(vm())}
    out = respond(review(vmi, "virtualmachineinstances"))["response"]
    assert out["allowed"] is True
    assert "warnings" not in out or out["warnings"] == []


# upstream's validateStartStrategy (vmi-create-admitter.go at d923fdb815cd), its words
@pytest.mark.parametrize(("extra", "message"), [
    ({"startStrategy": "Paused"}, None),
    ({"startStrategy": "Paused", "readinessProbe": {"exec": {"command": ["true"]}}}, None),
    ({"startStrategy": "Later"},
     "spec.startStrategy is set with an unrecognized option: Later"),
    ({"startStrategy": "Paused", "livenessProbe": {"exec": {"command": ["true"]}}},
     "either spec.startStrategy or spec.livenessProbe should be provided.Pausing VMI with "
     "LivenessProbe is not supported"),
])
def test_start_strategy(extra: dict, message: str | None) -> None:
    spec = {**tspec(vm()), **extra}
    problems = validate_vmi_spec(spec)
    assert [str(p) for p in problems] == ([] if message is None else [message])
    assert all(p.field == "spec.startStrategy" for p in problems)


# every feature field of the VMI spec the launcher does not implement (feature_rules.RULES)
@pytest.mark.parametrize(("extra", "field", "why"), [
    ({"domain": {"firmware": {"kernelBoot": {"container": {"image": "k"}}}}},
     "spec.domain.firmware.kernelBoot", "direct kernel boot"),
    ({"domain": {"memory": {"hugepages": {"pageSize": "2Mi"}}}},
     "spec.domain.memory.hugepages", "hugepages"),
    ({"domain": {"memory": {"maxGuest": "4Gi"}}}, "spec.domain.memory.maxGuest",
     "memory hotplug"),
    ({"domain": {"cpu": {"maxSockets": 4}}}, "spec.domain.cpu.maxSockets", "CPU hotplug"),
    ({"domain": {"cpu": {"dedicatedCpuPlacement": True}}},
     "spec.domain.cpu.dedicatedCpuPlacement", "dedicated CPUs"),
    ({"domain": {"cpu": {"isolateEmulatorThread": True}}},
     "spec.domain.cpu.isolateEmulatorThread", "dedicated CPUs"),
    ({"domain": {"cpu": {"numa": {"guestMappingPassthrough": {}}}}}, "spec.domain.cpu.numa",
     "guest NUMA"),
    ({"domain": {"cpu": {"realtime": {"mask": "0"}}}}, "spec.domain.cpu.realtime",
     "realtime vCPUs"),
    ({"domain": {"launchSecurity": {"sev": {}}}}, "spec.domain.launchSecurity",
     "confidential computing"),
    ({"domain": {"clock": {"timezone": "Europe/Paris"}}}, "spec.domain.clock.timezone",
     "timezone"),
    ({"domain": {"clock": {"utc": {"offsetSeconds": 3600}}}},
     "spec.domain.clock.utc.offsetSeconds", "offset from UTC"),
    ({"domain": {"ioThreads": {"supplementalPoolThreadCount": 2}}}, "spec.domain.ioThreads",
     "IOThread pool"),
    ({"architecture": "arm64"}, "spec.architecture", "only amd64"),
])
def test_unsupported_features_are_refused_naming_the_field(extra: dict, field: str,
                                                           why: str) -> None:
    spec = tspec(vm())
    for key, value in extra.items():
        if key == "domain":
            for dkey, dvalue in value.items():
                spec["domain"][dkey] = {**(spec["domain"].get(dkey) or {}), **dvalue}
        else:
            spec[key] = value
    problems = [p for p in validate_vmi_spec(spec) if p.field == field]
    assert len(problems) == 1, validate_vmi_spec(spec)
    assert why in problems[0].message


@pytest.mark.parametrize("extra", [
    {"domain": {"clock": {"utc": {}, "timer": {"hpet": {"present": False}}}}},
    {"domain": {"clock": {"utc": {"offsetSeconds": 0}}}},
    {"domain": {"features": {"hyperv": {"relaxed": {}}, "kvm": {"hidden": True}}}},
    {"domain": {"cpu": {"dedicatedCpuPlacement": False}}},
    {"architecture": "amd64"},
    {"evictionStrategy": "None", "nodeSelector": {"a": "b"}},
])
def test_hints_are_accepted(extra: dict) -> None:
    spec = tspec(vm())
    for key, value in extra.items():
        if key == "domain":
            spec["domain"].update(value)
        else:
            spec[key] = value
    assert validate_vmi_spec(spec) == []
