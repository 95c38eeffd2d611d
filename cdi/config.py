"""CDIConfig: the effective settings the controllers and the populator read (pure).

The operator keeps one cluster-scoped CDIConfig named ``config``. Its ``spec`` is what an
administrator asked for; its ``status`` is what is in force, computed here, so that
every reader (the DataVolume controller, the populator) reads one answer:

- ``status.filesystemOverhead``: ``global`` (spec's when valid, else 0.06) and an entry
  for every StorageClass: spec's per-class value, else the class's own
  ``localcluster.rootdisk.io/filesystem-overhead`` annotation (a rootdisk extension: a
  class that measured its overhead says so), else the global value;
- ``status.defaultPodResourceRequirements``: spec's, else upstream's defaults;
- ``status.importRetryLimit`` (rootdisk extension): retryable importer failures before a
  DataVolume fails;
- ``status.uploadProxyURL``, as upstream: spec's ``uploadProxyURLOverride`` when set,
  else the host of an Ingress (in the CDI namespace) that routes to the upload proxy's
  Service, else absent. ``rootdisk image-upload`` uploads there (https://) when it is
  not told a URL.

Invalid values never reach the status; each one is reported as a problem naming the field.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from sizes import DEFAULT_OVERHEAD, format_overhead, parse_overhead
from vocab import cdi as api

DEFAULT_POD_RESOURCES: Mapping[str, Mapping[str, str]] = {
    "limits": {"cpu": "750m", "memory": "600M"},
    "requests": {"cpu": "100m", "memory": "60M"},
}
DEFAULT_IMPORT_RETRY_LIMIT = 5
CLAIM_ADOPTION_GATE = "DataVolumeClaimAdoption"
"""Upstream's feature gate (``spec.featureGates`` of CDIConfig): every DataVolume may adopt
an existing claim of its name unless its ``allowClaimAdoption`` annotation says no."""


@dataclass(frozen=True)
class ConfigStatus:
    status: dict[str, Any]
    problems: tuple[str, ...]


def feature_gates(config: Mapping[str, Any] | None) -> frozenset[str]:
    """The feature gates CDIConfig's ``spec.featureGates`` enables (none when it is absent
    or not a list of strings), as upstream's ``CDIConfigFeatureGates`` reads them."""
    gates = ((config or {}).get("spec") or {}).get("featureGates")
    if not isinstance(gates, list):
        return frozenset()
    return frozenset(g for g in gates if isinstance(g, str))


def with_preallocation(dv: Mapping[str, Any],
                       status: Mapping[str, Any] | None) -> Mapping[str, Any]:
    """The DataVolume with ``spec.preallocation`` as upstream's ``GetPreallocation``
    decides it: its own when set, else CDIConfig's ``status.preallocation`` (the cluster's
    default) when that is true; unchanged otherwise."""
    spec = dv.get("spec") or {}
    if spec.get("preallocation") is not None or not (status or {}).get("preallocation"):
        return dv
    return {**dv, "spec": {**spec, "preallocation": True}}


def upload_proxy_url(*, spec: Mapping[str, Any], ingresses: Iterable[Mapping[str, Any]],
                     service: str) -> str | None:
    """Where uploads go from outside: the override, else the first Ingress (by name)
    whose default backend or one of whose paths is ``service``."""
    override = spec.get("uploadProxyURLOverride")
    if isinstance(override, str) and override:
        return override
    for ing in sorted(ingresses, key=lambda i: str((i.get("metadata") or {}).get("name"))):
        ing_spec = ing.get("spec") or {}
        rules = ing_spec.get("rules") or []
        if _backend_service(ing_spec.get("defaultBackend")) == service:
            host = next((r.get("host") for r in rules if r.get("host")), None)
            if host:
                return str(host)
        for rule in rules:
            paths = (rule.get("http") or {}).get("paths") or []
            if rule.get("host") and any(_backend_service(p.get("backend")) == service
                                        for p in paths):
                return str(rule["host"])
    return None


def _backend_service(backend: Mapping[str, Any] | None) -> str | None:
    name = ((backend or {}).get("service") or {}).get("name")
    return str(name) if name else None


