"""The launcher pod's resources: guest memory plus upstream's overhead, CPU share.

Upstream's ``GetMemoryOverhead`` (``pkg/hypervisor/kvm/hypervisorbackend.go`` at
kubevirt/kubevirt d923fdb815cd; ``services/renderresources.go`` up to v1.7; 1.3 had
210Mi fixed) adds to the memory request: the page tables (the request in rounded-up
kilobytes / 512), a fixed 240Mi for the processes in the pod (monitor 25, launcher 100,
virtlogd 25, virtqemud 40, qemu 50), 8Mi per vCPU (the topology, else the CPU limit,
else the CPU request), 8Mi for the IOThread, 32Mi for the video device unless graphics
are turned off, 128Mi on arm64, and 1Gi VFIO (host devices, GPUs, SR-IOV) / 1Mi
downwardMetrics volume / 10Mi per exec probe plus 100Mi once / 256Mi SEV / 53Mi TPM /
100Mi for dedicated CPUs or a VMI that wants the Guaranteed QoS class /
``memory.reservedOverhead.addedOverhead`` when used; then the sum is multiplied by
``additionalGuestMemoryOverheadRatio`` (upstream's ``MultiplyMemory`` rounding). 2Gi
with one vCPU → 292Mi. Fields rootdisk's webhook refuses (VFIO, downwardMetrics, TPM,
probes…) are still counted, so the table matches upstream's whole.

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
from vm.errors import VmError
from vocab import kubevirt

Mi = 1024 * 1024
FIXED = 240 * Mi
PER_VCPU = 8 * Mi
IOTHREAD = 8 * Mi
VIDEO = 32 * Mi
VFIO = 1024 * Mi
SEV = 256 * Mi
TPM = 53 * Mi
DEDICATED_CPU = 100 * Mi  # also for a VMI that wants the Guaranteed QoS class
ARM64_PFLASH = 128 * Mi
DOWNWARD_METRICS = Mi
PER_PROBE = 10 * Mi
PROBE_BINARY = 100 * Mi
CPU_ALLOCATION_RATIO = 10


class ResourceError(VmError, ValueError):
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
    """Bytes the guest sees: ``memory.guest``, else ``resources.requests.memory``, else
    ``resources.limits.memory``."""
    d = _domain(spec)
    guest = (d.get("memory") or {}).get("guest")
    if guest is not None:
        return _bytes(guest, "spec.domain.memory.guest")
    res = d.get("resources") or {}
    for part in ("requests", "limits"):
        value = (res.get(part) or {}).get("memory")
        if value is not None:
            return _bytes(value, f"spec.domain.resources.{part}.memory")
    raise ResourceError("spec.domain.resources.requests.memory: no memory requested")


def requested_memory(spec: Mapping[str, Any]) -> int:
    res = _domain(spec).get("resources") or {}
    for part in ("requests", "limits"):
        value = (res.get(part) or {}).get("memory")
        if value is not None:
            return _bytes(value, f"spec.domain.resources.{part}.memory")
    return guest_memory(spec)


def overhead_vcpus(spec: Mapping[str, Any]) -> int:
    """vCPUs as upstream's overhead counts them: the topology when ``cpu`` is given
    (``GetNumberOfVCPUs``: a zero count is left out of the product), else the CPU limit,
    else the CPU request (rounded up to whole CPUs); at least 1."""
    d = _domain(spec)
    cpu = d.get("cpu")
    count = 0
    if cpu is not None:
        for key in ("cores", "sockets", "threads"):
            n = int(cpu.get(key) or 0)
            if n:
                count = n if count == 0 else count * n
    else:
        res = d.get("resources") or {}
        for part in ("limits", "requests"):
            value = (res.get(part) or {}).get("cpu")
            if value is not None:
                count = math.ceil(_cpu(value, f"spec.domain.resources.{part}.cpu"))
                break
    return max(1, count)


def _cpu(value: Any, field: str) -> Fraction:
    try:
        return parse_quantity(str(value))
    except ValueError as err:
        raise ResourceError(f"{field}: {err}") from None


def wants_guaranteed_qos(spec: Mapping[str, Any]) -> bool:
    """Upstream's ``WantsToHaveQOSGuaranteed``: memory limit set and the request unset or
    equal to it, and a CPU request equal to the CPU limit."""
    res = _domain(spec).get("resources") or {}
    req, lim = res.get("requests") or {}, res.get("limits") or {}

    def mem(part: Mapping[str, Any], name: str) -> int:
        value = part.get("memory")
        return 0 if value is None else _bytes(value, f"spec.domain.resources.{name}.memory")

    def cpu(part: Mapping[str, Any], name: str) -> Fraction:
        value = part.get("cpu")
        return Fraction(0) if value is None else _cpu(value, f"spec.domain.resources.{name}.cpu")
    mreq, mlim = mem(req, "requests"), mem(lim, "limits")
    creq, clim = cpu(req, "requests"), cpu(lim, "limits")
    memory_wants = (mreq == 0 and mlim != 0) or (mreq != 0 and mreq == mlim)
    return memory_wants and creq != 0 and creq == clim


def _has_vfio(spec: Mapping[str, Any]) -> bool:
    devices = _domain(spec).get("devices") or {}
    return bool(devices.get("hostDevices") or devices.get("gpus") or any(
        isinstance(i, Mapping) and i.get("sriov") is not None
        for i in devices.get("interfaces") or []))


def _probe_overhead(spec: Mapping[str, Any]) -> int:
    """Upstream's addProbeOverheads: 10Mi per exec probe, 100Mi once for virt-probe."""
    probes = [p for p in (spec.get("livenessProbe"), spec.get("readinessProbe"))
              if isinstance(p, Mapping) and p.get("exec") is not None]
    return PER_PROBE * len(probes) + (PROBE_BINARY if probes else 0)


