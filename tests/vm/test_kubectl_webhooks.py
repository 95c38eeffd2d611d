"""kubectl 1.32 against KubeVirt's webhooks (virt-api, ``vm.api.server``, registered from
manifests/deploy/virt-api.yaml) on a real localcluster API server: a refusal prints each
cause with its field (``The request is invalid: …``), and the deprecation warning of
``spec.running`` is shown, on a refusal too."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from kubeclient import Client
from kubeclient.resources import VMS
from tests.localcluster.apiserver.kubectl_tool import Run, needs_kubectl, runner

from .conftest import ROOT
from .virtapi_harness import NAMESPACES, running

pytestmark = needs_kubectl
EXAMPLE = ROOT / "manifests" / "examples" / "vm-datavolume.yaml"
WARNING = "Warning: spec.running is deprecated, please use spec.runStrategy instead."


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Any, Client, int]]:
    with running(tmp_path_factory.mktemp("apiserver")) as cluster:
        cluster[1].create(NAMESPACES, {"apiVersion": "v1", "kind": "Namespace",
                                       "metadata": {"name": "vms"}})
        yield cluster


@pytest.fixture
def kubectl(cluster: tuple[Any, Client, int], tmp_path: Path) -> Run:
    return runner(cluster[0].kubeconfig_path, tmp_path)


def _vm(tmp_path: Path, name: str, **spec: Any) -> str:
    vm = yaml.safe_load(EXAMPLE.read_text(encoding="utf-8"))
    vm["metadata"] = {"name": name, "namespace": "vms"}
    vm["spec"].pop("runStrategy", None)
    vm["spec"].update(spec)
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(vm))
    return str(path)


def test_a_refused_vm_prints_its_cause_and_the_warning(kubectl: Run, tmp_path: Path) -> None:
    proc = kubectl("create", "-f", _vm(tmp_path, "both", running=True, runStrategy="Always"))
    assert proc.returncode != 0
    assert WARNING in proc.stderr  # a warning survives the refusal
    assert "The request is invalid: spec.running: Running and RunStrategy are mutually " \
           "exclusive" in proc.stderr, proc.stderr
    assert kubectl("get", "vm", "both", "-n", "vms").returncode != 0


def test_every_cause_on_its_line(kubectl: Run, tmp_path: Path) -> None:
    proc = kubectl("create", "-f", _vm(tmp_path, "two", runStrategy="Sometimes",
                                       template={"spec": {"domain": {"devices": {
                                           "disks": [{"name": "d"}]}}}}))
    assert proc.returncode != 0
    lines = proc.stderr.splitlines()
    assert lines[0] == "The request is invalid: ", proc.stderr
    assert any(line.startswith("* spec.runStrategy: ") for line in lines), proc.stderr
    assert "* spec.template.spec.domain.devices.disks[0].name: volume 'd' not found" in lines


def test_running_is_accepted_with_the_warning(kubectl: Run, tmp_path: Path) -> None:
    proc = kubectl("create", "-f", _vm(tmp_path, "legacy", running=False))
    assert proc.returncode == 0, proc.stderr
    assert WARNING in proc.stderr
    assert "virtualmachine.kubevirt.io/legacy created" in proc.stdout
    proc = kubectl("create", "-f", _vm(tmp_path, "current", runStrategy="Halted"))
    assert proc.returncode == 0 and "Warning" not in proc.stderr, proc.stderr


V1ALPHA3 = ("Warning: kubevirt.io/v1alpha3 is now deprecated and will be removed in a "
            "future release.")


def _v1alpha3(path: str) -> str:
    vm = yaml.safe_load(Path(path).read_text())
    vm["apiVersion"] = "kubevirt.io/v1alpha3"
    Path(path).write_text(yaml.safe_dump(vm))
    return path


def test_v1alpha3_is_served_deprecated_and_stored_as_v1(
        kubectl: Run, cluster: tuple[Any, Client, int], tmp_path: Path) -> None:
    proc = kubectl("create", "-f", _v1alpha3(_vm(tmp_path, "old-api", runStrategy="Halted")))
    assert proc.returncode == 0, proc.stderr
    assert V1ALPHA3 in proc.stderr
    assert "virtualmachine.kubevirt.io/old-api created" in proc.stdout
    as_v1 = cluster[1].get_or_none(VMS, "old-api", "vms")
    assert as_v1 is not None and as_v1["apiVersion"] == "kubevirt.io/v1"
    proc = kubectl("get", "virtualmachines.v1alpha3.kubevirt.io", "old-api", "-n", "vms",
                   "-o", "jsonpath={.apiVersion} {.spec.runStrategy}")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "kubevirt.io/v1alpha3 Halted"
    assert V1ALPHA3 in proc.stderr


def test_v1alpha3_goes_through_the_webhook(kubectl: Run, tmp_path: Path) -> None:
    proc = kubectl("create", "-f", _v1alpha3(_vm(tmp_path, "old-bad", running=True,
                                                 runStrategy="Always")))
    assert proc.returncode != 0
    assert "spec.running: Running and RunStrategy are mutually exclusive" in proc.stderr
    assert kubectl("get", "vm", "old-bad", "-n", "vms").returncode != 0


@pytest.mark.parametrize(("domain", "cause"), [
    ({"memory": {"hugepages": {"pageSize": "2Mi"}}},
     "spec.template.spec.domain.memory.hugepages: hugepages: this feature is not supported "
     "by rootdisk's VM runtime"),
    ({"devices": {"tpm": {}}},
     "spec.template.spec.domain.devices.tpm: this device is not supported by rootdisk's VM "
     "runtime"),
])
def test_what_the_runtime_cannot_run_is_refused_with_its_cause(
        kubectl: Run, tmp_path: Path, domain: dict[str, Any], cause: str) -> None:
    path = _vm(tmp_path, "cannot", runStrategy="Halted")
    vm = yaml.safe_load(Path(path).read_text())
    for key, value in domain.items():
        vm["spec"]["template"]["spec"]["domain"].setdefault(key, {}).update(value)
    Path(path).write_text(yaml.safe_dump(vm))
    proc = kubectl("create", "-f", path)
    assert proc.returncode != 0
    assert cause in proc.stderr, proc.stderr
