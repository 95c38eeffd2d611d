"""What the populators read from CDIConfig's status, with upstream's defaults (pure).

The cluster-scoped ``cdiconfigs.cdi.kubevirt.io/config`` is filled by the CDI config
controller from its spec; populators read only its **status**, as upstream's do, and
fall back to the defaults below when the object or a field is absent (the config
controller may not have run yet). ``importRetryLimit`` is a rootdisk extension: upstream
retries a failing importer for ever.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from cdi.config import DEFAULT_IMPORT_RETRY_LIMIT, DEFAULT_POD_RESOURCES
from sizes import DEFAULT_OVERHEAD as SPACE_OVERHEAD
from sizes import format_overhead

# The config controller's own defaults (what it writes into the status when the spec
# says nothing), used here until it has written them.
DEFAULT_OVERHEAD = format_overhead(SPACE_OVERHEAD)
DEFAULT_RETRY_LIMIT = DEFAULT_IMPORT_RETRY_LIMIT
DEFAULT_RESOURCES = DEFAULT_POD_RESOURCES
_PERCENT = re.compile(r"^(0(?:\.\d{1,3})?|1)$")
"""Upstream's ``Percent`` pattern: 0, 0.x up to three decimals, or 1."""


@dataclass(frozen=True)
class CdiConfig:
    global_overhead: str = DEFAULT_OVERHEAD
    class_overheads: Mapping[str, str] = field(default_factory=dict)
    resources: Mapping[str, Mapping[str, str]] = field(
        default_factory=lambda: {k: dict(v) for k, v in DEFAULT_RESOURCES.items()})
    retry_limit: int = DEFAULT_RETRY_LIMIT
    insecure_registries: tuple[str, ...] = ()
    """``spec.insecureRegistries``: registry hosts (``host[:port]``) reached without TLS
    verification, or over plain HTTP."""

    def overhead(self, *, storage_class: str | None, block: bool) -> str:
        """FILESYSTEM_OVERHEAD for a volume: none on Block or without a class (``""``, a
        static volume, as upstream), else the class's, else global."""
        if block or storage_class == "":
            return "0"
        if storage_class and storage_class in self.class_overheads:
            return self.class_overheads[storage_class]
        return self.global_overhead


def parse(obj: Mapping[str, Any] | None) -> CdiConfig:
    """The settings from a CDIConfig object (None: it does not exist). Values that do not
    parse are ignored (the default stays), as upstream ignores an invalid global."""
    status: Mapping[str, Any] = (obj or {}).get("status") or {}
    fo: Mapping[str, Any] = status.get("filesystemOverhead") or {}
    glob = fo.get("global")
    classes = {
        str(k): str(v) for k, v in (fo.get("storageClass") or {}).items()
        if isinstance(v, str) and _PERCENT.match(v)
    }
    limit = status.get("importRetryLimit")
    insecure = ((obj or {}).get("spec") or {}).get("insecureRegistries") or []
    return CdiConfig(
        global_overhead=glob if isinstance(glob, str) and _PERCENT.match(glob)
        else DEFAULT_OVERHEAD,
        class_overheads=classes,
        resources=_resources(status.get("defaultPodResourceRequirements")),
        retry_limit=limit if isinstance(limit, int) and not isinstance(limit, bool)
        and limit >= 0 else DEFAULT_RETRY_LIMIT,
        insecure_registries=tuple(h for h in insecure if isinstance(h, str))
        if isinstance(insecure, list) else (),
    )


def _resources(value: Any) -> Mapping[str, Mapping[str, str]]:
    if not isinstance(value, Mapping):
        return {k: dict(v) for k, v in DEFAULT_RESOURCES.items()}
    out: dict[str, dict[str, str]] = {}
    for kind in ("limits", "requests"):
        part = value.get(kind)
        if isinstance(part, Mapping):
            out[kind] = {str(k): str(v) for k, v in part.items()
                         if k in ("cpu", "memory") and v not in (None, "")}
    return {k: v for k, v in out.items() if v}