def multiply_memory(value: int, ratio: float) -> int:
    """Upstream's ``MultiplyMemory``: the value in (rounded-up) kilobytes times
    ``ratio - 1``, truncated to whole kilobytes, added."""
    return value + int(float(math.ceil(Fraction(value, 1000))) * (ratio - 1.0)) * 1000


def memory_overhead(spec: Mapping[str, Any], *, ratio: str | None = None,
                    arch: str = "amd64") -> int:
    """Upstream's ``GetMemoryOverhead`` (``pkg/hypervisor/kvm/hypervisorbackend.go``)."""
    d = _domain(spec)
    devices = d.get("devices") or {}
    # page tables: the request in (rounded-up) kilobytes, as bytes, / 512
    total = math.ceil(Fraction(requested_memory(spec), 1000)) * 1000 // 512
    total += FIXED + PER_VCPU * overhead_vcpus(spec) + IOTHREAD
    if devices.get("autoattachGraphicsDevice") is not False:
        total += VIDEO
    if arch == "arm64":
        total += ARM64_PFLASH
    if _has_vfio(spec):
        total += VFIO
    if any(isinstance(v, Mapping) and v.get("downwardMetrics") is not None
           for v in spec.get("volumes") or []):
        total += DOWNWARD_METRICS
    total += _probe_overhead(spec)
    security = d.get("launchSecurity") or {}
    if security.get("sev") is not None or security.get("snp") is not None:
        total += SEV
    tpm = devices.get("tpm")
    if tpm is not None and tpm.get("enabled") is not False:
        total += TPM
    if (d.get("cpu") or {}).get("dedicatedCpuPlacement") or wants_guaranteed_qos(spec):
        total += DEDICATED_CPU
    added = ((d.get("memory") or {}).get("reservedOverhead") or {}).get("addedOverhead")
    if added is not None:
        total += _bytes(added, "spec.domain.memory.reservedOverhead.addedOverhead")
    if ratio:
        try:
            factor = float(ratio)
        except ValueError:
            raise ResourceError(
                f"additionalGuestMemoryOverheadRatio: {ratio!r} is not a number") from None
        if not math.isfinite(factor) or factor < 1:
            raise ResourceError(
                f"additionalGuestMemoryOverheadRatio: {ratio!r} must be at least 1")
        total = multiply_memory(total, factor)
    return total


@dataclass(frozen=True)
class PodResources:
    requests: dict[str, str]
    limits: dict[str, str]


def pod_memory_request(spec: Mapping[str, Any], *, overcommit: int = 100) -> int:
    """The VMI's share of the pod's memory request, as upstream's WithMemoryRequests: its
    memory request; else its memory limit; else the guest's memory × 100 / overcommit."""
    res = _domain(spec).get("resources") or {}
    req = (res.get("requests") or {}).get("memory")
    if req is not None and _bytes(req, "spec.domain.resources.requests.memory"):
        return _bytes(req, "spec.domain.resources.requests.memory")
    lim = (res.get("limits") or {}).get("memory")
    if lim is not None and _bytes(lim, "spec.domain.resources.limits.memory"):
        return _bytes(lim, "spec.domain.resources.limits.memory")
    guest = guest_memory(spec)
    return guest if overcommit == 100 else guest * 100 // overcommit


def pod_resources(spec: Mapping[str, Any], *, ratio: str | None, kvm: bool,
                  overcommit: int = 100) -> PodResources:
    d = _domain(spec)
    res = d.get("resources") or {}
    overhead = memory_overhead(spec, ratio=ratio)
    requests = {"memory": str(pod_memory_request(spec, overcommit=overcommit) + overhead)}
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
        limits[kubevirt.KVM_RESOURCE] = "1"
    return PodResources(requests=requests, limits=limits)
