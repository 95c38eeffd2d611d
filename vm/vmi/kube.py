"""The VMI controller's I/O: launcher pods, claims, the VMI's status and finalizer.

The VMI carries the ``kubevirt.io/virtualMachineControllerFinalize`` finalizer: when a
VMI is deleted, its launcher pod is deleted with the VMI's grace period (+30 s, as the
pod was rendered), the launcher shuts the guest down (ACPI, then kill), and only then
does the VMI go away, so a VM shows Stopping meanwhile.
"""

from __future__ import annotations

import logging
import os
from datetime import UTC, datetime
from typing import Any

from kubeclient import Client, KubeError
from kubeclient.resources import DATAVOLUMES, KUBEVIRTS, NODES, PODS, PVCS, VMIS
from vm import nodeports
from vm.controller.status import merge_conditions
from vm.controller.views import Condition, conditions_of
from vm.vmi import lifecycle
from vm.vmi.claims import ClaimView, disk_claims, readiness
from vm.vmi.config import launcher_config
from vm.vmi.overhead import ResourceError
from vm.vmi.pod import GRACE_EXTRA, binding_pod, grace_seconds, launcher_pod
from vocab import kubevirt as names

logger = logging.getLogger(__name__)
FINALIZER = "kubevirt.io/virtualMachineControllerFinalize"
COMPONENT = "virtualmachineinstance-controller"
OWNED_CONDITIONS = frozenset({"Ready", "PodScheduled", "Synchronized", "Provisioning"})
LAUNCHER_IMAGE = os.environ.get("LAUNCHER_IMAGE", names.LAUNCHER_IMAGE)


def _claim_views(kube: Client, namespace: str, claims: list[Any]) -> dict[str, ClaimView]:
    views = {}
    for c in claims:
        pvc = kube.get_or_none(PVCS, c.claim, namespace)
        dv = kube.get_or_none(DATAVOLUMES, c.claim, namespace) if c.from_dv else None
        dv_phase = str((dv.get("status") or {}).get("phase") or "Pending") if dv else None
        if pvc is None:
            views[c.claim] = ClaimView(exists=False, dv_phase=dv_phase)
        else:
            views[c.claim] = ClaimView(
                exists=True, phase=str((pvc.get("status") or {}).get("phase") or ""),
                volume_mode=str((pvc.get("spec") or {}).get("volumeMode") or "Filesystem"),
                dv_phase=dv_phase)
    return views


