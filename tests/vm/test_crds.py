"""The CRDs are structural, current with vm/api/crds.py, and keep a KubeVirt manifest whole."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml

from localcluster.apiserver.rules.crds import validate_crd
from localcluster.apiserver.schema import pruning, validation
from localcluster.apiserver.schema.structural import validate_structural
from vm.api import crds

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "manifests" / "examples" / "vm-datavolume.yaml"


def _schema(crd: dict) -> dict:
    return crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]


@pytest.mark.parametrize("name", sorted(crds.all_crds()))
def test_committed_yaml_is_generated(name: str) -> None:
    on_disk = (ROOT / "manifests" / "crds" / name).read_text(encoding="utf-8")
    assert on_disk == crds.render(crds.all_crds()[name]), "run python -m vm.api.crds"


@pytest.mark.parametrize("name", sorted(crds.all_crds()))
def test_crd_is_accepted_and_structural(name: str) -> None:
    crd = crds.all_crds()[name]
    assert validate_crd(crd) == []
    assert validate_structural(_schema(crd)) == []


def test_upstream_vm_manifest_validates_and_nothing_is_pruned() -> None:
    vm = yaml.safe_load(EXAMPLE.read_text(encoding="utf-8"))
    vm["metadata"]["namespace"] = "default"
    s = _schema(crds.all_crds()["virtualmachines.yaml"])
    assert validation.validate(vm, s) == []
    pruned, report = pruning.prune_with_report(copy.deepcopy(vm), s)
    assert report == []
    assert pruned == vm
    # fields the schema does not type (masquerade, rng, features) survive
    assert pruned["spec"]["template"]["spec"]["domain"]["devices"]["rng"] == {}


def test_schema_rejects_a_wrong_type_naming_the_field() -> None:
    vm = yaml.safe_load(EXAMPLE.read_text(encoding="utf-8"))
    vm["spec"]["template"]["spec"]["domain"]["devices"]["disks"][0]["bootOrder"] = "first"
    s = _schema(crds.all_crds()["virtualmachines.yaml"])
    errors = [str(e) for e in validation.validate(vm, s)]
    assert any("bootOrder" in e for e in errors), errors


def test_short_names_and_columns() -> None:
    all_ = crds.all_crds()
    vm = all_["virtualmachines.yaml"]["spec"]
    vmi = all_["virtualmachineinstances.yaml"]["spec"]
    assert vm["names"]["shortNames"] == ["vm", "vms"]
    assert vmi["names"]["shortNames"] == ["vmi", "vmis"]
    assert [c["name"] for c in vm["versions"][0]["additionalPrinterColumns"]] == [
        "Age", "Status", "Ready"]
    assert [c["name"] for c in vmi["versions"][0]["additionalPrinterColumns"]] == [
        "Age", "Phase", "IP", "NodeName", "Ready"]
    assert vm["versions"][0]["subresources"] == {"status": {}}
