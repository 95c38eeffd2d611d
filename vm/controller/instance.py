"""The VMI a VirtualMachine starts: its template, named after the VM and owned by it."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from vm.api import names


def vmi_from_vm(*, vm: Mapping[str, Any], paused: bool) -> dict[str, Any]:
    meta = vm["metadata"]
    template = (vm.get("spec") or {}).get("template") or {}
    tmeta = template.get("metadata") or {}
    labels = dict(tmeta.get("labels") or {})
    labels[names.LABEL_VM_NAME] = str(meta["name"])
    spec = copy.deepcopy(dict(template.get("spec") or {}))
    if paused:
        spec["startStrategy"] = "Paused"
    out_meta: dict[str, Any] = {
        "name": meta["name"],
        "namespace": meta["namespace"],
        "labels": labels,
        "ownerReferences": [{
            "apiVersion": names.API_VERSION, "kind": names.VM_KIND, "name": meta["name"],
            "uid": meta["uid"], "controller": True, "blockOwnerDeletion": True,
        }],
    }
    if tmeta.get("annotations"):
        out_meta["annotations"] = dict(tmeta["annotations"])
    return {"apiVersion": names.API_VERSION, "kind": names.VMI_KIND, "metadata": out_meta,
            "spec": spec}
