"""Which PVCs a VMI's disks need, and whether the launcher pod can be made yet.

``persistentVolumeClaim``, ``dataVolume`` and ``ephemeral`` volumes are claims (a
DataVolume's PVC has its name; an ephemeral volume's claim is mounted read-only).
Before the launcher pod exists every claim must be usable: a DataVolume still
importing means wait, a Failed one fails the VMI, a claim that does not exist is
``FailedPvcNotFound`` (the VM shows ErrorPvcNotFound), and a DataVolume waiting for its
first consumer (WaitForFirstConsumer, PendingPopulation) gets upstream's temporary pod
that makes the scheduler bind it.

A claim's volume keeps the VMI volume's name in the launcher pod, so that name must be
one a pod volume may have (:func:`volume_name_problem`; the VMI webhook refuses others).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

# The launcher pod's own volumes (vm/vmi/pod.py). A claim's volume takes the VMI volume's
# name in that pod, so a VMI volume may not be called one of these.
LAUNCHER_VOLUMES = frozenset({
    "private", "public", "sockets", "libvirt-runtime", "ephemeral-disks", "vmi-disks",
    "secret-mounts",
})
_DNS1123_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
DNS1123_LABEL_MSG = (
    "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', "
    "and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', "
    "regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')")


def volume_name_problem(name: str) -> str | None:
    """Why ``name`` cannot name a VMI volume, or None. It becomes a volume of the launcher
    pod (a directory or a device node the kubelet makes of that name) and the disk's
    path in it (``vmi-disks/<name>``, ``/dev/<name>``): a DNS-1123 label, as Kubernetes
    requires of pod volume names, and none of the pod's own volumes."""
    if len(name) > 63:
        return f"{name[:80]!r} is not a valid volume name: must be no more than 63 characters"
    if not _DNS1123_LABEL.fullmatch(name):
        return f"{name[:80]!r} is not a valid volume name: {DNS1123_LABEL_MSG}"
    if name in LAUNCHER_VOLUMES:
        return (f"{name!r} is reserved: the launcher pod has a volume of that name "
                f"(reserved: {', '.join(sorted(LAUNCHER_VOLUMES))})")
    return None


@dataclass(frozen=True)
class DiskClaim:
    volume: str
    claim: str
    read_only: bool = False
    from_dv: bool = False


@dataclass(frozen=True)
class ClaimView:
    exists: bool
    phase: str = ""
    volume_mode: str = "Filesystem"
    dv_phase: str | None = None
    """None: no DataVolume of that name."""


def disk_claims(spec: Mapping[str, Any]) -> list[DiskClaim]:
    out = []
    for v in spec.get("volumes") or []:
        if not isinstance(v, Mapping):
            continue
        if isinstance(v.get("persistentVolumeClaim"), Mapping):
            pvc = v["persistentVolumeClaim"]
            out.append(DiskClaim(volume=str(v.get("name")), claim=str(pvc.get("claimName")),
                                 read_only=bool(pvc.get("readOnly"))))
        elif isinstance(v.get("ephemeral"), Mapping):
            # the golden claim under a qcow2 overlay: mounted read-only, so several VMs
            # can share it and none writes it
            pvc = v["ephemeral"].get("persistentVolumeClaim") or {}
            out.append(DiskClaim(volume=str(v.get("name")), claim=str(pvc.get("claimName")),
                                 read_only=True))
        elif isinstance(v.get("dataVolume"), Mapping):
            out.append(DiskClaim(volume=str(v.get("name")), claim=str(v["dataVolume"]["name"]),
                                 from_dv=True))
    return out


Verdict = Literal["ready", "wait", "bind", "missing", "failed"]


@dataclass(frozen=True)
class Readiness:
    verdict: Verdict
    message: str = ""


def readiness(*, claims: Sequence[DiskClaim], views: Mapping[str, ClaimView],
              namespace: str) -> Readiness:
    """The worst verdict over the claims, in order failed > missing > wait > bind."""
    found: dict[str, list[str]] = {}
    for c in claims:
        view = views.get(c.claim, ClaimView(exists=False))
        if view.dv_phase == "Failed":
            verdict = "failed"
        elif view.dv_phase is not None and view.dv_phase in (
                "WaitForFirstConsumer", "PendingPopulation"):
            verdict = "bind"
        elif view.dv_phase is not None and view.dv_phase != "Succeeded":
            verdict = "wait"
        elif not view.exists:
            verdict = "missing"
        else:
            continue
        found.setdefault(verdict, []).append(c.claim)
    for verdict, text in (
            ("failed", "DataVolume {} failed"),
            ("missing", "PVC {} does not exist, waiting for it to appear"),
            ("wait", "DataVolume {} is not ready yet"),
            ("bind", "DataVolume {} waits for a first consumer")):
        if verdict in found:
            listed = ", ".join(f"{namespace}/{n}" for n in found[verdict])
            return Readiness(verdict, text.format(listed))  # type: ignore[arg-type]
    return Readiness("ready")
