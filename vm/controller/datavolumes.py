"""dataVolumeTemplates → the DataVolumes a VM owns, and whether they are ready.

As upstream's ``GenerateDataVolumeFromTemplate``: the DataVolume is named by the
template, lives in the VM's namespace, is controlled by the VM, carries
``kubevirt.io/created-by=<vm uid>`` and ``cdi.kubevirt.io/allowClaimAdoption=true`` (a
leftover PVC of the same name is adopted, not imported again) and inherits the VM
template's priorityClassName. DataVolumes are made even for a Halted VM unless the VM
says ``kubevirt.io/immediate-data-volume-creation: "false"``.

A clone (``source.pvc``, or ``sourceRef`` to a DataSource) is created with its source
resolved to the claim, as upstream: the controller creates every DataVolume under its own
identity, which may read any namespace, so before it does, the VM's ServiceAccount (the
template's ``serviceAccountName``, else a ``serviceAccount`` volume's, else ``default``)
must be allowed to clone from another namespace (upstream's ``AuthorizeSA``, the checks of
:mod:`cdi.authorize`); the DataVolume then names the claim that was checked, not a
DataSource that could be pointed elsewhere in between.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from typing import Any

from cdi.clone import SourceRef
from vm.controller.views import DVView
from vocab import cdi as api
from vocab import kubevirt as names

READY_PHASES = frozenset({"Succeeded", "WaitForFirstConsumer", "PendingPopulation"})
ERROR_REASONS = frozenset({"Error", "ImagePullFailed"})


def template_names(vm: Mapping[str, Any]) -> list[str]:
    out = []
    for t in (vm.get("spec") or {}).get("dataVolumeTemplates") or []:
        name = ((t or {}).get("metadata") or {}).get("name")
        if name:
            out.append(str(name))
    return out


def wants_immediate_creation(vm: Mapping[str, Any]) -> bool:
    ann = (vm.get("metadata") or {}).get("annotations") or {}
    return ann.get(names.ANN_IMMEDIATE_DV_CREATION) != "false"


def service_account_name(vm: Mapping[str, Any]) -> str:
    """The ServiceAccount a VM's clones are authorized as."""
    spec = (((vm.get("spec") or {}).get("template") or {}).get("spec") or {})
    if spec.get("serviceAccountName"):
        return str(spec["serviceAccountName"])
    for volume in spec.get("volumes") or []:
        name = ((volume or {}).get("serviceAccount") or {}).get("serviceAccountName")
        if name:
            return str(name)
    return "default"


def with_source(dv: Mapping[str, Any], claim: SourceRef) -> dict[str, Any]:
    """The DataVolume with its clone source resolved to ``claim`` (no ``sourceRef``): a
    ``pvc`` source, or a ``snapshot`` one when the DataSource names a VolumeSnapshot."""
    out = copy.deepcopy(dict(dv))
    spec = out["spec"]
    spec.pop("sourceRef", None)
    spec["source"] = {claim.kind: {"namespace": claim.namespace, "name": claim.name}}
    return out


def datavolume_from_template(*, vm: Mapping[str, Any], template: Mapping[str, Any]
                             ) -> dict[str, Any]:
    meta = vm["metadata"]
    tmeta = copy.deepcopy(dict(template.get("metadata") or {}))
    labels = dict(tmeta.get("labels") or {})
    labels[names.LABEL_CREATED_BY] = str(meta["uid"])
    annotations = dict(tmeta.get("annotations") or {})
    annotations[api.ALLOW_CLAIM_ADOPTION] = "true"
    spec = copy.deepcopy(dict(template.get("spec") or {}))
    priority = (((vm.get("spec") or {}).get("template") or {}).get("spec") or {}).get(
        "priorityClassName")
    if priority and not spec.get("priorityClassName"):
        spec["priorityClassName"] = priority
    out_meta: dict[str, Any] = {
        "name": tmeta["name"],
        "namespace": meta["namespace"],
        "labels": labels,
        "annotations": annotations,
        "ownerReferences": [{
            "apiVersion": names.API_VERSION, "kind": names.VM_KIND,
            "name": meta["name"], "uid": meta["uid"],
            "controller": True, "blockOwnerDeletion": True,
        }],
    }
    return {"apiVersion": api.API_VERSION, "kind": api.DV_KIND,
            "metadata": out_meta, "spec": spec}


def missing_datavolumes(*, vm: Mapping[str, Any], existing: Mapping[str, DVView]
                        ) -> list[dict[str, Any]]:
    """The DataVolumes to create now (none for a VM being deleted)."""
    if (vm.get("metadata") or {}).get("deletionTimestamp"):
        return []
    out = []
    for t in (vm.get("spec") or {}).get("dataVolumeTemplates") or []:
        name = ((t or {}).get("metadata") or {}).get("name")
        view = existing.get(str(name)) if name else None
        if name and (view is None or not view.exists):
            out.append(datavolume_from_template(vm=vm, template=t))
    return out


def all_ready(dvs: Sequence[DVView]) -> bool:
    return all(dv.exists and dv.phase in READY_PHASES for dv in dvs)


def has_errors(dvs: Sequence[DVView]) -> bool:
    """Upstream's ``HasDataVolumeErrors``: Failed, or Running=False for Error/ImagePullFailed."""
    return any(dv.exists and (dv.phase == "Failed" or dv.running_reason in ERROR_REASONS)
               for dv in dvs)


def waiting_for_binding(dvs: Sequence[DVView]) -> bool:
    return any(dv.exists and dv.phase in {"WaitForFirstConsumer", "PendingPopulation"}
               for dv in dvs)
