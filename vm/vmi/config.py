"""The cluster's KubeVirt configuration as the VMI controller needs it.

``useEmulation`` comes from ``spec.configuration.developerConfiguration``; emulation is
also used when no node advertises ``devices.kubevirt.io/kvm`` (rootdisk has no device
plugin on nodes without a usable KVM, and a launcher asking for the resource could
never be scheduled there). ``launcherDriver`` is rootdisk's extension (qemu | libvirt).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from vm.vmi.pod import LauncherConfig
from vocab import kubevirt as names


def node_has_kvm(node: Mapping[str, Any]) -> bool:
    alloc = (node.get("status") or {}).get("allocatable") or {}
    try:
        return int(str(alloc.get(names.KVM_RESOURCE, "0"))) > 0
    except ValueError:
        return False


def launcher_config(*, kubevirts: Sequence[Mapping[str, Any]],
                    nodes: Sequence[Mapping[str, Any]], image: str,
                    unprivileged_start: int = 1024) -> LauncherConfig:
    live = [k for k in kubevirts if not (k.get("metadata") or {}).get("deletionTimestamp")]
    live.sort(key=lambda k: str((k.get("metadata") or {}).get("creationTimestamp") or ""))
    conf = ((live[0].get("spec") or {}).get("configuration") or {}) if live else {}
    dev = conf.get("developerConfiguration") or {}
    emulation = bool(dev.get("useEmulation")) or not any(node_has_kvm(n) for n in nodes)
    ratio = conf.get("additionalGuestMemoryOverheadRatio")
    overcommit = dev.get("memoryOvercommit")
    # upstream falls back to its defaults (100) for a value that is not a positive integer
    if not isinstance(overcommit, int) or isinstance(overcommit, bool) or overcommit <= 0:
        overcommit = 100
    return LauncherConfig(image=image, driver=str(conf.get("launcherDriver") or "qemu"),
                          emulation=emulation, overhead_ratio=str(ratio) if ratio else None,
                          unprivileged_start=unprivileged_start,
                          memory_overcommit=overcommit)
