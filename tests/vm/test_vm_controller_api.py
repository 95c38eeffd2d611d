"""The VM controller's sync against a real API server (localcluster's): DataVolumes from
templates (clones checked for the VM's ServiceAccount), VMI creation gated on them, run
strategies, crash-loop back-off, status."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import yaml

from kubeclient import Client
from kubeclient.resources import (
    DATASOURCES,
    DATAVOLUMES,
    EVENTS,
    NAMESPACES,
    ROLEBINDINGS,
    ROLES,
    VMIS,
    VMS,
)
from vm.controller.kube import sync_vm

EXAMPLE = Path(__file__).resolve().parents[2] / "manifests" / "examples" / "vm-datavolume.yaml"


@pytest.fixture
def ns(api: Client) -> str:
    name = f"vm-{uuid.uuid4().hex[:8]}"
    api.create(NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    return name


def new_namespace(api: Client) -> str:
    name = f"vm-{uuid.uuid4().hex[:8]}"
    api.create(NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    return name


def make_vm(api: Client, ns: str, **spec: object) -> dict:
    vm = yaml.safe_load(EXAMPLE.read_text(encoding="utf-8"))
    vm["spec"].update(spec)
    return api.create(VMS, vm, ns)


def set_dv_phase(api: Client, ns: str, name: str, phase: str) -> None:
    api.patch(DATAVOLUMES, name, {"status": {"phase": phase}}, ns, subresource="status")


def set_vmi_phase(api: Client, ns: str, name: str, phase: str, *, ran: bool = False) -> None:
    stamps = [{"phase": "Running", "phaseTransitionTimestamp": "2026-01-01T00:00:00Z"}] if ran \
        else []
    api.patch(VMIS, name, {"status": {"phase": phase, "phaseTransitionTimestamps": stamps}}, ns,
              subresource="status")


def status(api: Client, ns: str) -> dict:
    return (api.get_or_none(VMS, "demo", ns) or {}).get("status") or {}


def test_datavolume_first_then_vmi(api: Client, ns: str) -> None:
    vm = make_vm(api, ns)
    sync_vm(api, ns, "demo")
    dv = api.get_or_none(DATAVOLUMES, "demo-rootdisk", ns)
    assert dv is not None
    assert dv["metadata"]["labels"]["kubevirt.io/created-by"] == vm["metadata"]["uid"]
    assert dv["metadata"]["annotations"]["cdi.kubevirt.io/allowClaimAdoption"] == "true"
    assert dv["metadata"]["ownerReferences"][0]["uid"] == vm["metadata"]["uid"]
    assert api.get_or_none(VMIS, "demo", ns) is None
    st = status(api, ns)
    assert st["printableStatus"] == "Provisioning" and st["created"] is False
    reasons = [e["reason"] for e in api.list(EVENTS, ns)]
    assert "SuccessfulDataVolumeCreate" in reasons

    set_dv_phase(api, ns, "demo-rootdisk", "ImportInProgress")
    sync_vm(api, ns, "demo")
    assert api.get_or_none(VMIS, "demo", ns) is None

    set_dv_phase(api, ns, "demo-rootdisk", "Succeeded")
    sync_vm(api, ns, "demo")
    vmi = api.get_or_none(VMIS, "demo", ns)
    assert vmi is not None
    assert vmi["metadata"]["ownerReferences"][0]["uid"] == vm["metadata"]["uid"]
    assert vmi["spec"]["volumes"][0]["dataVolume"]["name"] == "demo-rootdisk"
    sync_vm(api, ns, "demo")
    assert status(api, ns)["printableStatus"] == "Starting"

    set_vmi_phase(api, ns, "demo", "Running", ran=True)
    api.patch(VMIS, "demo", {"status": {"conditions": [{"type": "Ready", "status": "True"}]}},
              ns, subresource="status")
    sync_vm(api, ns, "demo")
    st = status(api, ns)
    assert (st["printableStatus"], st["ready"], st["created"]) == ("Running", True, True)


def test_failed_import_shows_datavolume_error(api: Client, ns: str) -> None:
    make_vm(api, ns)
    sync_vm(api, ns, "demo")
    set_dv_phase(api, ns, "demo-rootdisk", "Failed")
    sync_vm(api, ns, "demo")
    assert status(api, ns)["printableStatus"] == "DataVolumeError"
    assert api.get_or_none(VMIS, "demo", ns) is None


def test_halted_vm_gets_its_datavolume_but_no_vmi(api: Client, ns: str) -> None:
    make_vm(api, ns, runStrategy="Halted")
    sync_vm(api, ns, "demo")
    set_dv_phase(api, ns, "demo-rootdisk", "Succeeded")
    sync_vm(api, ns, "demo")
    assert api.get_or_none(DATAVOLUMES, "demo-rootdisk", ns) is not None
    assert api.get_or_none(VMIS, "demo", ns) is None
    assert status(api, ns)["printableStatus"] == "Stopped"


def test_always_crash_loop_backs_off_then_starts(api: Client, ns: str) -> None:
    make_vm(api, ns)
    sync_vm(api, ns, "demo")
    set_dv_phase(api, ns, "demo-rootdisk", "Succeeded")
    now = datetime.now(UTC).replace(microsecond=0)
    sync_vm(api, ns, "demo", now=now)
    first = api.get_or_none(VMIS, "demo", ns)
    set_vmi_phase(api, ns, "demo", "Failed")  # never ran
    sync_vm(api, ns, "demo", now=now, jitter=0.0)
    # deleted (no finalizer without the VMI controller)
    assert api.get_or_none(VMIS, "demo", ns) is None
    again = sync_vm(api, ns, "demo", now=now + timedelta(seconds=1), jitter=0.0)
    st = status(api, ns)
    assert st["printableStatus"] == "CrashLoopBackOff"
    assert st["startFailure"]["consecutiveFailCount"] == 1
    assert again == pytest.approx(9.0)
    assert api.get_or_none(VMIS, "demo", ns) is None
    sync_vm(api, ns, "demo", now=now + timedelta(seconds=10), jitter=0.0)
    second = api.get_or_none(VMIS, "demo", ns)
    assert second is not None and second["metadata"]["uid"] != first["metadata"]["uid"]


def test_halting_deletes_the_vmi_and_invalid_strategy_is_a_failure(api: Client, ns: str) -> None:
    make_vm(api, ns)
    sync_vm(api, ns, "demo")
    set_dv_phase(api, ns, "demo-rootdisk", "Succeeded")
    sync_vm(api, ns, "demo")
    assert api.get_or_none(VMIS, "demo", ns) is not None
    api.patch(VMS, "demo", {"spec": {"runStrategy": "Halted"}}, ns)
    sync_vm(api, ns, "demo")
    assert api.get_or_none(VMIS, "demo", ns) is None
    sync_vm(api, ns, "demo")
    assert status(api, ns)["printableStatus"] == "Stopped"
    api.patch(VMS, "demo", {"spec": {"runStrategy": "Sometimes"}}, ns)
    sync_vm(api, ns, "demo")
    failure = [c for c in status(api, ns)["conditions"] if c["type"] == "Failure"]
    assert failure and "spec.runStrategy" in failure[0]["message"]


def test_manual_start_request(api: Client, ns: str) -> None:
    make_vm(api, ns, runStrategy="Manual")
    sync_vm(api, ns, "demo")
    set_dv_phase(api, ns, "demo-rootdisk", "Succeeded")
    sync_vm(api, ns, "demo")
    assert api.get_or_none(VMIS, "demo", ns) is None
    api.patch(VMS, "demo", {"status": {"stateChangeRequests": [{"action": "Start"}]}}, ns,
              subresource="status")
    sync_vm(api, ns, "demo")
    assert api.get_or_none(VMIS, "demo", ns) is not None
    assert "stateChangeRequests" not in status(api, ns)


# -- clones: the VM's ServiceAccount must be allowed to read the source's namespace ------


def clone_vm(api: Client, ns: str, source: dict, *, volumes: list | None = None) -> dict:
    vm = yaml.safe_load(EXAMPLE.read_text(encoding="utf-8"))
    vm["spec"]["runStrategy"] = "Halted"
    vm["spec"]["dataVolumeTemplates"][0]["spec"].pop("source")
    vm["spec"]["dataVolumeTemplates"][0]["spec"].update(source)
    if volumes:
        vm["spec"]["template"]["spec"]["volumes"] += volumes
    return api.create(VMS, vm, ns)


def data_source(api: Client, ns: str, name: str, pvc: dict) -> None:
    api.create(DATASOURCES, {"apiVersion": "cdi.kubevirt.io/v1beta1", "kind": "DataSource",
                             "metadata": {"name": name}, "spec": {"source": {"pvc": pvc}}}, ns)


def grant_clone(api: Client, ns: str, sa_namespace: str, sa: str) -> None:
    """``create datavolumes/source`` in ``ns`` for a ServiceAccount of another namespace."""
    role = f"cloner-{sa_namespace}-{sa}"
    api.create(ROLES, {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
                       "metadata": {"name": role},
                       "rules": [{"apiGroups": ["cdi.kubevirt.io"],
                                  "resources": ["datavolumes/source"], "verbs": ["create"]}]},
               ns)
    api.create(ROLEBINDINGS, {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
        "metadata": {"name": role},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": role},
        "subjects": [{"kind": "ServiceAccount", "name": sa, "namespace": sa_namespace}]}, ns)


def warnings(api: Client, ns: str) -> list[tuple[str, str]]:
    return [(e["reason"], e["message"]) for e in api.list(EVENTS, ns) if e["type"] == "Warning"]


@pytest.mark.parametrize("via", ["pvc", "dataSource"])
def test_a_clone_from_another_namespace_needs_the_vms_service_account(
        api: Client, ns: str, via: str) -> None:
    """The attack: the controller creates DataVolumes as itself, and may read any
    namespace; a VM whose template clones another namespace's claim (directly, or
    through a DataSource of the VM's namespace) gets no DataVolume unless the VM's
    ServiceAccount may clone from there, with upstream's Event and message."""
    victim = new_namespace(api)
    if via == "pvc":
        source = {"source": {"pvc": {"namespace": victim, "name": "secret-disk"}}}
    else:
        data_source(api, ns, "golden", {"namespace": victim, "name": "secret-disk"})
        source = {"sourceRef": {"kind": "DataSource", "name": "golden"}}
    clone_vm(api, ns, source)
    sync_vm(api, ns, "demo")
    assert api.get_or_none(DATAVOLUMES, "demo-rootdisk", ns) is None
    message = (f"Not authorized to create DataVolume demo-rootdisk: User"
               f" system:serviceaccount:{ns}:default has insufficient permissions in clone"
               f" source namespace {victim}")
    assert ("UnauthorizedDataVolumeCreate", message) in warnings(api, ns)
    assert message in str(status(api, ns))

    grant_clone(api, victim, ns, "default")
    sync_vm(api, ns, "demo")
    dv = api.get_or_none(DATAVOLUMES, "demo-rootdisk", ns)
    assert dv is not None
    # the DataVolume names the claim that was checked, not the DataSource
    assert dv["spec"]["source"] == {"pvc": {"namespace": victim, "name": "secret-disk"}}
    assert "sourceRef" not in dv["spec"]


