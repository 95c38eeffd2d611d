"""The VM controller's I/O: read a VM and what it owns, apply the plan, write status.

One call of :func:`sync_vm` is one level-triggered sync. Writes are guarded by
resourceVersion (a conflict means someone else moved first: the caller syncs again)
and by uid preconditions on deletes, so concurrent syncs cannot double-act.
"""

from __future__ import annotations

import logging
import random
from datetime import UTC, datetime
from typing import Any

from cdi import authorize, clone
from kubeclient import Client, KubeError
from kubeclient.resources import (
    DAEMONSETS,
    DATASOURCES,
    DATAVOLUMES,
    DEPLOYMENTS,
    KUBEVIRTS,
    VMIS,
    VMS,
)
from vm.controller import datavolumes, kubevirt_status
from vm.controller.backoff import StartFailure
from vm.controller.instance import vmi_from_vm
from vm.controller.runstrategy import (
    InvalidRunStrategy,
    Plan,
    RunStrategy,
    VMState,
    decide,
    requests_of,
    run_strategy,
)
from vm.controller.status import StatusInput, vm_status
from vm.controller.views import VMIView, dv_view, vmi_view
from vocab import kubevirt as names

logger = logging.getLogger(__name__)
COMPONENT = "virtualmachine-controller"


def _stamp(now: datetime) -> str:
    return now.strftime("%Y-%m-%dT%H:%M:%SZ")


def sync_vm(kube: Client, namespace: str, name: str, *, now: datetime | None = None,
            jitter: float | None = None) -> float | None:
    """Sync one VM; returns seconds after which to sync again, or None."""
    now = now or datetime.now(UTC)
    stamp = _stamp(now)
    vm = kube.get_or_none(VMS, name, namespace)
    if vm is None:
        return None
    meta = vm["metadata"]
    status = vm.get("status") or {}
    failure = ""
    strategy: RunStrategy | None
    try:
        strategy = run_strategy(vm.get("spec") or {})
    except InvalidRunStrategy as err:
        strategy, failure = None, str(err)

    existing = {n: dv_view(n, kube.get_or_none(DATAVOLUMES, n, namespace), vm_uid=meta["uid"])
                for n in datavolumes.template_names(vm)}
    if datavolumes.wants_immediate_creation(vm) or strategy not in (None, RunStrategy.HALTED):
        for template_dv in datavolumes.missing_datavolumes(vm=vm, existing=existing):
            dv_name = template_dv["metadata"]["name"]
            try:
                dv, refused = _clone_checked(kube, vm, template_dv)
            except KubeError as err:
                dv, refused = None, ("FailedDataVolumeCreate",
                                     f"Error creating DataVolume {dv_name}: {err.message}")
            if dv is None:
                reason, message = refused
                failure = failure or message
                kube.event(vm, type_="Warning", reason=reason, message=message,
                           component=COMPONENT, now=stamp)
                continue
            try:
                created = kube.create(DATAVOLUMES, dv, namespace)
                existing[dv_name] = dv_view(dv_name, created, vm_uid=meta["uid"])
                kube.event(vm, type_="Normal", reason="SuccessfulDataVolumeCreate",
                           message=f"Created DataVolume {dv_name}", component=COMPONENT,
                           now=stamp)
            except KubeError as err:
                if err.status != 409:
                    failure = failure or f"DataVolume {dv_name}: {err.message}"
                    kube.event(vm, type_="Warning", reason="FailedDataVolumeCreate",
                               message=f"Error creating DataVolume {dv_name}: {err.message}",
                               component=COMPONENT, now=stamp)
    dvs = tuple(existing.values())

    raw_vmi = kube.get_or_none(VMIS, name, namespace)
    vmi: VMIView | None = vmi_view(raw_vmi) if raw_vmi is not None else None
    plan: Plan | None = None
    if strategy is not None:
        plan = decide(
            vm=VMState(strategy=strategy, last_strategy=str(status.get("runStrategy") or ""),
                       deleting=bool(meta.get("deletionTimestamp")),
                       requests=requests_of(status),
                       start_failure=StartFailure.from_status(status.get("startFailure"))),
            vmi=vmi, dvs_ready=datavolumes.all_ready(dvs), now=now,
            jitter=random.random() if jitter is None else jitter)  # noqa: S311 (back-off jitter)
        vmi, err_text = _apply(kube, vm, plan, vmi, raw_vmi, stamp)
        failure = failure or err_text

    new_status = vm_status(
        StatusInput(deleting=bool(meta.get("deletionTimestamp")), strategy=strategy, vmi=vmi,
                    dvs=dvs, plan=plan, failure=failure),
        old=status, now=stamp)
    if new_status != status:
        body = dict(vm)
        body["status"] = new_status
        try:
            kube.replace_status(VMS, body)
        except KubeError as err:
            if err.status in (404, 409):
                return 0.5
            raise
    return plan.requeue_after if plan else None