def _pods(kube: Client, vmi: dict[str, Any]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    meta = vmi["metadata"]
    pods = kube.list(PODS, meta["namespace"],
                     labelSelector=f"{names.LABEL_CREATED_BY}={meta['uid']}")
    launchers: list[dict[str, Any]] = []
    binders: list[dict[str, Any]] = []
    for p in pods:
        ann = (p.get("metadata") or {}).get("annotations") or {}
        (binders if ann.get(names.ANN_EPHEMERAL_PROVISIONING) == "true" else launchers).append(p)
    return launchers, binders


def _set_finalizers(kube: Client, vmi: dict[str, Any], finalizers: list[str]) -> None:
    meta = vmi["metadata"]
    kube.patch(VMIS, meta["name"], {"metadata": {
        "finalizers": finalizers, "resourceVersion": meta["resourceVersion"]}},
        meta["namespace"])


def sync_vmi(kube: Client, namespace: str, name: str) -> float | None:
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    vmi = kube.get_or_none(VMIS, name, namespace)
    if vmi is None:
        return None
    meta = vmi["metadata"]
    finalizers = list(meta.get("finalizers") or [])
    launchers, binders = _pods(kube, vmi)
    if meta.get("deletionTimestamp"):
        grace = grace_seconds(vmi.get("spec") or {}) + GRACE_EXTRA
        for p in launchers + binders:
            if not (p.get("metadata") or {}).get("deletionTimestamp"):
                kube.delete(PODS, p["metadata"]["name"], namespace, grace_period=grace,
                            uid=p["metadata"].get("uid"))
        if launchers or binders:
            _write_status(kube, vmi, _outcome(vmi, launchers, binders, None), now)
            return 1.0
        if FINALIZER in finalizers:
            _set_finalizers(kube, vmi, [f for f in finalizers if f != FINALIZER])
        return None
    if FINALIZER not in finalizers:
        try:
            _set_finalizers(kube, vmi, [*finalizers, FINALIZER])
        except KubeError as err:
            if err.status == 409:
                return 0.2
            raise
        return 0.0

    spec = vmi.get("spec") or {}
    claims = disk_claims(spec)
    views = _claim_views(kube, namespace, claims)
    volumes = readiness(claims=claims, views=views, namespace=namespace)
    out = _outcome(vmi, launchers, binders, volumes)
    if out.action == "create-launcher":
        conf = launcher_config(kubevirts=kube.list(KUBEVIRTS), nodes=kube.list(NODES),
                               image=LAUNCHER_IMAGE,
                               unprivileged_start=nodeports.unprivileged_port_start())
        try:
            pod = launcher_pod(vmi=vmi, claims=claims, views=views, config=conf)
            kube.create(PODS, pod, namespace)
        except (ResourceError, KubeError) as err:
            text = err.message if isinstance(err, KubeError) else str(err)
            out = lifecycle.Outcome(phase=out.phase, conditions=(Condition(
                "Synchronized", "False", "FailedCreate", text),),
                event=("Warning", "FailedCreate", f"Error creating pod: {text}"))
    elif out.action == "create-binding":
        kube.create(PODS, binding_pod(vmi=vmi, claims=claims, image=LAUNCHER_IMAGE), namespace)
    elif out.action == "delete-binding":
        for p in binders:
            kube.delete(PODS, p["metadata"]["name"], namespace, uid=p["metadata"].get("uid"))
    if out.event is not None:
        type_, reason, message = out.event
        kube.event(vmi, type_=type_, reason=reason, message=message, component=COMPONENT,
                   now=now)
    return _write_status(kube, vmi, out, now)


def _outcome(vmi: dict[str, Any], launchers: list[dict[str, Any]],
             binders: list[dict[str, Any]], volumes: Any) -> lifecycle.Outcome:
    phase = str((vmi.get("status") or {}).get("phase") or "")
    launcher = lifecycle.pod_view(launchers[0]) if launchers else None
    binding = lifecycle.pod_view(binders[0]) if binders else None
    if volumes is None:  # deleting: only follow the pod
        if launcher is None:
            return lifecycle.Outcome(phase=phase or "Pending")
        return lifecycle.decide(phase=phase, launcher=launcher, binding=binding,
                                volumes=readiness(claims=[], views={}, namespace=""))
    return lifecycle.decide(phase=phase, launcher=launcher, binding=binding, volumes=volumes)


def _launcher_ip(vmi: dict[str, Any], out: lifecycle.Outcome) -> str | None:
    """The pod IP for ``status.interfaces`` while the VMI is Scheduled or Running."""
    ip = out.ip
    if not ip or out.phase not in ("Scheduled", "Running"):
        return None
    return ip


def _write_status(kube: Client, vmi: dict[str, Any], out: lifecycle.Outcome,
                  now: str) -> float | None:
    old = vmi.get("status") or {}
    status = dict(old)
    phase = lifecycle.advance(str(old.get("phase") or ""), out.phase)
    status["phase"] = phase
    if phase != old.get("phase"):
        stamps = list(old.get("phaseTransitionTimestamps") or [])
        stamps.append({"phase": phase, "phaseTransitionTimestamp": now})
        status["phaseTransitionTimestamps"] = stamps
        if out.reason:
            status["reason"] = out.reason
    if out.node:
        status["nodeName"] = out.node
    launcher = _launcher_ip(vmi, out)
    if launcher is not None:
        status["interfaces"] = lifecycle.keep_handler_fields(
            lifecycle.interfaces(vmi.get("spec") or {}, launcher), old.get("interfaces") or [])
    kept = [c for c in conditions_of(vmi) if c.type not in OWNED_CONDITIONS]
    new = [*kept, *out.conditions]
    status["conditions"] = merge_conditions(new=new, old=old.get("conditions") or [], now=now)
    labels = (vmi["metadata"].get("labels") or {})
    if out.node and labels.get(names.LABEL_NODE_NAME) != out.node:
        try:
            vmi = kube.patch(VMIS, vmi["metadata"]["name"], {"metadata": {
                "labels": {names.LABEL_NODE_NAME: out.node},
                "resourceVersion": vmi["metadata"]["resourceVersion"]}},
                vmi["metadata"]["namespace"])
        except KubeError as err:
            if err.status in (404, 409):
                return 0.2
            raise
    if status == old:
        return None
    body = dict(vmi)
    body["status"] = status
    try:
        kube.replace_status(VMIS, body)
    except KubeError as err:
        if err.status in (404, 409):
            return 0.2
        raise
    return None
