"""The VirtualMachine, VirtualMachineInstance and KubeVirt CRDs, built once here.

Upstream's schemas run to thousands of lines; these type the fields rootdisk reads and
keep every other field a user may write (``x-kubernetes-preserve-unknown-fields`` on
the objects that hold them), so a manifest written for KubeVirt applies unchanged and
round-trips. The VMI spec appears twice (VMI and VM template) and is defined once.
``python -m vm.api.crds DIR`` writes the YAML files under ``manifests/crds``; a test
checks they are current.
"""

from __future__ import annotations

import copy
import sys
from pathlib import Path
from typing import Any

import yaml

from vocab import kubevirt as names

Schema = dict[str, Any]

STR: Schema = {"type": "string"}
INT: Schema = {"type": "integer"}
INT64: Schema = {"type": "integer", "format": "int64"}
BOOL: Schema = {"type": "boolean"}
QUANTITY: Schema = {"x-kubernetes-int-or-string": True,
                    "anyOf": [{"type": "integer"}, {"type": "string"}]}
ANY_OBJECT: Schema = {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
STR_MAP: Schema = {"type": "object", "additionalProperties": STR}


def obj(props: dict[str, Schema], *, required: list[str] | None = None,
        open_: bool = True, description: str | None = None) -> Schema:
    """An object typing ``props``; ``open_`` keeps the fields this schema does not name."""
    out: Schema = {"type": "object", "properties": props}
    if required:
        out["required"] = required
    if open_:
        out["x-kubernetes-preserve-unknown-fields"] = True
    if description:
        out["description"] = description
    return out


def array(items: Schema) -> Schema:
    return {"type": "array", "items": items}


CONDITIONS = array(obj({
    "type": STR, "status": STR, "reason": STR, "message": STR,
    "lastProbeTime": {"type": "string", "nullable": True},
    "lastTransitionTime": {"type": "string", "nullable": True},
}, required=["type", "status"]))

RESOURCES = obj({
    "requests": {"type": "object", "additionalProperties": QUANTITY},
    "limits": {"type": "object", "additionalProperties": QUANTITY},
    "overcommitGuestOverhead": BOOL,
})

DISK_TARGET = obj({"bus": STR, "readonly": BOOL, "pciAddress": STR})

DISK = obj({
    "name": STR,
    "disk": DISK_TARGET,
    "cdrom": obj({"bus": STR, "readonly": BOOL, "tray": STR}),
    "lun": obj({"bus": STR, "readonly": BOOL, "reservation": BOOL}),
    "bootOrder": INT,
    "serial": STR,
    "cache": STR,
    "io": STR,
    "dedicatedIOThread": BOOL,
    "shareable": BOOL,
}, required=["name"])

VOLUME = obj({
    "name": STR,
    "persistentVolumeClaim": obj({"claimName": STR, "readOnly": BOOL, "hotpluggable": BOOL},
                                 required=["claimName"]),
    "dataVolume": obj({"name": STR, "hotpluggable": BOOL}, required=["name"]),
    "containerDisk": ANY_OBJECT,
    "cloudInitNoCloud": ANY_OBJECT,
    "cloudInitConfigDrive": ANY_OBJECT,
    "emptyDisk": obj({"capacity": QUANTITY}),
    "ephemeral": ANY_OBJECT,
    "hostDisk": ANY_OBJECT,
    "configMap": ANY_OBJECT,
    "secret": ANY_OBJECT,
    "serviceAccount": ANY_OBJECT,
    "downwardAPI": ANY_OBJECT,
    "downwardMetrics": ANY_OBJECT,
    "sysprep": ANY_OBJECT,
    "memoryDump": ANY_OBJECT,
}, required=["name"])

DOMAIN = obj({
    "resources": RESOURCES,
    "memory": obj({"guest": QUANTITY, "hugepages": ANY_OBJECT, "maxGuest": QUANTITY}),
    "cpu": obj({"cores": INT, "sockets": INT, "threads": INT, "maxSockets": INT,
                "model": STR, "dedicatedCpuPlacement": BOOL}),
    "firmware": obj({
        "uuid": STR, "serial": STR,
        "bootloader": obj({
            "bios": obj({"useSerial": BOOL}),
            "efi": obj({"secureBoot": BOOL, "persistent": BOOL}),
        }),
    }),
    "features": ANY_OBJECT,
    "machine": obj({"type": STR}),
    "clock": ANY_OBJECT,
    "devices": obj({
        "disks": array(DISK),
        "interfaces": array(ANY_OBJECT),
        "autoattachSerialConsole": BOOL,
        "autoattachGraphicsDevice": BOOL,
        "autoattachMemBalloon": BOOL,
        "rng": ANY_OBJECT,
        "logSerialConsole": BOOL,
    }),
}, required=["devices"])

VMI_SPEC = obj({
    "domain": DOMAIN,
    "volumes": array(VOLUME),
    "networks": array(ANY_OBJECT),
    "terminationGracePeriodSeconds": INT64,
    "nodeSelector": STR_MAP,
    "affinity": ANY_OBJECT,
    "tolerations": array(ANY_OBJECT),
    "evictionStrategy": STR,
    "hostname": STR,
    "subdomain": STR,
    "schedulerName": STR,
    "priorityClassName": STR,
    "startStrategy": STR,
    "architecture": STR,
}, required=["domain"])

VMI_STATUS = obj({
    "phase": STR,
    "reason": STR,
    "nodeName": STR,
    "conditions": CONDITIONS,
    "interfaces": array(obj({"name": STR, "ipAddress": STR, "ipAddresses": array(STR),
                             "mac": STR, "interfaceName": STR})),
    "phaseTransitionTimestamps": array(obj({"phase": STR, "phaseTransitionTimestamp": STR})),
    "volumeStatus": array(ANY_OBJECT),
    "guestOSInfo": ANY_OBJECT,
    "activePods": STR_MAP,
    "launcherContainerImageVersion": STR,
    "qosClass": STR,
})

DV_TEMPLATE = obj({
    "apiVersion": STR,
    "kind": STR,
    "metadata": ANY_OBJECT,
    "spec": obj({
        "source": ANY_OBJECT,
        "sourceRef": obj({"kind": STR, "name": STR, "namespace": STR}),
        "pvc": ANY_OBJECT,
        "storage": ANY_OBJECT,
        "contentType": STR,
        "preallocation": BOOL,
        "priorityClassName": STR,
        "checkpoints": array(ANY_OBJECT),
        "finalCheckpoint": BOOL,
    }),
}, required=["spec"])

VM_SPEC = obj({
    "running": {"type": "boolean", "description": "Deprecated: use runStrategy."},
    "runStrategy": {"type": "string", "description":
                    "Always, RerunOnFailure, Manual, Halted, Once or WaitAsReceiver."},
    "template": obj({"metadata": ANY_OBJECT, "spec": VMI_SPEC}),
    "dataVolumeTemplates": array(DV_TEMPLATE),
    "instancetype": ANY_OBJECT,
    "preference": ANY_OBJECT,
    "updateVolumesStrategy": STR,
}, required=["template"])

VM_STATUS = obj({
    "created": BOOL,
    "ready": BOOL,
    "printableStatus": STR,
    "runStrategy": STR,
    "conditions": CONDITIONS,
    "stateChangeRequests": array(obj({
        "action": STR, "uid": STR, "data": STR_MAP}, required=["action"])),
    "startFailure": obj({"consecutiveFailCount": INT, "lastFailedVMIUID": STR,
                         "retryAfterTimestamp": STR}),
    "observedGeneration": INT64,
    "desiredGeneration": INT64,
    "volumeRequests": array(ANY_OBJECT),
    "volumeSnapshotStatuses": array(ANY_OBJECT),
})

KUBEVIRT_SPEC = obj({
    "configuration": obj({
        "developerConfiguration": obj({
            "useEmulation": BOOL,
            "featureGates": array(STR),
            "memoryOvercommit": {**INT, "minimum": 1},
        }),
        "additionalGuestMemoryOverheadRatio": STR,
        "launcherDriver": {
            "type": "string", "enum": ["qemu", "libvirt"],
            "description": "rootdisk extension: how the launcher runs the guest, QEMU "
                           "directly over QMP (qemu, the default) or through a per-pod "
                           "libvirt daemon (libvirt).",
        },
    }),
    "imagePullPolicy": STR,
    "imageRegistry": STR,
    "imageTag": STR,
    "workloadUpdateStrategy": ANY_OBJECT,
})

# Upstream (staging/src/kubevirt.io/api/core/v1/register.go, ApiSupportedVersions) still
# serves v1alpha3 beside v1 for VMs, VMIs and KubeVirt: the same schema, stored as v1, no
# conversion webhook (strategy None: only apiVersion changes), with this warning.
V1ALPHA3_WARNING = ("kubevirt.io/v1alpha3 is now deprecated and will be removed in a "
                    "future release.")

AGE = {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}
READY = {"name": "Ready", "type": "string",
         "jsonPath": ".status.conditions[?(@.type=='Ready')].status"}


def crd(*, kind: str, plural: str, singular: str, short: list[str], spec: Schema,
        status: Schema, columns: list[dict[str, Any]], spec_required: bool = True
        ) -> dict[str, Any]:
    schema = obj({
        "apiVersion": STR, "kind": STR, "metadata": {"type": "object"},
        "spec": spec, "status": status,
    }, required=["spec"] if spec_required else None, open_=False)
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{names.GROUP}",
                     "labels": {"app.kubernetes.io/part-of": "rootdisk"}},
        "spec": {
            "group": names.GROUP,
            "scope": "Namespaced",
            "names": {"kind": kind, "listKind": f"{kind}List", "plural": plural,
                      "singular": singular, "shortNames": short, "categories": ["all"]},
            "versions": [{
                "name": name, "served": True, "storage": name == names.VERSION,
                **({"deprecated": True, "deprecationWarning": V1ALPHA3_WARNING}
                   if name != names.VERSION else {}),
                "schema": {"openAPIV3Schema": copy.deepcopy(schema)},
                "subresources": {"status": {}},
                "additionalPrinterColumns": copy.deepcopy(columns),
            } for name in (names.VERSION, names.OLD_VERSION)],
        },
    }