def test_the_service_account_is_the_one_a_serviceaccount_volume_names(api: Client,
                                                                       ns: str) -> None:
    victim = new_namespace(api)
    grant_clone(api, victim, ns, "default")  # not the one the VM runs as
    clone_vm(api, ns, {"source": {"pvc": {"namespace": victim, "name": "secret-disk"}}},
             volumes=[{"name": "sa", "serviceAccount": {"serviceAccountName": "builder"}}])
    sync_vm(api, ns, "demo")
    assert api.get_or_none(DATAVOLUMES, "demo-rootdisk", ns) is None
    assert any(f"system:serviceaccount:{ns}:builder has insufficient" in m
               for _, m in warnings(api, ns))
    grant_clone(api, victim, ns, "builder")
    sync_vm(api, ns, "demo")
    assert api.get_or_none(DATAVOLUMES, "demo-rootdisk", ns) is not None


def test_a_clone_in_the_vms_own_namespace_needs_no_grant_and_is_resolved(api: Client,
                                                                         ns: str) -> None:
    data_source(api, ns, "golden", {"namespace": ns, "name": "golden-disk"})
    clone_vm(api, ns, {"sourceRef": {"kind": "DataSource", "name": "golden"}})
    sync_vm(api, ns, "demo")
    dv = api.get_or_none(DATAVOLUMES, "demo-rootdisk", ns)
    assert dv is not None
    assert dv["spec"]["source"] == {"pvc": {"namespace": ns, "name": "golden-disk"}}