def _clone_checked(kube: Client, vm: dict[str, Any], dv: dict[str, Any]
                   ) -> tuple[dict[str, Any] | None, tuple[str, str]]:
    """The DataVolume to create for a template, its clone source resolved and authorized
    for the VM's ServiceAccount; else None and the Event's (reason, message)."""
    name, namespace = dv["metadata"]["name"], vm["metadata"]["namespace"]
    found = clone.resolve_source(dv, lambda ns, n: kube.get_or_none(DATASOURCES, n, ns))
    if found is None:
        return dv, ("", "")
    if isinstance(found, tuple):
        return None, ("FailedDataVolumeCreate",
                      f"Error creating DataVolume {name}: {found[1]}")
    if found.namespace != namespace:
        who = authorize.service_account(namespace, datavolumes.service_account_name(vm))
        if not authorize.allowed(
                ask=kube.allowed,
                who=who, namespace=found.namespace, name=found.name,
                snapshot=found.kind == clone.SNAPSHOT):
            return None, ("UnauthorizedDataVolumeCreate",
                          f"Not authorized to create DataVolume {name}: "
                          + authorize.denied_message(who=who, namespace=found.namespace))
    return datavolumes.with_source(dv, found), ("", "")


def _apply(kube: Client, vm: dict[str, Any], plan: Plan, vmi: VMIView | None,
           raw_vmi: dict[str, Any] | None, stamp: str) -> tuple[VMIView | None, str]:
    ns, name = vm["metadata"]["namespace"], vm["metadata"]["name"]
    if plan.action == "create":
        try:
            created = kube.create(VMIS, vmi_from_vm(vm=vm, paused=plan.paused), ns)
        except KubeError as err:
            if err.status == 409:
                return vmi, ""
            kube.event(vm, type_="Warning", reason="FailedCreate",
                       message=f"Error creating VMI {name}: {err.message}",
                       component=COMPONENT, now=stamp)
            return vmi, f"Failure creating VMI: {err.message}"
        kube.event(vm, type_="Normal", reason="SuccessfulCreate",
                   message=f"Started the virtual machine by creating the new virtual "
                           f"machine instance {name}", component=COMPONENT, now=stamp)
        return vmi_view(created), ""
    if plan.action == "delete" and vmi is not None and raw_vmi is not None:
        kube.delete(VMIS, name, ns, uid=vmi.uid)
        kube.event(vm, type_="Normal", reason="SuccessfulDelete",
                   message=f"Stopped the virtual machine by deleting the virtual machine "
                           f"instance {vmi.uid}", component=COMPONENT, now=stamp)
        return VMIView(uid=vmi.uid, phase=vmi.phase, deleting=True,
                       ever_running=vmi.ever_running, conditions=vmi.conditions), ""
    return vmi, ""


def owner_vm(obj: dict[str, Any]) -> str | None:
    """The name of the VM that controls ``obj`` (a VMI or DataVolume), if any."""
    for ref in (obj.get("metadata") or {}).get("ownerReferences") or []:
        if ref.get("kind") == names.VM_KIND and ref.get("controller"):
            return str(ref.get("name"))
    return None




def sync_kubevirt(kube: Client, kv: dict[str, Any], all_kvs: list[dict[str, Any]], *,
                  version: str, now: datetime | None = None) -> None:
    """Write the KubeVirt object's upstream status (``vm.controller.kubevirt_status``)
    from its namespace's components, when it changed."""
    meta = kv["metadata"]
    ns = meta["namespace"]
    components = [kubevirt_status.Component("Deployment", n, kube.get_or_none(DEPLOYMENTS, n, ns))
                  for n in kubevirt_status.DEPLOYMENTS]
    components += [kubevirt_status.Component("DaemonSet", n, kube.get_or_none(DAEMONSETS, n, ns))
                   for n in kubevirt_status.DAEMONSETS]
    status = kubevirt_status.desired_status(
        kv, components, in_charge_=kubevirt_status.in_charge(kv, all_kvs), version=version,
        now=_stamp(now or datetime.now(UTC)))
    if status == (kv.get("status") or {}):
        return
    body = dict(kv)
    body["status"] = status
    try:
        kube.replace_status(KUBEVIRTS, body)
    except KubeError as err:
        if err.status not in (404, 409):  # gone, or changed: the next pass writes it
            raise