def all_crds() -> dict[str, dict[str, Any]]:
    """File name → CRD."""
    return {
        "virtualmachines.yaml": crd(
            kind=names.VM_KIND, plural=names.VM_PLURAL, singular="virtualmachine",
            short=["vm", "vms"], spec=VM_SPEC, status=VM_STATUS,
            columns=[AGE, {"name": "Status", "type": "string",
                           "description": "Human Readable Status",
                           "jsonPath": ".status.printableStatus"}, READY]),
        "virtualmachineinstances.yaml": crd(
            kind=names.VMI_KIND, plural=names.VMI_PLURAL, singular="virtualmachineinstance",
            short=["vmi", "vmis"], spec=VMI_SPEC, status=VMI_STATUS,
            columns=[AGE, {"name": "Phase", "type": "string", "jsonPath": ".status.phase"},
                     {"name": "IP", "type": "string",
                      "jsonPath": ".status.interfaces[0].ipAddress"},
                     {"name": "NodeName", "type": "string", "jsonPath": ".status.nodeName"},
                     READY]),
        "kubevirts.yaml": crd(
            kind=names.KUBEVIRT_KIND, plural=names.KUBEVIRT_PLURAL, singular="kubevirt",
            short=["kv", "kvs"], spec=KUBEVIRT_SPEC, status=ANY_OBJECT,
            columns=[AGE, {"name": "Phase", "type": "string", "jsonPath": ".status.phase"}],
            spec_required=False),
    }


def render(doc: dict[str, Any]) -> str:
    header = "# Generated by `python -m vm.api.crds manifests/crds`; edit vm/api/crds.py.\n"
    return header + str(yaml.safe_dump(doc, sort_keys=False, width=100))


def main(argv: list[str]) -> int:
    out = Path(argv[0] if argv else "manifests/crds")
    for name, doc in all_crds().items():
        (out / name).write_text(render(doc), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
