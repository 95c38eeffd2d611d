"""Names of the kubevirt.io API: groups, kinds, labels, annotations.

They are upstream KubeVirt's, so objects written by rootdisk look like KubeVirt's to
tools that know KubeVirt (and a user's labels and selectors keep working).
"""

from __future__ import annotations

import hashlib
from typing import Final

GROUP: Final = "kubevirt.io"
VERSION: Final = "v1"
# still served, deprecated, as upstream (vm/api/crds.py)
OLD_VERSION: Final = "v1alpha3"
API_VERSION: Final = f"{GROUP}/{VERSION}"
SUBRESOURCE_GROUP: Final = "subresources.kubevirt.io"
SUBRESOURCE_API_VERSION: Final = f"{SUBRESOURCE_GROUP}/{VERSION}"
SUBRESOURCE_PATH: Final = f"/apis/{SUBRESOURCE_API_VERSION}"

VM_KIND: Final = "VirtualMachine"
VM_PLURAL: Final = "virtualmachines"
VMI_KIND: Final = "VirtualMachineInstance"
VMI_PLURAL: Final = "virtualmachineinstances"
KUBEVIRT_KIND: Final = "KubeVirt"
KUBEVIRT_PLURAL: Final = "kubevirts"

LABEL_CREATED_BY: Final = "kubevirt.io/created-by"
"""On a DataVolume: the VM's uid. On a launcher pod: the VMI's uid."""
LABEL_APP: Final = "kubevirt.io"
"""``kubevirt.io=virt-launcher`` marks launcher pods."""
LABEL_VM_NAME: Final = "vm.kubevirt.io/name"
LABEL_NODE_NAME: Final = "kubevirt.io/nodeName"
LABEL_VMI_ID: Final = "vmi.kubevirt.io/id"
"""On a launcher pod: the VMI's name (hashed when too long for a label), what
``virtctl expose`` selects."""
ANN_DOMAIN: Final = "kubevirt.io/domain"
ANN_IMMEDIATE_DV_CREATION: Final = "kubevirt.io/immediate-data-volume-creation"
ANN_EPHEMERAL_PROVISIONING: Final = "kubevirt.io/ephemeral-provisioning"
ANN_INSTANCETYPE: Final = "kubevirt.io/instancetype-name"
ANN_CLUSTER_INSTANCETYPE: Final = "kubevirt.io/cluster-instancetype-name"
"""The instancetype annotations: the launcher pod carries them, cloud-init's metadata
reports them (upstream's ``instance-type``)."""
KVM_RESOURCE: Final = "devices.kubevirt.io/kvm"
PLAIN_PROTOCOL: Final = "plain.kubevirt.io"
"""The WebSocket subprotocol of the console, VNC and port-forward streams (raw bytes in
binary frames)."""

LAUNCHER_IMAGE: Final = "rootdisk/launcher"
LAUNCHER_UID: Final = 107
"""Upstream's non-root qemu user; the launcher pod's runAsUser, runAsGroup and fsGroup."""


def vmi_id_label(name: str) -> str:
    """``vmi.kubevirt.io/id``'s value: the name, or when it is longer than a label value
    may be, its first 54 characters, a dash and 8 hex digits of its SHA-1 (upstream)."""
    if len(name) <= 63:
        return name
    return f"{name[:54]}-{hashlib.sha1(name.encode()).hexdigest()[:8]}"  # noqa: S324 - a name, not a secret