def test_a_missing_data_source_makes_no_datavolume(api: Client, ns: str) -> None:
    clone_vm(api, ns, {"sourceRef": {"kind": "DataSource", "name": "nowhere"}})
    sync_vm(api, ns, "demo")
    assert api.get_or_none(DATAVOLUMES, "demo-rootdisk", ns) is None
    assert ("FailedDataVolumeCreate", f"Error creating DataVolume demo-rootdisk: DataSource"
            f" {ns}/nowhere not found") in warnings(api, ns)
    data_source(api, ns, "nowhere", {"namespace": ns, "name": "golden-disk"})
    sync_vm(api, ns, "demo")
    assert api.get_or_none(DATAVOLUMES, "demo-rootdisk", ns) is not None


def grant(api: Client, ns: str, sa_namespace: str, sa: str, resource: str) -> None:
    """``create <resource>`` (core group) in ``ns`` for a ServiceAccount of another
    namespace."""
    role = f"{resource}-{sa_namespace}-{sa}"
    api.create(ROLES, {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
                       "metadata": {"name": role},
                       "rules": [{"apiGroups": [""], "resources": [resource],
                                  "verbs": ["create"]}]}, ns)
    api.create(ROLEBINDINGS, {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
        "metadata": {"name": role},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": role},
        "subjects": [{"kind": "ServiceAccount", "name": sa, "namespace": sa_namespace}]}, ns)


