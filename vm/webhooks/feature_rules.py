"""VMI spec fields (outside volumes and devices) that ask for something rootdisk's launcher
does not do: refused at admission naming the field, so a VM is never accepted only to run
without what it asked for (the launcher would ignore the field) or to crash-loop.

Checked against kubevirt/kubevirt d923fdb815cd's VirtualMachineInstanceSpec. Accepted and
ignored, as hints that change nothing a guest relies on here: scheduling fields
(nodeSelector, affinity, tolerations, priorityClassName, evictionStrategy: one node, no
migration), ``clock.utc`` without an offset and clock timers (QEMU's clock is UTC),
Hyper-V enlightenments and ``features.kvm``, ``ioThreadsPolicy``, ``chassis``, probes
(not run; see docs/vm.md, "Not done").
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from vm.webhooks.problem import Problem

NOT_SUPPORTED = "this feature is not supported by rootdisk's VM runtime"


def _set(value: Any) -> bool:
    return value not in (None, False, "", [], {})


# (path under spec, when it is refused, why); paths are dot-separated object keys
RULES: tuple[tuple[str, Callable[[Any], bool], str], ...] = (
    ("domain.firmware.kernelBoot", _set, "direct kernel boot: " + NOT_SUPPORTED),
    ("domain.memory.hugepages", _set, "hugepages: " + NOT_SUPPORTED),
    ("domain.memory.maxGuest", _set, "memory hotplug: " + NOT_SUPPORTED),
    ("domain.cpu.maxSockets", _set, "CPU hotplug: " + NOT_SUPPORTED),
    ("domain.cpu.dedicatedCpuPlacement", _set, "dedicated CPUs: " + NOT_SUPPORTED),
    ("domain.cpu.isolateEmulatorThread", _set, "dedicated CPUs: " + NOT_SUPPORTED),
    ("domain.cpu.numa", _set, "guest NUMA: " + NOT_SUPPORTED),
    ("domain.cpu.realtime", _set, "realtime vCPUs: " + NOT_SUPPORTED),
    ("domain.launchSecurity", _set, "confidential computing (SEV/SNP/TDX): " + NOT_SUPPORTED),
    ("domain.clock.timezone", _set, "a guest clock in a timezone: " + NOT_SUPPORTED),
    ("domain.clock.utc.offsetSeconds", lambda v: v not in (None, 0),
     "a guest clock offset from UTC: " + NOT_SUPPORTED),
    ("domain.ioThreads", _set, "a dedicated IOThread pool: " + NOT_SUPPORTED),
    ("architecture", lambda v: v not in (None, "", "amd64"),
     "only amd64 guests run on rootdisk's VM runtime"),
)


def _at(spec: Mapping[str, Any], path: str) -> Any:
    value: Any = spec
    for key in path.split("."):
        if not isinstance(value, Mapping):
            return None
        value = value.get(key)
    return value


def feature_problems(spec: Mapping[str, Any], at: str) -> list[Problem]:
    return [Problem(f"{at}.{path}", why) for path, refused, why in RULES
            if refused(_at(spec, path))]
