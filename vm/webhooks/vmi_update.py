"""Rules a VMI update must meet (upstream's VMI update admitter, ``vmi-update-admitter.go``).

The create webhook checks a VMI's spec once; what the launcher later runs is the spec as
it is then, so nobody but KubeVirt's own components may change it afterwards. A user's
update that changes ``spec`` is refused with upstream's message, naming each field that
changed (``spec.domain.machine.type: update of VMI object is restricted``); one that
changes only metadata passes, except for upstream's reserved ``kubevirt.io/`` labels
(``kubevirt.io/nodeName`` decides which node's handler serves the VMI), which a user may
not set on a VMI it creates, nor in a VM's template, either.

KubeVirt's service accounts in its namespace (virt-api's, virt-controller's,
virt-handler's) may change the labels, and the spec only where rootdisk's components
do: virt-api shortens ``spec.terminationGracePeriodSeconds`` for a stop or a forced
restart. Upstream lets them change more (CPU, memory and volume hotplug through
virt-api's subresources), which rootdisk does not have. Status goes through the status
subresource, which this webhook is not called for.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from vm.webhooks.vmi_rules import Problem
from vocab import kubevirt

RESTRICTED = "update of VMI object is restricted"
RESERVED_LABELS_CHANGED = ("modification of the following reserved kubevirt.io/ labels on "
                           "a VMI object is prohibited")
RESERVED_LABELS_CREATED = ("creation of the following reserved kubevirt.io/ labels on a VMI"
                           " object is prohibited")
# upstream's restrictedVmiLabels
RESERVED_LABELS = (kubevirt.LABEL_CREATED_BY, "kubevirt.io/migrationJobUID",
                   kubevirt.LABEL_NODE_NAME, "kubevirt.io/migrationTargetNodeName",
                   "kubevirt.io/schedulable", "kubevirt.io/install-strategy")
# upstream's KubeVirtServiceAccounts, with rootdisk's names (manifests/rbac/kubevirt.yaml)
SERVICE_ACCOUNTS = ("kubevirt-apiserver", "kubevirt-controller", "kubevirt-handler")
SERVICE_ACCOUNT_FIELDS = ("terminationGracePeriodSeconds",)
"""The spec fields KubeVirt's service accounts may change (``vm.api.lifecycle``)."""
MAX_LISTED = 10


def kubevirt_users(namespace: str) -> frozenset[str]:
    return frozenset(f"system:serviceaccount:{namespace}:{sa}" for sa in SERVICE_ACCOUNTS)


def changed_fields(old: Any, new: Any, at: str) -> Iterator[str]:
    """The paths where ``new`` differs from ``old`` (a key set to null counts as absent;
    a list whose length changed is one path)."""
    if isinstance(old, Mapping) and isinstance(new, Mapping):
        for key in sorted(set(old) | set(new), key=str):
            yield from changed_fields(old.get(key), new.get(key), f"{at}.{key}")
    elif isinstance(old, list) and isinstance(new, list) and len(old) == len(new):
        for i, (a, b) in enumerate(zip(old, new, strict=True)):
            yield from changed_fields(a, b, f"{at}[{i}]")
    elif old != new or type(old) is not type(new):
        yield at


def _labels(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    labels = (obj.get("metadata") or {}).get("labels")
    return labels if isinstance(labels, Mapping) else {}


def reserved_labels_created(metadata: Any, *, username: str, namespace: str,
                            at: str) -> list[Problem]:
    """Upstream's ValidateVirtualMachineInstanceMetadata: only KubeVirt's service accounts
    may create a VMI carrying a reserved label (a user's ``kubevirt.io/nodeName`` would
    hand the VMI to that node's handler), nor a VM whose template carries one (the VM
    controller, a KubeVirt account, creates its VMIs). ``at``: the labels' field path."""
    if username in kubevirt_users(namespace):
        return []
    labels = _labels({"metadata": metadata})
    present = [k for k in RESERVED_LABELS if k in labels]
    if not present:
        return []
    return [Problem(at, f"{RESERVED_LABELS_CREATED}: {', '.join(present)}")]


def validate_vmi_update(old: Any, new: Any, *, username: str,
                        namespace: str) -> list[Problem]:
    """What is wrong with ``username`` updating VMI ``old`` to ``new``; KubeVirt's
    service accounts are those of ``namespace``."""
    if not isinstance(old, Mapping):
        return [Problem("oldObject", "required for an update")]
    if not isinstance(new, Mapping):
        return [Problem("object", "must be an object")]
    kubevirt = username in kubevirt_users(namespace)
    allowed = {f"spec.{f}" for f in SERVICE_ACCOUNT_FIELDS} if kubevirt else set()
    out: list[Problem] = []
    for field in changed_fields(old.get("spec"), new.get("spec"), "spec"):
        if field in allowed:
            continue
        if len(out) == MAX_LISTED:
            out.append(Problem("spec", f"{RESTRICTED} (and more fields)"))
            break
        out.append(Problem(field, RESTRICTED if not kubevirt else
                           f"{RESTRICTED}: KubeVirt's service accounts may change only "
                           + ", ".join(f"spec.{f}" for f in SERVICE_ACCOUNT_FIELDS)))
    if not kubevirt:
        before, after = _labels(old), _labels(new)
        changed = [k for k in RESERVED_LABELS if before.get(k) != after.get(k)]
        if changed:
            out.append(Problem("metadata.labels",
                               f"{RESERVED_LABELS_CHANGED}: {', '.join(changed)}"))
    return out
