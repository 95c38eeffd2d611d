"""The resource types the server serves, and how URLs find them.

A :class:`ResourceType` is everything the server needs to know about one
``group/version/resource``: kind, scope, verbs, subresources, short names, and for custom
resources the schema and printer columns of that version. Objects are stored per
``group/resource`` (not per version), so all served versions of a CRD share one set of
objects, as with ``conversion: None`` upstream.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .scale import BUILTIN, BUILTIN_SCALABLE, ScalePaths

ALL_VERBS = ("create", "delete", "deletecollection", "get", "list", "patch", "update", "watch")

Converter = Callable[[dict[str, Any]], dict[str, Any]]


@dataclass(frozen=True)
class ResourceType:
    group: str
    version: str
    resource: str  # plural, lower case
    kind: str
    namespaced: bool
    singular: str = ""
    short_names: tuple[str, ...] = ()
    categories: tuple[str, ...] = ()
    verbs: tuple[str, ...] = ALL_VERBS
    subresources: tuple[str, ...] = ()
    # Custom resources: the version's structural schema and printer columns.
    schema: dict[str, Any] | None = field(default=None, compare=False, hash=False)
    printer_columns: tuple[dict[str, Any], ...] | None = None
    custom: bool = False
    # Another stored shape (events.k8s.io Events are stored as core Events).
    storage_group: str | None = None
    storage_resource: str | None = None
    to_storage: Converter | None = field(default=None, compare=False, hash=False)
    from_storage: Converter | None = field(default=None, compare=False, hash=False)
    # How names are checked: "subdomain" (DNS-1123, most kinds), "label" (Namespace,
    # Service), "path" (RBAC kinds, e.g. "system:discovery").
    name_rule: str = "subdomain"
    # Custom resources: the CRD version's selectableFields (built-ins: see selectors.py).
    selectable_fields: tuple[str, ...] = ()
    # Custom resources: the Warning every request to a deprecated served version gets.
    deprecation_warning: str | None = None
    # Custom resources with a scale subresource: where replicas and the selector live.
    scale: ScalePaths | None = field(default=None, compare=False, hash=False)
    # A PUT of an object that does not exist creates it (upstream's AllowCreateOnUpdate
    # of the kind's registry strategy; custom resources: never).
    create_on_update: bool = False

    @property
    def scale_paths(self) -> ScalePaths | None:
        """Where the ``scale`` subresource reads and writes replicas, if it has one."""
        if "scale" not in self.subresources:
            return None
        if self.scale is not None:
            return self.scale
        return BUILTIN if (self.group, self.resource) in BUILTIN_SCALABLE else None

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def group_resource(self) -> str:
        """Storage key of the type: objects are shared by all its versions."""
        group = self.group if self.storage_group is None else self.storage_group
        resource = self.resource if self.storage_resource is None else self.storage_resource
        return f"{group}/{resource}"

    @property
    def has_status(self) -> bool:
        return "status" in self.subresources

    @property
    def list_kind(self) -> str:
        return self.kind + "List"


class Registry:
    """Mutable set of served types (CRDs come and go); readers get consistent snapshots."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._types: dict[tuple[str, str, str], ResourceType] = {}
        # Versions of each group, most preferred first.
        self._group_versions: dict[str, list[str]] = {}

    def add(self, rt: ResourceType, *, preferred: bool = False) -> None:
        with self._lock:
            self._types[(rt.group, rt.version, rt.resource)] = rt
            versions = self._group_versions.setdefault(rt.group, [])
            if rt.version not in versions:
                if preferred:
                    versions.insert(0, rt.version)
                else:
                    versions.append(rt.version)

    def remove_group_resource(self, group: str, resource: str) -> None:
        with self._lock:
            for key in [k for k in self._types if k[0] == group and k[2] == resource]:
                del self._types[key]
            self._reindex_versions()

    def replace_crd(self, group: str, resource: str, types: list[ResourceType],
                    preferred_version: str) -> None:
        """Swap in the served versions of one CRD at once."""
        with self._lock:
            for key in [k for k in self._types if k[0] == group and k[2] == resource]:
                del self._types[key]
            for rt in types:
                self._types[(rt.group, rt.version, rt.resource)] = rt
            self._reindex_versions(preferred={group: preferred_version})

    def _reindex_versions(self, preferred: dict[str, str] | None = None) -> None:
        old = self._group_versions
        new: dict[str, list[str]] = {}
        for g, v, _ in self._types:
            new.setdefault(g, [])
            if v not in new[g]:
                new[g].append(v)
        for g, versions in new.items():
            rank = {v: i for i, v in enumerate(old.get(g, []))}
            versions.sort(key=lambda v: (rank.get(v, len(rank)), _version_rank(v)))
            if preferred and g in preferred and preferred[g] in versions:
                versions.remove(preferred[g])
                versions.insert(0, preferred[g])
        self._group_versions = new

    def get(self, group: str, version: str, resource: str) -> ResourceType | None:
        return self._types.get((group, version, resource))

    def types(self) -> list[ResourceType]:
        with self._lock:
            return list(self._types.values())

    def groups(self) -> dict[str, list[str]]:
        with self._lock:
            return {g: list(v) for g, v in self._group_versions.items()}

    def in_group_version(self, group: str, version: str) -> list[ResourceType]:
        with self._lock:
            return [rt for (g, v, _), rt in self._types.items() if g == group and v == version]

    def by_kind(self, group: str, kind: str) -> ResourceType | None:
        """The preferred version's type for ``group``/``kind``."""
        with self._lock:
            versions = self._group_versions.get(group, [])
            candidates = [rt for rt in self._types.values()
                          if rt.group == group and rt.kind == kind]
        candidates.sort(key=lambda rt: versions.index(rt.version)
                        if rt.version in versions else 99)
        return candidates[0] if candidates else None


def _version_rank(version: str) -> tuple[int, int, int]:
    """Kubernetes version priority: GA > beta > alpha, higher numbers first."""
    import re

    m = re.fullmatch(r"v(\d+)(?:(alpha|beta)(\d+))?", version)
    if not m:
        return (3, 0, 0)
    major = int(m.group(1))
    stage = {"": 0, "beta": 1, "alpha": 2}[m.group(2) or ""]
    minor = int(m.group(3) or 0)
    return (stage, -major, -minor)
