"""Devices of ``spec.domain.devices`` that rootdisk's launcher does not build: refused at
admission with the reason, so a VM is never accepted only to run without them (the
launcher would ignore them) or to crash-loop.

The launcher builds disks, interfaces (pod network), the rng device and the serial
console; it ignores the hints that change nothing a guest relies on (the graphics, input
and memory-balloon auto-attach switches, multiqueue, ``logSerialConsole``,
``disableHotplug``, ``video``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from vm.webhooks.problem import Problem

# device lists or objects that the launcher would have to add to the domain
UNSUPPORTED_DEVICES = ("watchdog", "inputs", "gpus", "hostDevices", "filesystems",
                       "downwardMetrics", "panicDevices", "clientPassthrough", "sound", "tpm")


def device_problems(devices: Any, at: str) -> list[Problem]:
    if not isinstance(devices, Mapping):
        return []
    out = []
    for key in UNSUPPORTED_DEVICES:
        value = devices.get(key)
        if value is None or value == []:
            continue
        out.append(Problem(f"{at}.{key}", "this device is not supported by rootdisk's VM "
                           "runtime"))
    if devices.get("autoattachVSOCK") is True:
        out.append(Problem(f"{at}.autoattachVSOCK", "VSOCK is not supported by rootdisk's "
                           "VM runtime"))
    if devices.get("useVirtioTransitional") is True:
        out.append(Problem(f"{at}.useVirtioTransitional", "rootdisk's VM runtime attaches "
                           "virtio-non-transitional devices only"))
    return out