def compute_status(
    *, spec: Mapping[str, Any] | None, storage_classes: Iterable[Mapping[str, Any]],
    ingresses: Iterable[Mapping[str, Any]] = (),
) -> ConfigStatus:
    """The status for a CDIConfig ``spec`` given the cluster's StorageClasses (and the
    Ingresses of the CDI namespace, for the upload proxy's URL)."""
    spec = spec or {}
    problems: list[str] = []
    overhead_spec = spec.get("filesystemOverhead") or {}
    global_text = overhead_spec.get("global")
    global_value = DEFAULT_OVERHEAD
    if global_text is not None:
        try:
            global_value = parse_overhead(global_text)
        except ValueError as err:
            problems.append(f"spec.filesystemOverhead.global: {err}; using the default")
    per_class_spec = overhead_spec.get("storageClass") or {}
    per_class: dict[str, str] = {}
    for name, text in sorted(per_class_spec.items()):
        try:
            per_class[name] = format_overhead(parse_overhead(text))
        except ValueError as err:
            problems.append(f"spec.filesystemOverhead.storageClass[{name}]: {err}")
    for sc in storage_classes:
        meta = sc.get("metadata") or {}
        name = str(meta.get("name"))
        if name in per_class or name in per_class_spec:
            continue
        annotated = (meta.get("annotations") or {}).get(api.OVERHEAD_CLASS_ANNOTATION)
        value = global_value
        if annotated is not None:
            try:
                value = parse_overhead(annotated)
            except ValueError as err:
                problems.append(f"StorageClass {name} annotation "
                                f"{api.OVERHEAD_CLASS_ANNOTATION}: {err}")
        per_class[name] = format_overhead(value)
    resources = spec.get("podResourceRequirements") or DEFAULT_POD_RESOURCES
    limit = spec.get("importRetryLimit")
    if limit is None:
        limit = DEFAULT_IMPORT_RETRY_LIMIT
    elif not isinstance(limit, int) or isinstance(limit, bool) or limit < 0:
        problems.append(f"spec.importRetryLimit: {limit!r} is not a non-negative integer")
        limit = DEFAULT_IMPORT_RETRY_LIMIT
    class_names = {str((sc.get("metadata") or {}).get("name")) for sc in storage_classes}
    scratch = spec.get("scratchSpaceStorageClass")
    status = {
        "filesystemOverhead": {"global": format_overhead(global_value),
                               "storageClass": per_class},
        "defaultPodResourceRequirements": {k: dict(v) for k, v in resources.items()},
        "importRetryLimit": limit,
        "uploadProxyURL": upload_proxy_url(spec=spec, ingresses=ingresses,
                                           service=api.UPLOAD_PROXY_SERVICE),
        # as upstream's config controller: the named class when it exists, else "" (the
        # target's class; rootdisk's one-pass imports need no scratch space at all)
        "scratchSpaceStorageClass": scratch if scratch in class_names else "",
        "preallocation": spec.get("preallocation") is True or None,  # omitempty
        "imagePullSecrets": list(spec.get("imagePullSecrets") or []) or None,  # omitempty
    }
    return ConfigStatus(status=status, problems=tuple(problems))


def overhead_for(
    *, status: Mapping[str, Any] | None, storage_class: str | None, volume_mode: str,
) -> Fraction:
    """The filesystem overhead for a claim: 0 for Block, else the class's, else global.

    As upstream's ``GetFilesystemOverheadForStorageClass`` (CDI c07cdb6fb): a claim whose
    ``storageClassName`` is the empty string (no class: a statically provisioned volume)
    and a CDIConfig not reconciled yet (no status, or no ``filesystemOverhead`` in it)
    give 0; an unparsable stored value gives the default."""
    if volume_mode == "Block" or storage_class == "":
        return Fraction(0)
    overhead = (status or {}).get("filesystemOverhead")
    if not overhead:
        return Fraction(0)
    text = ((overhead.get("storageClass") or {}).get(storage_class or "")
            or overhead.get("global"))
    if text is None:
        return DEFAULT_OVERHEAD
    try:
        return parse_overhead(text)
    except ValueError:
        return DEFAULT_OVERHEAD