def test_a_data_source_naming_a_snapshot_of_another_namespace(api: Client, ns: str) -> None:
    """A template's sourceRef to a DataSource naming a VolumeSnapshot: the DataVolume
    gets ``source.snapshot``, once the VM's ServiceAccount may clone a snapshot there by
    upstream's rule (``create pods`` and ``create pvcs``; ``pods`` alone, enough for a
    claim, is not)."""
    victim = new_namespace(api)
    api.create(DATASOURCES, {"apiVersion": "cdi.kubevirt.io/v1beta1", "kind": "DataSource",
                             "metadata": {"name": "golden"},
                             "spec": {"source": {"snapshot": {"namespace": victim,
                                                              "name": "gold-snap"}}}}, ns)
    clone_vm(api, ns, {"sourceRef": {"kind": "DataSource", "name": "golden"}})
    grant(api, victim, ns, "default", "pods")
    sync_vm(api, ns, "demo")
    assert api.get_or_none(DATAVOLUMES, "demo-rootdisk", ns) is None
    assert ("UnauthorizedDataVolumeCreate",
            f"Not authorized to create DataVolume demo-rootdisk: User"
            f" system:serviceaccount:{ns}:default has insufficient permissions in clone"
            f" source namespace {victim}") in warnings(api, ns)
    grant(api, victim, ns, "default", "pvcs")
    sync_vm(api, ns, "demo")
    dv = api.get_or_none(DATAVOLUMES, "demo-rootdisk", ns)
    assert dv is not None
    assert dv["spec"]["source"] == {"snapshot": {"namespace": victim, "name": "gold-snap"}}
    assert "sourceRef" not in dv["spec"]
