"""The VMI a VirtualMachine starts: its template, named after the VM and owned by it.

Its firmware UUID is stable across the VM's restarts, as upstream's
``setupStableFirmwareUUID``: the template's ``spec.domain.firmware.uuid``, else a SHA-1
name-based UUID of the VM's name (upstream's ``CalculateLegacyUUID``). It is the
domain's SMBIOS UUID and cloud-init's instance-id, so a guest restarted by its VM is the
same instance to cloud-init.
"""

from __future__ import annotations

import copy
import uuid
from collections.abc import Mapping
from typing import Any

from vocab import kubevirt as names

FIRMWARE_UUID_NAMESPACE = uuid.UUID("6a1a24a1-4061-4607-8bf4-a3963d0c5895")


def legacy_uuid(name: str) -> str:
    return str(uuid.uuid5(FIRMWARE_UUID_NAMESPACE, name))


def vmi_from_vm(*, vm: Mapping[str, Any], paused: bool) -> dict[str, Any]:
    meta = vm["metadata"]
    template = (vm.get("spec") or {}).get("template") or {}
    tmeta = template.get("metadata") or {}
    labels = dict(tmeta.get("labels") or {})
    labels[names.LABEL_VM_NAME] = str(meta["name"])
    spec = copy.deepcopy(dict(template.get("spec") or {}))
    if paused:
        spec["startStrategy"] = "Paused"
    domain = spec.setdefault("domain", {})
    if isinstance(domain, dict):
        firmware = domain.get("firmware")
        if not isinstance(firmware, dict):
            firmware = domain["firmware"] = {}
        if not firmware.get("uuid"):
            firmware["uuid"] = legacy_uuid(str(meta["name"]))
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
