"""The launcher pod's resources: guest memory plus upstream's overhead, CPU share.

Upstream's ``GetMemoryOverhead`` (KubeVirt ≥ 1.4; 1.3 had 210Mi fixed) adds to the
guest's memory: the page tables (memory / 512), a fixed 240Mi for the processes in the
pod (monitor 25, launcher 100, virtlogd 25, virtqemud 40, qemu 50), 8Mi per vCPU, 8Mi
for the IOThread, 32Mi for the video device unless graphics are turned off, and 1Gi
VFIO / 256Mi SEV / 53Mi TPM / 100Mi dedicated CPUs when used; the sum is multiplied by
``additionalGuestMemoryOverheadRatio``. 2Gi with one vCPU → 292Mi.

The CPU request is vCPUs / cpuAllocationRatio (10; rootdisk has no supplemental
IOThread pool) unless the user asked
for CPU or dedicated CPUs.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from sizes import parse_bytes, parse_quantity

Mi = 1024 * 1024
FIXED = 240 * Mi
PER_VCPU = 8 * Mi
IOTHREAD = 8 * Mi
VIDEO = 32 * Mi
VFIO = 1024 * Mi
SEV = 256 * Mi
TPM = 53 * Mi
DEDICATED_CPU = 100 * Mi
CPU_ALLOCATION_RATIO = 10


class ResourceError(ValueError):
    """Memory or CPU that cannot be read; the message names the field."""


def _domain(spec: Mapping[str, Any]) -> Mapping[str, Any]:
    return spec.get("domain") or {}


def vcpus(spec: Mapping[str, Any]) -> int:
    cpu = _domain(spec).get("cpu") or {}
    return max(1, int(cpu.get("sockets") or 1) * int(cpu.get("cores") or 1)
               * int(cpu.get("threads") or 1))


def _bytes(value: Any, field: str) -> int:
    try:
        return parse_bytes(str(value))
    except ValueError as err:
        raise ResourceError(f"{field}: {err}") from None


def guest_memory(spec: Mapping[str, Any]) -> int:
    """Bytes the guest sees: ``memory.guest``, else ``resources.requests.memory``."""
    d = _domain(spec)
    guest = (d.get("memory") or {}).get("guest")
    if guest is not None:
        return _bytes(guest, "spec.domain.memory.guest")
    req = ((d.get("resources") or {}).get("requests") or {}).get("memory")
    if req is None:
        raise ResourceError("spec.domain.resources.requests.memory: no memory requested")
    return _bytes(req, "spec.domain.resources.requests.memory")


def requested_memory(spec: Mapping[str, Any]) -> int:
    req = ((_domain(spec).get("resources") or {}).get("requests") or {}).get("memory")
    if req is None:
        return guest_memory(spec)
    return _bytes(req, "spec.domain.resources.requests.memory")


def memory_overhead(spec: Mapping[str, Any], *, ratio: str | None = None) -> int:
    d = _domain(spec)
    devices = d.get("devices") or {}
    total = Fraction(requested_memory(spec)) / 512
    total += FIXED + PER_VCPU * vcpus(spec) + IOTHREAD
    if devices.get("autoattachGraphicsDevice") is not False:
        total += VIDEO
    if devices.get("gpus") or devices.get("hostDevices"):
        total += VFIO
    if ((d.get("launchSecurity") or {}).get("sev")) is not None:
        total += SEV
    if devices.get("tpm") is not None:
        total += TPM
    if (d.get("cpu") or {}).get("dedicatedCpuPlacement"):
        total += DEDICATED_CPU
    if ratio:
        try:
            factor = parse_quantity(ratio)
        except ValueError:
            raise ResourceError(
                f"additionalGuestMemoryOverheadRatio: {ratio!r} is not a number") from None
        if factor < 1:
            raise ResourceError(
                f"additionalGuestMemoryOverheadRatio: {ratio!r} must be at least 1")
        total *= factor
    return math.ceil(total)


@dataclass(frozen=True)
class PodResources:
    requests: dict[str, str]
    limits: dict[str, str]


def pod_resources(spec: Mapping[str, Any], *, ratio: str | None, kvm: bool) -> PodResources:
    d = _domain(spec)
    res = d.get("resources") or {}
    overhead = memory_overhead(spec, ratio=ratio)
    requests = {"memory": str(requested_memory(spec) + overhead)}
    limits: dict[str, str] = {}
    user_requests = res.get("requests") or {}
    user_limits = res.get("limits") or {}
    if "cpu" in user_requests:
        requests["cpu"] = str(user_requests["cpu"])
    elif not (d.get("cpu") or {}).get("dedicatedCpuPlacement"):
        millis = math.ceil(Fraction(vcpus(spec) * 1000, CPU_ALLOCATION_RATIO))
        requests["cpu"] = f"{millis}m"
    if "memory" in user_limits:
        limits["memory"] = str(
            _bytes(user_limits["memory"], "spec.domain.resources.limits.memory") + overhead)
    if "cpu" in user_limits:
        limits["cpu"] = str(user_limits["cpu"])
    if kvm:
        limits["devices.kubevirt.io/kvm"] = "1"
    return PodResources(requests=requests, limits=limits)
